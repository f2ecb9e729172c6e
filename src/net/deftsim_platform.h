/* deftsim_platform.h - a user's platform file ([network] topology = file) as a results folder
 * records it: its name, size and SHA-256 in the manifest, and a copy of its bytes under
 * <output>/platforms/, so that the run can be reproduced from the folder alone
 * (docs/OUTPUT.md). */
#ifndef DEFTSIM_PLATFORM_H
#define DEFTSIM_PLATFORM_H

#include <jansson.h>
#include <stdint.h>

#include "deftsim_config.h"
#include "deftsim_error.h"

typedef struct {
    char *path;       /* [network] platform_file as configured; NULL: no file platform */
    char *name;       /* its last component */
    char *copy;       /* "platforms/<name>", relative to the output folder */
    char *data;       /* the bytes read (what the copy holds) */
    size_t bytes;
    char sha256[65];  /* of data, lowercase hex */
} deftsim_platform_record;

/* Reads cfg's platform file when [network] topology = file; otherwise leaves *r empty (path
 * NULL) and returns DEFTSIM_OK. Messages name the key and the file. */
deftsim_status deftsim_platform_record_read(const deftsim_config *cfg, deftsim_platform_record *r);
/* Writes the bytes read to <outdir>/platforms/<name>, atomically (nothing for an empty record). */
deftsim_status deftsim_platform_record_keep(const deftsim_platform_record *r, const char *outdir);
/* {"file", "path", "copy", "bytes", "sha256"}, or JSON null for an empty record. */
json_t *deftsim_platform_record_json(const deftsim_platform_record *r);
void deftsim_platform_record_free(deftsim_platform_record *r);

#endif
