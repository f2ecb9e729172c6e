/* deftsim_nccl_validate.h - NCCL's collectives in the simulation against nccl-tests as measured:
 * reading nccl-tests' printed tables, the corpus of published ones (sim/validation/nccl), and
 * simulating every row of a table on a scenario's network (docs/NETWORK.md, "Validation
 * against nccl-tests"). `deftsim validate nccl` prints and fits from these. */
#ifndef DEFTSIM_NCCL_VALIDATE_H
#define DEFTSIM_NCCL_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_error.h"

/* The collectives nccl-tests measures that the simulation runs. */
typedef enum {
    DEFTSIM_NT_ALLREDUCE,
    DEFTSIM_NT_ALLGATHER,
    DEFTSIM_NT_REDUCESCATTER,
    DEFTSIM_NT_BROADCAST,
    DEFTSIM_NT_ALLTOALL,
    DEFTSIM_NT_SENDRECV,
    DEFTSIM_NT_COUNT
} deftsim_nt_coll;

/* "allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "sendrecv";
 * NULL-terminated. */
extern const char *const deftsim_nt_coll_names[];

/* One printed row: the size column (bytes, as nccl-tests counts it: the whole buffer of the
 * collective) and the out-of-place time, algbw and busbw. */
typedef struct {
    uint64_t bytes;
    double time_us, algbw, busbw;
} deftsim_nt_row;

typedef struct {
    char id[128];          /* the corpus id, or the file's name */
    deftsim_nt_coll coll;
    char gpu[64];          /* "H100 SXM5 ..." (corpus) */
    char preset[32];       /* the preset the rows run on: dgx-h100, dgx-a100, dgx1-v100 */
    uint32_t gpus_per_node, nodes;
    uint32_t nics_per_node;  /* 0: the preset's */
    double nic_gbps;         /* Gbit/s of a NIC; 0: the preset's */
    char algo[32], proto[32]; /* forced (NCCL_ALGO, NCCL_PROTO), or "default" */
    uint32_t gpus_per_thread; /* GPUs one thread drove (nccl-tests' -g, its header's nGpus);
                                 0 is 1 */
    char tuning[8];           /* the NCCL release whose tuning figures run (nccl_tuning): "2.8"
                                 for a table of NCCL 2.8, "" for the default */
    char platform[256];       /* the corpus's platform_keys: "KEY=VALUE;..." [network] keys
                                 where the machine differs from its preset; "" for none */
    deftsim_nt_row *rows;
    size_t nrows;
} deftsim_nt_table;

/* Reads the rows of one nccl-tests output file (lines as all_reduce_perf and its siblings print
 * them; '#' lines, NCCL's INFO lines and other text are skipped). A file with no row is refused
 * with a message naming it. Fills rows and nrows, gpus_per_thread from the header's
 * "nGpus N" and tuning from its "NCCL version 2.8..." where the file has them (otherwise leaves
 * them). */
deftsim_status deftsim_nt_read_rows(const char *path, deftsim_nt_table *t);

/* The same for one test of a file that holds several (nccl-tests runs printed one after
 * another into one log): the rows between its "# Collective test starting" line and the next
 * (test 0 also takes rows before the first such line); its "nGpus" header; the file's "NCCL
 * version". test = SIZE_MAX reads every row, as deftsim_nt_read_rows. A test with no row is
 * refused, naming the file and the test (counted from 1). */
deftsim_status deftsim_nt_read_test_rows(const char *path, size_t test, deftsim_nt_table *t);

/* A test a file holds, by its "# Collective test starting: NAME" line. */
typedef struct {
    char name[32];        /* "all_gather_perf", "sendrecv_perf" */
    int known;            /* a collective the simulation runs: coll says which */
    deftsim_nt_coll coll;
} deftsim_nt_test;

/* The tests of a file in order: *ntests of them (0 for a file without a starting line), the
 * first max written to tests. */
deftsim_status deftsim_nt_file_tests(const char *path, deftsim_nt_test *tests, size_t max,
                                     size_t *ntests);

/* The collective a file names in its "# Collective test starting: all_gather_perf" line (or its
 * name: "all_gather_perf.txt"): DEFTSIM_OK with *coll set, DEFTSIM_E_INPUT when neither names
 * one. */
deftsim_status deftsim_nt_detect_coll(const char *path, deftsim_nt_coll *coll);

/* The corpus: DIR/index.csv (one line per table: id, collective, gpu, gpus_per_node, nodes,
 * fabric, nic, nics_per_node, nic_gbps, nccl_version, algo, proto, other_env, dtype, command
 * (its "-g N" the GPUs a thread drove), status at column 16, ..., platform_keys at column 20)
 * and DIR/<id>.txt. Tables whose status is not "ok" are left out; *n tables are returned in a
 * malloc'd array (deftsim_nt_tables_free). Errors name the file and line. */
deftsim_status deftsim_nt_read_corpus(const char *dir, deftsim_nt_table **tables, size_t *n);

void deftsim_nt_tables_free(deftsim_nt_table *tables, size_t n);

/* Simulates every row of t on the network of a default scenario with, in order: the table's
 * preset, library = nccl, approximate mode, its node shape, the `under` keys (a fit's trial
 * figures: the table's own keys that follow win over them), its platform keys, the GPUs a
 * thread drove, its forced algorithm and protocol, then the `sets` ("network.KEY=VALUE",
 * applied last, so they win). sim_us[i] gets row i's simulated time (microseconds); a row
 * whose per-rank share is empty gets NaN. One simulation for the whole table. */
/* choice, when not NULL, gets for each row the call's algorithm, protocol and channels as the
 * simulation planned them, "ring/LL128/16" ("p2p/Simple/16" for the alltoall's group; "" for a
 * row not simulated). */
typedef struct {
    char text[40];
} deftsim_nt_choice;

deftsim_status deftsim_nt_simulate(const deftsim_nt_table *t, const char *const *under, size_t nunder,
                                   const char *const *sets, size_t nsets, double *sim_us,
                                   deftsim_nt_choice *choice);

#endif
