/* config_check.c - the cross-field rules of a scenario (deftsim_config_check) and the network
 * simulation's parameters it implies (deftsim_config_sim_params). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_internal.h"
#include "deftsim_config_inputs.h"
#include "deftsim_model.h"

/* ---- cross-field rules ------------------------------------------------------------------ */

void deftsim_config_sim_params(const deftsim_config *cfg, uint32_t P, uint32_t elem_bytes,
                               deftsim_sim_params *out)
{
    deftsim_sim_params_default(out);
    out->P = P;
    out->topology = cfg->network.topology;
    out->platform_file = cfg->network.platform_file;
    out->topology_params = cfg->network.topology_params;
    out->bandwidth = cfg->network.bandwidth;
    out->latency = cfg->network.latency;
    out->backbone_bandwidth = cfg->network.backbone_bandwidth;
    out->model = cfg->network.model;
    out->crosstraffic = cfg->network.crosstraffic;
    out->allgather = cfg->network.allgather;
    out->allreduce = cfg->network.allreduce;
    out->bcast = cfg->network.bcast;
    out->eager_threshold = (uint64_t)cfg->network.eager_threshold;
    out->elem_bytes = elem_bytes;
    out->mode = cfg->network.mode;
    out->compute = cfg->network.compute;
    out->gpus_per_node = (uint32_t)cfg->network.gpus_per_node;
    out->intra_fabric = cfg->network.intra_fabric;
    out->intra_bandwidth = cfg->network.intra_bandwidth;
    out->intra_latency = cfg->network.intra_latency;
    out->nics_per_node = (uint32_t)cfg->network.nics_per_node;
    out->nic_bandwidth = cfg->network.nic_bandwidth;
    out->library = cfg->network.library;
    out->nccl_algorithm = cfg->network.nccl_algorithm;
    out->nccl_channels = (uint32_t)cfg->network.nccl_channels;
    out->nccl_p2p_channels = (uint32_t)cfg->network.nccl_p2p_channels;
    out->nccl_allgatherv = cfg->network.nccl_allgatherv;
    out->nccl_buffsize = (uint64_t)cfg->network.nccl_buffsize;
    out->nccl_model = cfg->network.nccl_model;
    out->nccl_proto = cfg->network.nccl_proto;
    out->nccl_arch = cfg->network.nccl_arch;
    out->nccl_tuning = cfg->network.nccl_tuning;
    out->nccl_launch = cfg->network.nccl_launch;
    out->nccl_launch_gpu = cfg->network.nccl_launch_gpu;
    out->nccl_gpus_per_thread = (uint32_t)cfg->network.nccl_gpus_per_thread;
    out->nccl_nvl_efficiency = cfg->network.nccl_nvl_efficiency;
    out->nccl_net_efficiency = cfg->network.nccl_net_efficiency;
    out->nccl_p2p_net_efficiency = cfg->network.nccl_p2p_net_efficiency;
    out->nccl_net_channel_bandwidth = cfg->network.nccl_net_channel_bandwidth;
    out->nccl_p2p_channel_bandwidth = cfg->network.nccl_p2p_channel_bandwidth;
    out->nccl_p2p_net_channel_bandwidth = cfg->network.nccl_p2p_net_channel_bandwidth;
    out->nccl_step_scale = cfg->network.nccl_step_scale;
    out->nccl_net_step_scale = cfg->network.nccl_net_step_scale;
    out->nccl_ll_efficiency = cfg->network.nccl_ll_efficiency;
    out->nccl_ll128_efficiency = cfg->network.nccl_ll128_efficiency;
    out->nccl_nvls_step = cfg->network.nccl_nvls_step;
}

/* [network]: the platform must hold the largest worker count. The simulation's messages start
 * with the field they are about ("topology_params '4,4': ..."), which names the key here. */
