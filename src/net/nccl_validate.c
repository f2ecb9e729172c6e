/* nccl_validate.c - nccl-tests' tables read and simulated (deftsim_nccl_validate.h).
 *
 * How a row maps to a step: nccl-tests' size column is the whole buffer of the collective
 * (its doc/PERFORMANCE.md): the allreduce and broadcast vector; the gathered output of an
 * allgather (each rank's block is size / n); the input of a reduce-scatter (each rank keeps
 * size / n); the send buffer of an alltoall (size / n to each rank); what each rank of a
 * sendrecv sends to the next rank (r + 1 mod n) while it receives as much from the one before,
 * the whole of it one NCCL group. The reduce-scatter runs as
 * the ring allgather of its blocks: NCCL's ring reduce-scatter moves the same blocks in the same
 * n - 1 steps, and the reduction takes no time here. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_config.h"
#include "deftsim_nccl_validate.h"
#include "deftsim_schedule.h"
#include "deftsim_sim.h"
#include "deftsim_util.h"

const char *const deftsim_nt_coll_names[] = {"allreduce", "allgather", "reducescatter",
                                             "broadcast", "alltoall", "sendrecv", NULL};

static int parse_u64(const char *s, uint64_t *v)
{
    if (!*s || !isdigit((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *v = x;
    return 0;
}

static int parse_dbl(const char *s, double *v)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(x)) return -1;
    *v = x;
    return 0;
}

/* A data row: size, count (integers), a type name, the redop, the root (nccl-tests 2.x on;
 * older ones print none), then groups of four: time, algbw, busbw and the error count, out of
 * place first (then in place). So the root is there when the fields past the redop are one more
 * than a multiple of four. Large times are printed without a decimal point. */
static int parse_row(char *line, deftsim_nt_row *row)
{
    char *tok[32];
    size_t n = 0;
    for (char *t = strtok(line, " \t\r\n"); t && n < 32; t = strtok(NULL, " \t\r\n")) tok[n++] = t;
    uint64_t size, count;
    if (n < 7 || parse_u64(tok[0], &size) || parse_u64(tok[1], &count)) return -1;
    if (!isalpha((unsigned char)tok[2][0])) return -1;
    size_t i = (n - 4) % 4 == 1 ? 5 : 4;
    if (i + 2 >= n) return -1;
    if (parse_dbl(tok[i], &row->time_us) || parse_dbl(tok[i + 1], &row->algbw) ||
        parse_dbl(tok[i + 2], &row->busbw))
        return -1;
    row->bytes = size;
    return 0;
}

/* The tuning figures a run of NCCL `version` ("2.8.4+cuda11.2", "2.26.2") takes: 2.8.4's for
 * any 2.8 release, the default's (2.30.7) for every other. */
static void tuning_of_version(const char *version, char *out, size_t cap)
{
    while (*version == ' ') version++;
    snprintf(out, cap, "%s", strncmp(version, "2.8.", 4) == 0 ? "2.8" : "");
}

static const char TEST_START[] = "Collective test starting";

deftsim_status deftsim_nt_read_rows(const char *path, deftsim_nt_table *t)
{
    return deftsim_nt_read_test_rows(path, SIZE_MAX, t);
}

deftsim_status deftsim_nt_read_test_rows(const char *path, size_t test, deftsim_nt_table *t)
{
    FILE *f = fopen(path, "r");
    if (!f) return deftsim_error_set(DEFTSIM_E_INPUT, "%s: cannot open: %s", path, strerror(errno));
    char line[4096];
    size_t cap = 0, at = 0, starts = 0; /* the test a line belongs to: rows before the first
                                            starting line belong to the first test */
    t->rows = NULL;
    t->nrows = 0;
    while (fgets(line, sizeof line, f)) {
        const char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (strstr(s, TEST_START) && starts++) at++;
        const char *v = strstr(s, "NCCL version "); /* the library's: every test of the file */
        if (v) tuning_of_version(v + 13, t->tuning, sizeof t->tuning);
        if (test != SIZE_MAX && at != test) continue;
        const char *g = *s == '#' ? strstr(s, "nGpus ") : NULL;
        uint64_t ng;
        if (g && sscanf(g + 6, "%" SCNu64, &ng) == 1 && ng >= 1 && ng <= 64) t->gpus_per_thread = (uint32_t)ng;
        if (*s == '#' || !isdigit((unsigned char)*s)) continue;
        deftsim_nt_row row;
        if (parse_row(line, &row)) continue;
        if (deftsim_grow(&t->rows, &cap, t->nrows + 1, sizeof *t->rows)) {
            fclose(f);
            free(t->rows);
            t->rows = NULL;
            return deftsim_error_nomem("%s", path);
        }
        t->rows[t->nrows++] = row;
    }
    fclose(f);
    if (!t->nrows && test != SIZE_MAX)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: test %zu: no nccl-tests row (size, count, type, ..., time, "
                                 "algbw, busbw)",
                                 path, test + 1);
    if (!t->nrows)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: no nccl-tests row (size, count, type, ..., time, algbw, busbw)",
                                 path);
    return DEFTSIM_OK;
}

