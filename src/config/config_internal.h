/* config_internal.h - what the config files share (internal to src/): the schema's row type,
 * parsed values and the value path every key goes through (config_value.c), the schema's
 * rows (config.c), the cross-field checks (config_check.c). */
#ifndef DEFTSIM_CONFIG_INTERNAL_H
#define DEFTSIM_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "deftsim_config.h"

typedef enum {
    T_NAME,        /* char*, 1..100 characters, no '/' (it becomes a folder name) */
    T_PATH,        /* char*, non-empty */
    T_OPTPATH,     /* char*, NULL when unset; an empty value unsets it */
    T_U64,         /* uint64_t in [imin, imax] */
    T_INT,         /* int in [imin, imax], or one of choices[] when given */
    T_DOUBLE,      /* double in the range lo..hi (flags say open or closed), or check() */
    T_ENUM,        /* int-sized enum, one of names[] */
    T_ENUM_LIST,   /* int-sized enum array + size_t count; no duplicates */
    T_DOUBLE_LIST, /* double array + size_t count; in range, no duplicates */
    T_INT_LIST,    /* int64_t array + size_t count; ranges allowed; sorted, unique */
    T_BANDWIDTH,   /* double, bytes/s: a number or SimGrid units (25Gbps); range as T_DOUBLE */
    T_DURATION     /* double, seconds: a number or SimGrid units (1us); range as T_DOUBLE */
} ktype;

enum { LO_OPEN = 1, HI_OPEN = 2, HI_INF = 4 };

#define NAME_MAX_LEN 100

typedef struct {
    deftsim_config_keyinfo info;
    ktype type;
    size_t off, count_off;
    int64_t imin, imax;
    double lo, hi;
    unsigned flags;
    const char *const *names;
    const char *const *(*names_fn)(void); /* names[] from a table that can grow (the methods) */
    const int *choices;             /* 0-terminated */
    const char *(*check)(double v); /* NULL if fine, else why not (for odd numeric domains) */
} keydef;

/* The choices of an enum key. */
static inline const char *const *knames(const keydef *k)
{
    return k->names_fn ? k->names_fn() : k->names;
}

/* A parsed value before it is committed into a config: owns s and arr. */
typedef struct {
    char *s;
    uint64_t u;
    int64_t i;
    double d;
    void *arr;
    size_t n;
} kval;

/* ---- values (config_value.c) ---------------------------------------------------------- */

void deftsim_cfg_kval_free(kval *v);
void deftsim_cfg_set_ptr(deftsim_config *cfg, size_t off, void *p);
void deftsim_cfg_set_count(deftsim_config *cfg, size_t off, size_t n);
/* Strips surrounding whitespace in place. */
char *deftsim_cfg_trim(char *s);
/* names[] (NULL-terminated) joined by ", " into buf (truncated to cap, always terminated): an
 * enum key's choices in its type text ("one of: ...") and in the message for a value that
 * is none of them. */
void deftsim_cfg_names_text(const char *const *names, char *buf, size_t cap);
/* text -> a value of key k's type, checked (type, range, choices); no location in messages. */
deftsim_status deftsim_cfg_parse_value(const keydef *k, const char *text, kval *v);
/* A value as INI text; returns the length it needed (snprintf-like). */
size_t deftsim_cfg_render(const keydef *k, const kval *v, char *buf, size_t cap);
/* Key k's value in cfg, borrowed (not to be freed). */
kval deftsim_cfg_view(const deftsim_config *cfg, const keydef *k);
deftsim_status deftsim_cfg_fits_one_line(const keydef *k, const kval *v);
/* Frees key k's value in cfg. */
void deftsim_cfg_release(deftsim_config *cfg, const keydef *k);
/* Moves v into cfg (v is left empty). */
void deftsim_cfg_commit(deftsim_config *cfg, const keydef *k, kval *v);
/* parse_value, fits_one_line, commit. */
deftsim_status deftsim_cfg_set_value(deftsim_config *cfg, const keydef *k, const char *text);

/* ---- the schema (config_keys.c) -------------------------------------------------------- */

/* Where a key's value came from besides 0 (a default), a line (> 0) and -1 (--set): [network]
 * preset, [network] preset_file, and [gradients] params (DEFTSIM_CFG_ORIGIN_PARAMS below). */
#define DEFTSIM_CFG_ORIGIN_PRESET (-2)
#define DEFTSIM_CFG_ORIGIN_PRESET_FILE (-3)

size_t deftsim_cfg_nkeys(void);
const keydef *deftsim_cfg_keydef(size_t i);
/* Key i of the table (i < deftsim_cfg_nkeys(), table order) into *kd, and where cfg's value of
 * it came from: 0 default, > 0 a line, < 0 an override, a preset or a parameter file. */
int *deftsim_cfg_origin_at(deftsim_config *cfg, size_t i, const keydef **kd);
/* Key i of the table (table order), and its description with the registry's filled in. */
const keydef *deftsim_cfg_key_at(size_t i);
const deftsim_config_keyinfo *deftsim_cfg_info(size_t i);
/* A key's or a section's position in the table, -1 when there is none; deftsim_cfg_kidx for
 * the keys the code itself names (0 when absent). */
int deftsim_cfg_key_index(const char *section, const char *key);
int deftsim_cfg_section_index(const char *section);
size_t deftsim_cfg_kidx(const char *section, const char *key);
/* "scenario, gradients, ..." for messages. */
void deftsim_cfg_list_sections(char *buf, size_t cap);
/* st with "WHERE: unknown key (keys: ...)", the section's keys listed. */
deftsim_status deftsim_cfg_unknown_key_error(deftsim_status st, const char *where,
                                             const char *section);