static deftsim_status network_check(const deftsim_config *cfg)
{
    char w[512];
    uint32_t P = 1;
    for (size_t i = 0; i < cfg->workers.ncounts; i++)
        if ((uint32_t)cfg->workers.counts[i] > P) P = (uint32_t)cfg->workers.counts[i];
    deftsim_sim_params sp;
    deftsim_config_sim_params(cfg, P, 4, &sp);
    char tp[128];
    uint64_t hosts;
    deftsim_status st = deftsim_sim_platform_shape(&sp, tp, sizeof tp, &hosts);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", deftsim_error_message());
        static const char *const fields[] = {"topology_params", "platform_file",
                                             "backbone_bandwidth", "bandwidth", "latency",
                                             "gpus_per_node", "nics_per_node", "intra_fabric",
                                             "intra_bandwidth", "intra_latency", "nic_bandwidth"};
        const char *key = "topology";
        const char *rest = msg;
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            size_t len = strlen(fields[f]);
            if (strncmp(msg, fields[f], len) == 0 && (msg[len] == ' ' || msg[len] == ':')) {
                key = fields[f];
                rest = msg + len + (msg[len] == ':' ? 2 : 1);
                break;
            }
        }
        deftsim_config_where(cfg, "network", key, w, sizeof w);
        if (P > 1 && (strstr(rest, "workers") || strstr(rest, " NICs (")))
            return deftsim_error_set(st, "%s: %s (the largest of [workers] counts)", w, rest);
        return deftsim_error_set(st, "%s: %s", w, rest);
    }
    if (cfg->network.topology == DEFTSIM_TOPO_FILE && access(cfg->network.platform_file, R_OK) != 0) {
        deftsim_config_where(cfg, "network", "platform_file", w, sizeof w);
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: cannot read %s: %s", w,
                                 cfg->network.platform_file, strerror(errno));
    }
    /* A user's platform is loaded once here (in a child: SimGrid aborts on a file it cannot
     * parse), so that a broken file stops the run before any point, naming the file. */
    if (cfg->network.topology == DEFTSIM_TOPO_FILE && cfg->network.simulate &&
        (st = deftsim_sim_check_platform(&sp))) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", deftsim_error_message());
        deftsim_config_where(cfg, "network", "platform_file", w, sizeof w);
        return deftsim_error_set(st, "%s: %s%s", w, msg,
                                 P > 1 && strstr(msg, "fewer than")
                                     ? " (the largest of [workers] counts)" : "");
    }
    return DEFTSIM_OK;
}

/* [sparsify]: wire = reference sends what the authors' code sends, 4-byte (fp32) values
 * among them (gTop-k's 16-byte pairs hold a float64 value); it has no 2-byte value. */
static deftsim_status sparsify_check(const deftsim_config *cfg)
{
    char w[512], ww[512];
    if (cfg->sparsify.wire == DEFTSIM_WIRE_REFERENCE && cfg->sparsify.value_bytes != 4) {
        deftsim_config_where(cfg, "sparsify", "value_bytes", w, sizeof w);
        deftsim_config_where(cfg, "sparsify", "wire", ww, sizeof ww);
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: %d, but wire = reference (%s) sends 4-byte (fp32) values, "
                                 "as the authors' code does; set value_bytes = 4, or wire = spec",
                                 w, cfg->sparsify.value_bytes, ww);
    }
    return DEFTSIM_OK;
}

/* [device]: kind = profile needs a profile, and a profile needs kind = profile. The file
 * itself is read when a run starts (deftsim_profile_load names its line and column). */
static deftsim_status device_check(const deftsim_config *cfg)
{
    char w[512], ww[512];
    deftsim_config_where(cfg, "device", "kind", w, sizeof w);
    deftsim_config_where(cfg, "device", "profile", ww, sizeof ww);
    if (cfg->device.kind == DEFTSIM_DEVICE_PROFILE && !cfg->device.profile)
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: profile, but [device] profile is not set (name a device "
                                 "profile CSV: deftsim bench kernels --profile FILE)",
                                 w);
    if (cfg->device.kind != DEFTSIM_DEVICE_PROFILE && cfg->device.profile)
        return deftsim_error_set(DEFTSIM_E_INPUT, "%s: set, but [device] kind = %s (a profile "
                                 "needs kind = profile)",
                                 ww, deftsim_device_kind_name(cfg->device.kind));
    return DEFTSIM_OK;
}

/* [compute]: durations or a table, not both; the table keys need a table. The row itself is
 * looked up once the model is known (below, and by the engine for a trace's model). */