static int coll_from_text(const char *s, deftsim_nt_coll *c)
{
    static const char *const perf[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                       "alltoall", "sendrecv"};
    for (int i = 0; i < DEFTSIM_NT_COUNT; i++)
        if (strstr(s, perf[i])) {
            *c = (deftsim_nt_coll)i;
            return 0;
        }
    return -1;
}

deftsim_status deftsim_nt_file_tests(const char *path, deftsim_nt_test *tests, size_t max,
                                     size_t *ntests)
{
    FILE *f = fopen(path, "r");
    if (!f) return deftsim_error_set(DEFTSIM_E_INPUT, "%s: cannot open: %s", path, strerror(errno));
    char line[4096];
    size_t n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, TEST_START);
        if (!at) continue;
        if (n < max) {
            deftsim_nt_test *x = &tests[n];
            const char *name = at + sizeof TEST_START - 1;
            while (*name == ':' || *name == ' ') name++;
            size_t len = strcspn(name, " \t\r\n");
            snprintf(x->name, sizeof x->name, "%.*s", (int)(len < sizeof x->name ? len : sizeof x->name - 1), name);
            deftsim_nt_coll c;
            x->known = coll_from_text(x->name, &c) == 0;
            x->coll = x->known ? c : DEFTSIM_NT_ALLREDUCE;
        }
        n++;
    }
    fclose(f);
    *ntests = n;
    return DEFTSIM_OK;
}

deftsim_status deftsim_nt_detect_coll(const char *path, deftsim_nt_coll *coll)
{
    FILE *f = fopen(path, "r");
    if (!f) return deftsim_error_set(DEFTSIM_E_INPUT, "%s: cannot open: %s", path, strerror(errno));
    char line[4096];
    int found = -1;
    while (found && fgets(line, sizeof line, f))
        if (strstr(line, "Collective test starting")) found = coll_from_text(line, coll);
    fclose(f);
    if (found) {
        const char *base = strrchr(path, '/');
        found = coll_from_text(base ? base + 1 : path, coll);
    }
    if (found)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: names no collective (no \"Collective test starting\" line, no "
                                 "all_reduce/all_gather/reduce_scatter/broadcast/alltoall/sendrecv in its "
                                 "name): give --collective",
                                 path);
    return DEFTSIM_OK;
}

/* Splits one CSV line (RFC 4180 quoting) in place into at most max fields. */
static size_t csv_split(char *line, char **field, size_t max)
{
    size_t n = 0;
    char *r = line, *w = line;
    while (n < max) {
        field[n++] = w;
        if (*r == '"') {
            r++;
            for (;;) {
                if (!*r) break;
                if (*r == '"' && r[1] == '"') *w++ = '"', r += 2;
                else if (*r == '"') {
                    r++;
                    break;
                } else *w++ = *r++;
            }
        }
        while (*r && *r != ',' && *r != '\n' && *r != '\r') *w++ = *r++;
        int more = *r == ',';
        *w++ = '\0';
        if (!more) break;
        r++;
    }
    return n;
}

static const char *preset_of_gpu(const char *gpu)
{
    if (strstr(gpu, "H100") || strstr(gpu, "H200")) return "dgx-h100";
    if (strstr(gpu, "A100")) return "dgx-a100";
    if (strstr(gpu, "V100")) return "dgx1-v100";
    return NULL;
}

static void lower_word(const char *in, char *out, size_t cap)
{
    size_t i = 0;
    for (; in[i] && !isspace((unsigned char)in[i]) && in[i] != '(' && i + 1 < cap; i++)
        out[i] = (char)tolower((unsigned char)in[i]);
    out[i] = '\0';
}

