/* platform.c - a user's platform file as the results folder records it (deftsim_platform.h). */
#include "deftsim_platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deftsim_sha256.h"
#include "deftsim_util.h"

void deftsim_platform_record_free(deftsim_platform_record *r)
{
    if (!r) return;
    free(r->path);
    free(r->name);
    free(r->copy);
    free(r->data);
    memset(r, 0, sizeof *r);
}

deftsim_status deftsim_platform_record_read(const deftsim_config *cfg, deftsim_platform_record *r)
{
    memset(r, 0, sizeof *r);
    if (cfg->network.topology != DEFTSIM_TOPO_FILE || !cfg->network.platform_file) return DEFTSIM_OK;
    const char *path = cfg->network.platform_file;
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if (!name[0] || !strcmp(name, ".") || !strcmp(name, ".."))
        return deftsim_error_set(DEFTSIM_E_INPUT, "[network] platform_file %s: not a file name",
                                 path);
    deftsim_status st = deftsim_read_file(path, &r->data, &r->bytes);
    if (st) return deftsim_error_wrap(st, "[network] platform_file");
    size_t clen = strlen("platforms/") + strlen(name) + 1;
    r->path = strdup(path);
    r->name = strdup(name);
    r->copy = malloc(clen);
    if (!r->path || !r->name || !r->copy) {
        deftsim_platform_record_free(r);
        return deftsim_error_nomem("[network] platform_file %s", path);
    }
    snprintf(r->copy, clen, "platforms/%s", name);
    deftsim_sha256_hex(r->data, r->bytes, r->sha256);
    return DEFTSIM_OK;
}

deftsim_status deftsim_platform_record_keep(const deftsim_platform_record *r, const char *outdir)
{
    if (!r->path) return DEFTSIM_OK;
    size_t dlen = strlen(outdir) + strlen("/platforms") + 1;
    size_t plen = strlen(outdir) + 1 + strlen(r->copy) + 1;
    char *dir = malloc(dlen), *full = malloc(plen);
    deftsim_status st = DEFTSIM_OK;
    if (!dir || !full) {
        st = deftsim_error_nomem("%s", outdir);
        goto done;
    }
    snprintf(dir, dlen, "%s/platforms", outdir);
    snprintf(full, plen, "%s/%s", outdir, r->copy);
    if ((st = deftsim_mkdir_p(dir))) {
        st = deftsim_error_wrap(st, "[scenario] output");
        goto done;
    }
    st = deftsim_write_file_atomic(full, r->data, r->bytes);
done:
    free(dir);
    free(full);
    return st;
}

json_t *deftsim_platform_record_json(const deftsim_platform_record *r)
{
    if (!r->path) return json_null();
    return json_pack("{s:s, s:s, s:s, s:I, s:s}", "file", r->name, "path", r->path, "copy",
                     r->copy, "bytes", (json_int_t)r->bytes, "sha256", r->sha256);
}