static deftsim_status compute_check(const deftsim_config *cfg)
{
    char w[512], ww[512];
    if (cfg->compute.table && (cfg->compute.forward > 0 || cfg->compute.backward > 0)) {
        deftsim_config_where(cfg, "compute", "table", w, sizeof w);
        deftsim_config_where(cfg, "compute", cfg->compute.forward > 0 ? "forward" : "backward",
                             ww, sizeof ww);
        return deftsim_error_set(DEFTSIM_E_INPUT,
                                 "%s: set together with %s; give the durations or a table, "
                                 "not both",
                                 w, ww);
    }
    static const char *const row_keys[] = {"model", "device", "batch"};
    int set[3] = {cfg->compute.model != NULL, cfg->compute.device != NULL, cfg->compute.batch > 0};
    for (size_t i = 0; i < 3; i++)
        if (set[i] && !cfg->compute.table) {
            deftsim_config_where(cfg, "compute", row_keys[i], w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: set, but [compute] table is not (it selects a row of "
                                     "the table)",
                                     w);
        }
    return DEFTSIM_OK;
}

int deftsim_cfg_iterations(const deftsim_config *cfg, const char *dflt)
{
    const char *t = cfg->gradients.trace;
    size_t n = 0;
    uint64_t numel;
    if (cfg->gradients.source == DEFTSIM_SOURCE_TRACE && t && !strchr(t, ',') &&
        deftsim_gradsrc_trace_peek(t, &n, &numel))
        n = 0;
    return n >= 1 && n <= 1000000 ? (int)n : (int)strtol(dflt, NULL, 10);
}

deftsim_status deftsim_config_check(const deftsim_config *cfg)
{
    return deftsim_cfg_check(cfg, 0);
}

/* train: the scenario drives deftsim train or trace record, whose gradients come from the
 * network itself: a synthetic source may leave [gradients] model unset (when set, it must
 * load, and the trainer compares it with the network's table). */
/* A GPU preset's latencies are tokens for NCCL's tuned model, whose per-step latencies hold
 * the wire's: MPI's algorithms on them would run nearly free of latency. */
static deftsim_status preset_library_check(const deftsim_config *cfg)
{
    if (cfg->network.library != DEFTSIM_LIB_MPI) return DEFTSIM_OK;
    static const char *const lat[] = {"latency", "intra_latency"};
    for (size_t i = 0; i < 2; i++)
        if (*deftsim_cfg_key_line(cfg, deftsim_cfg_kidx("network", lat[i])) ==
            DEFTSIM_CFG_ORIGIN_PRESET)
            return deftsim_error_set(
                DEFTSIM_E_INPUT,
                "[network] library = mpi with preset %s: the preset's %s (a 1 ns token for "
                "NCCL's tuned model, which holds the wire's latency in its per-step costs) "
                "would make MPI's collectives nearly free of latency; set [network] latency "
                "and intra_latency for MPI, or leave library to the preset (nccl)",
                deftsim_cfg_preset_names[cfg->network.preset > 0 ? cfg->network.preset : 0],
                lat[i]);
    return DEFTSIM_OK;
}

deftsim_status deftsim_cfg_check(const deftsim_config *cfg, int train)
{
    char w[512];
    {
        deftsim_status nst = network_check(cfg);
        if (!nst) nst = preset_library_check(cfg);
        if (nst) return nst;
        if ((nst = sparsify_check(cfg))) return nst;
        if ((nst = device_check(cfg))) return nst;
        if ((nst = compute_check(cfg))) return nst;
    }
    const char *src = deftsim_source_name(cfg->gradients.source);
    if (cfg->gradients.source == DEFTSIM_SOURCE_SYNTHETIC) {
        if (!cfg->gradients.model && train) {
            if (cfg->gradients.trace) {
                deftsim_config_where(cfg, "gradients", "trace", w, sizeof w);
                return deftsim_error_set(DEFTSIM_E_INPUT,
                                         "%s: set, but source = %s (a trace needs source = trace)",
                                         w, src);
            }
            return DEFTSIM_OK;
        }
        if (!cfg->gradients.model) {
            deftsim_config_where(cfg, "gradients", "model", w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: missing (required when source = %s)", w, src);
        }
        if (cfg->gradients.trace) {
            deftsim_config_where(cfg, "gradients", "trace", w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: set, but source = %s (a trace needs source = trace)", w, src);
        }
    } else {
        if (!cfg->gradients.trace) {
            deftsim_config_where(cfg, "gradients", "trace", w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: missing (required when source = %s)", w, src);
        }
        if (cfg->gradients.model) {
            deftsim_config_where(cfg, "gradients", "model", w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT,
                                     "%s: set, but source = %s (a trace names its own model)", w, src);
        }
        return DEFTSIM_OK;
    }

    /* The model may be a comma-separated list, one model per sweep variant (deftsim sweep
     * runs each; the engine takes one): every one must load and hold the worker counts. */
    deftsim_status st = DEFTSIM_OK;
    const char *p = cfg->gradients.model;
    for (;;) {
        size_t len = strcspn(p, ",");
        while (len && isspace((unsigned char)*p)) p++, len--;
        while (len && isspace((unsigned char)p[len - 1])) len--;
        char *one = strndup(p, len);
        if (!one) return deftsim_error_nomem("config");
        if (!len) {
            free(one);
            deftsim_config_where(cfg, "gradients", "model", w, sizeof w);
            return deftsim_error_set(DEFTSIM_E_INPUT, "%s: an empty name in the list '%s'", w,
                                     cfg->gradients.model);
        }
        deftsim_model *m;
        st = deftsim_model_load(one, &m);
        free(one);
        if (st) {
            deftsim_config_where(cfg, "gradients", "model", w, sizeof w);
            return deftsim_error_wrap(st, "%s", w);
        }
        for (size_t i = 0; i < cfg->workers.ncounts; i++) {
            if ((uint64_t)cfg->workers.counts[i] > m->numel) {
                deftsim_config_where(cfg, "workers", "counts", w, sizeof w);
                st = deftsim_error_set(DEFTSIM_E_INPUT,
                                       "%s: %lld workers exceed the %llu parameters of model %s", w,
                                       (long long)cfg->workers.counts[i],
                                       (unsigned long long)m->numel, m->name);
                break;
            }
        }
        deftsim_compute_times ct;
        if (!st && cfg->compute.table) st = deftsim_compute_resolve(cfg, m->name, &ct);
        deftsim_model_free(m);
        if (st) return st;
        p += strcspn(p, ",");
        if (!*p) break;
        p++;
    }
    return st;
}