/* One index line into a table (rows not read yet); 1 to skip it, 0 to keep, -1 on error. */
static int index_line(const char *path, size_t lineno, char *line, deftsim_nt_table *t)
{
    char *f[24];
    size_t n = csv_split(line, f, 24);
    if (n < 16) {
        deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu: %zu fields, fewer than the 16 up to status",
                          path, lineno, n);
        return -1;
    }
    if (strcmp(f[15], "ok") != 0) return 1;
    memset(t, 0, sizeof *t);
    snprintf(t->id, sizeof t->id, "%s", f[0]);
    int c = -1;
    for (int i = 0; i < DEFTSIM_NT_COUNT; i++)
        if (strcmp(f[1], deftsim_nt_coll_names[i]) == 0) c = i;
    const char *preset = preset_of_gpu(f[2]);
    uint64_t g = 0, nodes = 0, nics = 0;
    if (c < 0 || !preset || parse_u64(f[3], &g) || parse_u64(f[4], &nodes) || !g || !nodes ||
        g > 64 || nodes > 4096) {
        deftsim_error_set(DEFTSIM_E_INPUT,
                          "%s:%zu (%s): collective '%s', gpu '%s', gpus_per_node '%s', nodes '%s': "
                          "need one of allreduce/allgather/reducescatter/broadcast/alltoall/sendrecv, an "
                          "H100, A100 or V100, and counts in [1, 64] and [1, 4096]",
                          path, lineno, f[0], f[1], f[2], f[3], f[4]);
        return -1;
    }
    t->coll = (deftsim_nt_coll)c;
    snprintf(t->gpu, sizeof t->gpu, "%s", f[2]);
    snprintf(t->preset, sizeof t->preset, "%s", preset);
    t->gpus_per_node = (uint32_t)g;
    t->nodes = (uint32_t)nodes;
    if (f[7][0] && !parse_u64(f[7], &nics)) t->nics_per_node = (uint32_t)nics;
    if (f[8][0] && parse_dbl(f[8], &t->nic_gbps)) t->nic_gbps = 0;
    lower_word(f[10], t->algo, sizeof t->algo);
    lower_word(f[11], t->proto, sizeof t->proto);
    const char *gopt = strstr(f[14], "-g ");
    uint64_t ng = 1;
    if (gopt && (sscanf(gopt + 3, "%" SCNu64, &ng) != 1 || ng < 1 || ng > 64)) {
        deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu (%s): command: '-g' needs a GPU count in [1, 64]",
                          path, lineno, f[0]);
        return -1;
    }
    t->gpus_per_thread = (uint32_t)ng;
    tuning_of_version(f[9], t->tuning, sizeof t->tuning);
    if (n > 19 && strlen(f[19]) >= sizeof t->platform) {
        deftsim_error_set(DEFTSIM_E_INPUT, "%s:%zu (%s): platform_keys: longer than %zu characters",
                          path, lineno, f[0], sizeof t->platform - 1);
        return -1;
    }
    if (n > 19) snprintf(t->platform, sizeof t->platform, "%s", f[19]);
    return 0;
}

deftsim_status deftsim_nt_read_corpus(const char *dir, deftsim_nt_table **tables, size_t *n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/index.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) return deftsim_error_set(DEFTSIM_E_INPUT, "%s: cannot open: %s", path, strerror(errno));
    deftsim_nt_table *out = NULL;
    size_t cnt = 0, cap = 0, lineno = 0;
    char line[8192];
    deftsim_status st = DEFTSIM_OK;
    while (!st && fgets(line, sizeof line, f)) {
        if (++lineno == 1 || line[0] == '\n') continue;
        if (deftsim_grow(&out, &cap, cnt + 1, sizeof *out)) {
            st = deftsim_error_nomem("%s", path);
            break;
        }
        int r = index_line(path, lineno, line, &out[cnt]);
        if (r < 0) st = DEFTSIM_E_INPUT; /* index_line recorded the message */
        if (r) continue;
        char rows[4096];
        snprintf(rows, sizeof rows, "%s/%s.txt", dir, out[cnt].id);
        st = deftsim_nt_read_rows(rows, &out[cnt]);
        if (!st) cnt++;
    }
    fclose(f);
    if (st) {
        deftsim_nt_tables_free(out, cnt);
        return st;
    }
    *tables = out;
    *n = cnt;
    return DEFTSIM_OK;
}

void deftsim_nt_tables_free(deftsim_nt_table *tables, size_t n)
{
    if (!tables) return;
    for (size_t i = 0; i < n; i++) free(tables[i].rows);
    free(tables);
}

