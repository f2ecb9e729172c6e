/* sweep_internal.h - what the files of deftsim sweep share (sweep.c, sweep_plan.c): the
 * plan (axes, variants, points) and the sweep's state. deftsim_sweep.h is the interface. */
#ifndef DEFTSIM_SWEEP_INTERNAL_H
#define DEFTSIM_SWEEP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deftsim_engine.h"
#include "deftsim_platform.h"
#include "deftsim_sweep.h"

#define MANIFEST_FORMAT "deftsim-sweep"
#define MANIFEST_VERSION 1

typedef struct {
    char *key;               /* "section.key" */
    char **values;
    size_t nvalues;
    int from_scenario;       /* a list in the scenario file (model, trace) rather than --vary */
} axis;

typedef struct {
    deftsim_config *cfg;     /* the scenario with this variant's axis values set */
    char *label;             /* folder name under points/; "" without axes */
    size_t *value_index;     /* naxes: which value of each axis */
    deftsim_platform_record platform; /* topology = file: the user's platform file as read */
} variant;

typedef struct {
    size_t variant;
    deftsim_method method;
    double density;
    uint32_t P;
    char *id;                /* [<label>/]<method>_d<density>_P<P> */
    char *file;              /* points/<id>.csv, relative to the output folder */
    deftsim_point_state state;
    int ran_now;             /* run by this sweep */
    int in_shard;            /* shard == shard_index (1 without shards) */
    unsigned shard;          /* the shard it is dealt to (deftsim_sweep_deal; 0 without shards) */
    double cost;             /* its estimated cost: gradient elements x P x iterations */
    uint64_t rows;
    double seconds, prepare_seconds, step_seconds;
    char *error;             /* FAILED: the message */
    deftsim_status error_status; /* FAILED in this sweep: the failure's status */
    char *finished;          /* UTC time it finished */
    char *git_commit;        /* build that wrote it */
    json_t *machine_state;   /* DONE: the machine's state while it ran (deftsim_noise_json) */
    json_t *stages;          /* DONE: where its wall time went (deftsim_stages_json) */
} point;

struct deftsim_sweep {
    deftsim_config *base;    /* the scenario as given, single-valued --vary settings applied */
    deftsim_sweep_options opt;
    axis *axes;
    size_t naxes;
    variant *variants;
    size_t nvariants;
    point *points;
    size_t npoints;
    json_t *identity;        /* what must match to resume in a folder */
    json_t *extra_points;    /* finished points in the folder's manifest outside this plan */
    char *started;
    int lock_fd;
    int shard_lock_fd;       /* a shard: shards/.shard-<I>-of-<N>.lock (-1: none) */
    int state_loaded;
    char *plan_sha256;       /* of the plan's point ids in order, one per line */
    /* Without shards, on a folder with shard files: their records were loaded (they are
     * folded into manifest.json and shards/ removed when the sweep begins); the first shard
     * file found running (NULL: none), which refuses the sweep. */
    int shards_found;
    char *shard_running;
};

#define SHARDS_DIR "shards"
#define SHARD_FORMAT "deftsim-sweep-shard"
#define PLAN_FORMAT "deftsim-sweep-plan"

/* ---- sweep_state.c: what sweep.c, sweep_shard.c and sweep_spread.c share -------------------- */

/* The path of rel in the output folder. */
void deftsim_sweep_path(const deftsim_sweep *s, const char *rel, char *buf, size_t cap);
/* 1 when path is a regular file. */
int deftsim_sweep_file_exists(const char *path);

/* A point's manifest entry; plan_only: as a pending point (the plan, without its record). */
json_t *deftsim_sweep_point_json(const deftsim_sweep *s, const point *p, int plan_only);
/* The manifest as deftsim_sweep writes it: every point, or (only_shard) only the points of
 * this shard without the points outside the plan; plan_only: every point pending. */
json_t *deftsim_sweep_manifest_json(const deftsim_sweep *s, const char *status,
                                    const char *finished, int rows_written, int only_shard,
                                    int plan_only);
/* Sets a point's state from a manifest entry (done only when its file exists). */
void deftsim_sweep_point_from_json(deftsim_sweep *s, point *p, json_t *e);
/* The engine options of every point: RAM, preparation threads, the team. */
deftsim_run_options deftsim_sweep_engine_options(const deftsim_sweep *s);
/* Spread mode: the team when it has more than one rank, else NULL. */
const deftsim_team *deftsim_sweep_spread_team(const deftsim_sweep *s);

/* ---- sweep_shard.c, sweep_plan.c, sweep_spread.c ------------------------------------------- */

/* sweep_shard.c. After the manifest's records are loaded: reads shards/ (a shard: checks the
 * plan and the other shards' split, takes its own file's records; without shards: takes
 * every shard's records for the fold). Writes nothing. */
deftsim_status deftsim_sweep_shards_load(deftsim_sweep *s);
/* A shard, before its first point: manifest.json and shards/plan.json created when absent,
 * each by exactly one shard (an exclusive link), then checked as a resume checks them. */
deftsim_status deftsim_sweep_shard_begin(deftsim_sweep *s);
/* A shard's records to shards/shard-<I>-of-<N>.json (atomically; only this shard writes it). */
deftsim_status deftsim_sweep_shard_write(const deftsim_sweep *s, const char *status,
                                         const char *finished);
/* Without shards, after the manifest holds the folded records: removes shards/. */
void deftsim_sweep_shards_remove(const deftsim_sweep *s);
/* Whether name is a temporary file of sweep_shard.c's exclusive writers ("<file>.new.XXXXXX",
 * "<file>.join.XXXXXX"). */
int deftsim_sweep_shard_tmp_name(const char *name);

/* Expands the axes of s->base and s->opt into variants (their configurations checked and
 * their platform files read), points and the identity (sweep_plan.c). */
deftsim_status deftsim_sweep_plan(deftsim_sweep *s);

/* Deals the points to the shard_count shards by estimated cost (sweep_plan.c, docs/CLUSTER.md):
 * longest first (ties: plan order) onto the shard with the least estimated work so far (ties:
 * the lowest index), so that every shard computes the same assignment; in_shard follows. */
void deftsim_sweep_deal(deftsim_sweep *s);
/* The shard of plan entry i as a folder's shards/plan.json records it ("shard"; a plan written
 * before points were dealt by cost has none: i mod n). */
unsigned deftsim_sweep_entry_shard(json_t *entry, size_t i, unsigned n);

/* A point in words, "topk d=0.01 P=4" and the variant's label (sweep_plan.c); a failed
 * point's message led by its words. */
void deftsim_sweep_words(const deftsim_sweep *s, const point *p, char *buf, size_t cap);
void deftsim_sweep_failure_of(const deftsim_sweep *s, const point *p, char *buf, size_t cap);

/* sweep_spread.c. Spread mode: rank 0's list of the points to run (indices), on every rank;
 * *idx allocated. */
deftsim_status deftsim_sweep_spread_list(const deftsim_sweep *s, uint64_t **idx, uint64_t *n);
/* Spread mode, ranks > 0: the points rank 0 runs, with it, writing nothing. */
deftsim_status deftsim_sweep_spread_follow(deftsim_sweep *s, deftsim_sweep_summary *sum);

#endif
