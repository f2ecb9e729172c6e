/* progress.c - deftsim run's and deftsim sweep's progress on the terminal (progress.h). */
#include "progress.h"

#include <inttypes.h>

void deftsim_cli_run_progress(void *user, const deftsim_run_point_done *p)
{
    FILE *f = user;
    fprintf(f,
            "deftsim run: [%zu/%zu] %s d=%s P=%u: %zu iteration%s in %.2f s "
            "(prepare %.2f s, step %.2f s, network %.2f s), %" PRIu64 " rows\n",
            p->done, p->total, p->method, p->density, p->P, p->iterations,
            p->iterations == 1 ? "" : "s", p->seconds, p->prepare_seconds, p->step_seconds,
            p->sim_seconds, p->rows);
    if (p->moves_data)
        fprintf(f,
                "deftsim run:   kernels on the device %.3f s, copies %.3f s "
                "(%.1f MB in, %.1f MB out, %" PRIu64 " calls; not in the phases)\n",
                p->device_seconds, p->copy_seconds, (double)p->bytes_to_device / 1e6,
                (double)p->bytes_from_device / 1e6, p->calls);
    fflush(f);
}