/* The scenario of a table: a default one, its network keys in order, then the caller's. */
static deftsim_status table_config(const deftsim_nt_table *t, const char *const *under, size_t nunder,
                                   const char *const *sets, size_t nsets, deftsim_config **cfg)
{
    char kv[20][128];
    size_t nk = 0;
    uint32_t P = t->gpus_per_node * t->nodes;
    snprintf(kv[nk++], 128, "network.preset=%s", t->preset);
    snprintf(kv[nk++], 128, "network.gpus_per_node=%u", t->gpus_per_node);
    snprintf(kv[nk++], 128, "workers.counts=%u", P);
    if (t->nics_per_node && t->nic_gbps > 0) {
        /* More NICs than GPUs (a node's ports counted singly): as many as GPUs, their
         * bandwidth pooled. */
        uint32_t nics = t->nics_per_node <= t->gpus_per_node ? t->nics_per_node : t->gpus_per_node;
        double gbps = t->nic_gbps * t->nics_per_node / nics;
        snprintf(kv[nk++], 128, "network.nics_per_node=%u", nics);
        snprintf(kv[nk++], 128, "network.nic_bandwidth=%gGbps", gbps);
        snprintf(kv[nk++], 128, "network.bandwidth=%gGbps", gbps);
    }
    else {
        /* A run on fewer GPUs a node than the preset's NICs (nccl-tests on 1, 2 or 4 GPUs of an
         * 8-GPU node): each GPU has its own NIC, as on the preset's rail-optimized nodes; the
         * node's other NICs carry nothing of the run. */
        const deftsim_config_preset *pr = deftsim_config_preset_find(t->preset);
        for (size_t i = 0; pr && i < pr->nkeys; i++)
            if (!strcmp(pr->keys[i].key, "nics_per_node") &&
                strtoul(pr->keys[i].value, NULL, 10) > t->gpus_per_node)
                snprintf(kv[nk++], 128, "network.nics_per_node=%u", t->gpus_per_node);
    }
    if (t->tuning[0]) snprintf(kv[nk++], 128, "network.nccl_tuning=%s", t->tuning);
    size_t nbefore = nk; /* the `under` keys go here, before the platform's */
    /* The platform keys: "KEY=VALUE;KEY=VALUE", each a [network] key. */
    char plat[sizeof t->platform];
    snprintf(plat, sizeof plat, "%s", t->platform);
    size_t npairs = 0;
    for (char *save = NULL, *k = strtok_r(plat, ";", &save); k; k = strtok_r(NULL, ";", &save)) {
        while (*k == ' ') k++;
        if (!*k) continue;
        if (++npairs > 8 || !strchr(k, '='))
            return deftsim_error_set(DEFTSIM_E_INPUT, "table %s: platform_keys '%s': need at most "
                                     "8 KEY=VALUE pairs separated by ';'", t->id, t->platform);
        snprintf(kv[nk++], 128, "network.%s", k);
    }
    snprintf(kv[nk++], 128, "network.nccl_gpus_per_thread=%u",
             t->gpus_per_thread ? t->gpus_per_thread : 1);
    if (strcmp(t->algo, "ring") == 0 || strcmp(t->algo, "tree") == 0 || strcmp(t->algo, "nvls") == 0 ||
        strcmp(t->algo, "nvlstree") == 0)
        snprintf(kv[nk++], 128, "network.nccl_algorithm=%s", t->algo);
    if (strcmp(t->proto, "ll") == 0) snprintf(kv[nk++], 128, "network.nccl_proto=LL");
    else if (strcmp(t->proto, "ll128") == 0) snprintf(kv[nk++], 128, "network.nccl_proto=LL128");
    else if (strcmp(t->proto, "simple") == 0) snprintf(kv[nk++], 128, "network.nccl_proto=Simple");
    deftsim_status st = deftsim_config_default("validate", cfg);
    if (!st) st = deftsim_config_apply_override(*cfg, "gradients.model=resnet18_cifar10");
    if (!st) st = deftsim_config_apply_override(*cfg, "network.library=nccl");
    if (!st) st = deftsim_config_apply_override(*cfg, "network.mode=approximate");
    for (size_t i = 0; !st && i < nk; i++) {
        if (i == nbefore)
            for (size_t j = 0; !st && j < nunder; j++) st = deftsim_config_apply_override(*cfg, under[j]);
        if (!st) st = deftsim_config_apply_override(*cfg, kv[i]);
    }
    for (size_t i = 0; !st && i < nsets; i++) st = deftsim_config_apply_override(*cfg, sets[i]);
    if (!st) st = deftsim_config_check(*cfg);
    if (st) {
        deftsim_config_free(*cfg);
        *cfg = NULL;
        return deftsim_error_wrap(st, "table %s", t->id);
    }
    return DEFTSIM_OK;
}