/* Where key k got its value, as a message prefix: "file:LINE: [section] key", "--set
 * section.key", or for a default the file and its section's line when present. */
void deftsim_cfg_where(const deftsim_config *cfg, size_t k, char *buf, size_t cap);
/* A new record of where the keys got their values: all defaults, or a copy of from. NULL when
 * out of memory. */
struct deftsim_config_origin *deftsim_cfg_origin_new(const struct deftsim_config_origin *from);
/* Where key k's (section si's) value came from in cfg, to read or set: the line, or
 * DEFTSIM_CFG_ORIGIN_*. */
int *deftsim_cfg_key_line(const deftsim_config *cfg, size_t k);
int *deftsim_cfg_section_line(const deftsim_config *cfg, size_t si);

/* [synthetic] scales = kinds: four keys per tensor kind (deftsim_gen_kind's order), rows of
 * config.c's table (F and KEY are its macros). */
#define KIND_KEYS(stem, i, level)                                                                  \
    {KEY("synthetic", stem "_scale", "number in [-20, 2]", level,                                  \
         "scales = kinds: log10 gradient scale of " stem " tensors at mid-depth"),                 \
     .type = T_DOUBLE, .off = F(synthetic.kind_level[i]), .lo = -20, .hi = 2},                     \
    {KEY("synthetic", stem "_depth", "number in [-10, 10]", "0",                                   \
         "scales = kinds: log10 change of that scale from the first to the last tensor"),          \
     .type = T_DOUBLE, .off = F(synthetic.kind_depth[i]), .lo = -10, .hi = 10},                    \
    {KEY("synthetic", stem "_spread", "number in [0, 12]", "3",                                    \
         "scales = kinds: width in decades of the uniform scatter around that line"),              \
     .type = T_DOUBLE, .off = F(synthetic.kind_spread[i]), .lo = 0, .hi = 12},                     \
    {KEY("synthetic", stem "_size", "number in [-1, 1]", "0",                                      \
         "scales = kinds: log10 change of the scale per decade of a tensor's element count"),      \
     .type = T_DOUBLE, .off = F(synthetic.kind_size[i]), .lo = -1, .hi = 1}

/* Per-kind element statistics (any scales), -1 for the global key's value; the checks are
 * config_keys.c's. */
#define KIND_STAT_KEYS(stem, i)                                                                    \
    {KEY("synthetic", stem "_signal", "-1 or a number in [0, 1]", "-1",                            \
         "signal of " stem " tensors; -1: the key signal"),                                        \
     .type = T_DOUBLE, .off = F(synthetic.kind_signal[i]), .check = check_kind_signal},            \
    {KEY("synthetic", stem "_tail", "-1, 0 (Gaussian) or a number > 2", "-1",                      \
         "tail of " stem " tensors; -1: the key tail"),                                            \
     .type = T_DOUBLE, .off = F(synthetic.kind_tail[i]), .check = check_kind_tail},                \
    {KEY("synthetic", stem "_field", "-1 or a number in [0, 6]", "-1",                             \
         "field of " stem " tensors; -1: the key field"),                                          \
     .type = T_DOUBLE, .off = F(synthetic.kind_field[i]), .check = check_kind_field}

/* [synthetic] role_<name>: a role's offset from its kind's line (scales = kinds). */
#define ROLE_KEY(stem, i)                                                                          \
    {KEY("synthetic", "role_" stem, "number in [-6, 6]", "0",                                      \
         "scales = kinds: log10 offset of " stem " tensors from their kind's line"),               \
     .type = T_DOUBLE, .off = F(synthetic.role_offset[i]), .lo = -6, .hi = 6}

/* ---- parameter files (config_params.c) ------------------------------------------------- */

/* Where a key's value came from [gradients] params. */
#define DEFTSIM_CFG_ORIGIN_PARAMS (-4)

/* [gradients] params: the keys an earlier parameter file set go back to their defaults, then
 * the file's [synthetic] keys fill every key still at its default. */
deftsim_status deftsim_cfg_apply_params(deftsim_config *cfg);

/* ---- the methods' options (config_methods.c) ------------------------------------------- */

/* The [sparsify] keys of the options of methods first .. end-1 (registry positions) into out
 * (at most cap rows): their type text, default and help from the option tables, their storage
 * in deftsim_config's sparsify.opts. Returns the rows written. */
size_t deftsim_cfg_method_keys(size_t first, size_t end, keydef *out, size_t cap);

/* ---- presets (config_preset.c) ---------------------------------------------------------- */

/* The choices of [network] preset: "none", then every preset's name; NULL-terminated. */
extern const char *const deftsim_cfg_preset_names[];

/* ---- cross-field rules (config_check.c) ------------------------------------------------ */

/* deftsim_config_check(); train = 1: the rules of deftsim_config_parse_train(). */
deftsim_status deftsim_cfg_check(const deftsim_config *cfg, int train);

/* [scenario] iterations left unset: with source = trace, the trace's iteration count
 * (deftsim_gradsrc_trace_peek); otherwise (another source, a list of traces, or one that
 * cannot be read, which opening it reports later) dflt, the key's default. */
int deftsim_cfg_iterations(const deftsim_config *cfg, const char *dflt);

#endif