/* Row r's step: its kind and each rank's bytes; 0 when the per-rank share is empty. */
static int row_step(const deftsim_nt_table *t, size_t r, uint32_t P, deftsim_step_kind *kind,
                    uint64_t *bytes)
{
    uint64_t s = t->rows[r].bytes;
    switch (t->coll) {
    case DEFTSIM_NT_ALLREDUCE: *kind = DEFTSIM_STEP_ALLREDUCE, *bytes = s; break;
    case DEFTSIM_NT_BROADCAST: *kind = DEFTSIM_STEP_BCAST, *bytes = s; break;
    case DEFTSIM_NT_ALLTOALL: *kind = DEFTSIM_STEP_ALLTOALL, *bytes = s / P; break;
    case DEFTSIM_NT_SENDRECV: *kind = DEFTSIM_STEP_SENDRECV, *bytes = s; break;
    default: *kind = DEFTSIM_STEP_ALLGATHER, *bytes = s / P; break;
    }
    return *bytes > 0;
}

deftsim_status deftsim_nt_simulate(const deftsim_nt_table *t, const char *const *under, size_t nunder,
                                   const char *const *sets, size_t nsets, double *sim_us,
                                   deftsim_nt_choice *choice)
{
    deftsim_config *cfg = NULL;
    deftsim_status st = table_config(t, under, nunder, sets, nsets, &cfg);
    if (st) return st;
    uint32_t P = t->gpus_per_node * t->nodes;
    deftsim_sim_params sp;
    deftsim_config_sim_params(cfg, P, 4, &sp);
    deftsim_schedule *s = calloc(t->nrows, sizeof *s);
    const deftsim_schedule **sp_list = calloc(t->nrows, sizeof *sp_list);
    size_t *idx = calloc(t->nrows, sizeof *idx), ns = 0;
    if (!s || !sp_list || !idx) {
        st = deftsim_error_nomem("table %s", t->id);
        goto done;
    }
    for (size_t r = 0; r < t->nrows; r++) {
        sim_us[r] = NAN;
        if (choice) choice[r].text[0] = '\0';
        deftsim_step_kind kind;
        uint64_t b;
        if (P < 2 || !row_step(t, r, P, &kind, &b)) continue;
        deftsim_nccl_algo a;
        deftsim_nccl_proto pr;
        uint32_t ch;
        if (choice && sp.library == DEFTSIM_LIB_NCCL && !deftsim_sim_nccl_choice(&sp, kind, b, &a, &pr, &ch))
            snprintf(choice[r].text, sizeof choice[r].text, "%s/%s/%u",
                     kind == DEFTSIM_STEP_ALLTOALL || kind == DEFTSIM_STEP_SENDRECV
                         ? "p2p"
                         : deftsim_nccl_algo_name(a),
                     deftsim_nccl_proto_names[pr], ch);
        deftsim_schedule_init(&s[ns], P);
        deftsim_step *step = deftsim_schedule_add(&s[ns], kind, "validate");
        if (!step) {
            deftsim_schedule_free(&s[ns]);
            st = DEFTSIM_E_NOMEM;
            goto done;
        }
        for (uint32_t w = 0; w < P; w++) step->bytes[w] = b;
        if (step->peer)
            for (uint32_t w = 0; w < P; w++) step->peer[w] = (w + 1) % P;
        step->root = 0;
        sp_list[ns] = &s[ns];
        idx[ns++] = r;
    }
    if (ns) {
        deftsim_sim_result res;
        memset(&res, 0, sizeof res);
        st = deftsim_sim_run(&sp, sp_list, ns, &res);
        if (!st)
            for (size_t i = 0; i < ns; i++) sim_us[idx[i]] = res.iteration_seconds[i] * 1e6;
        deftsim_sim_result_free(&res);
        if (st) st = deftsim_error_wrap(st, "table %s", t->id);
    }
done:
    for (size_t i = 0; i < ns; i++) deftsim_schedule_free(&s[i]);
    free(s);
    free(sp_list);
    free(idx);
    deftsim_config_free(cfg);
    return st;
}
