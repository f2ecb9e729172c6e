/* sim_names.c - the names of the network options (topology, model, algorithms, modes) and the
 * default parameters (deftsim_sim.h). The lowest file of sim/: every other one may use it.
 *
 * Call order in sim/: docs/ARCHITECTURE.md, the sim/ row of its folder table. */
#include "deftsim_sim.h"

#include <string.h>

/* ---- names -------------------------------------------------------------------------------------- */

const char *const deftsim_topology_names[] = {"flat", "fattree", "torus", "dragonfly", "file", NULL};
const char *const deftsim_net_model_names[] = {"LV08", "CM02", "SMPI", NULL};
const char *const deftsim_intra_fabric_names[] = {"nvswitch", "nvlink_ring", "nvlink_mesh", "pcie",
                                                  NULL};
const char *const deftsim_allgather_names[] = {"ring", "recursive_doubling", "bruck", NULL};
const char *const deftsim_allreduce_names[] = {"ring", "recursive_doubling", "rabenseifner", NULL};
const char *const deftsim_bcast_names[] = {"binomial", "scatter_rdb_allgather",
                                           "scatter_ring_allgather", NULL};
const char *const deftsim_sim_mode_names[] = {"exact", "approximate", "analytic", NULL};
const char *const deftsim_sim_compute_names[] = {"measured", "none", NULL};
const char *const deftsim_net_library_names[] = {"mpi", "nccl", NULL};
const char *const deftsim_nccl_algo_names[] = {"ring", "tree", "hierarchical", "auto", "nvls",
                                                "nvlstree", NULL};
const char *const deftsim_nccl_model_names[] = {"plain", "tuned", NULL};
const char *const deftsim_nccl_proto_names[] = {"auto", "LL", "LL128", "Simple", NULL};
const char *const deftsim_nccl_arch_names[] = {"volta", "ampere", "hopper", NULL};
const char *const deftsim_nccl_tuning_names[] = {"2.30", "2.8", NULL};
const char *const deftsim_nccl_agv_names[] = {"pad", "bcast", "p2p", NULL};

_Static_assert(sizeof deftsim_topology_names / sizeof(char *) == DEFTSIM_TOPO_COUNT + 1, "names");
_Static_assert(sizeof deftsim_net_model_names / sizeof(char *) == DEFTSIM_NET_COUNT + 1, "names");
_Static_assert(sizeof deftsim_intra_fabric_names / sizeof(char *) == DEFTSIM_INTRA_COUNT + 1, "names");
_Static_assert(sizeof deftsim_allgather_names / sizeof(char *) == DEFTSIM_AG_COUNT + 1, "names");
_Static_assert(sizeof deftsim_allreduce_names / sizeof(char *) == DEFTSIM_AR_COUNT + 1, "names");
_Static_assert(sizeof deftsim_bcast_names / sizeof(char *) == DEFTSIM_BC_COUNT + 1, "names");
_Static_assert(sizeof deftsim_sim_mode_names / sizeof(char *) == DEFTSIM_SIM_MODE_COUNT + 1, "names");
_Static_assert(sizeof deftsim_sim_compute_names / sizeof(char *) == DEFTSIM_SIM_COMPUTE_COUNT + 1,
               "names");
_Static_assert(sizeof deftsim_net_library_names / sizeof(char *) == DEFTSIM_LIB_COUNT + 1, "names");
_Static_assert(sizeof deftsim_nccl_algo_names / sizeof(char *) == DEFTSIM_NCCL_ALGO_COUNT + 1, "names");
_Static_assert(sizeof deftsim_nccl_agv_names / sizeof(char *) == DEFTSIM_NCCL_AGV_COUNT + 1, "names");
_Static_assert(sizeof deftsim_nccl_model_names / sizeof(char *) == DEFTSIM_NCCL_MODEL_COUNT + 1, "names");
_Static_assert(sizeof deftsim_nccl_proto_names / sizeof(char *) == DEFTSIM_NCCL_PROTO_COUNT + 1, "names");
_Static_assert(sizeof deftsim_nccl_arch_names / sizeof(char *) == DEFTSIM_NCCL_ARCH_COUNT + 1, "names");
_Static_assert(sizeof deftsim_nccl_tuning_names / sizeof(char *) == DEFTSIM_NCCL_TUNING_COUNT + 1, "names");

static const char *name_of(const char *const *names, unsigned count, unsigned v)
{
    return v < count ? names[v] : "?";
}

const char *deftsim_topology_name(deftsim_topology t)
{
    return name_of(deftsim_topology_names, DEFTSIM_TOPO_COUNT, (unsigned)t);
}
const char *deftsim_net_model_name(deftsim_net_model m)
{
    return name_of(deftsim_net_model_names, DEFTSIM_NET_COUNT, (unsigned)m);
}
const char *deftsim_intra_fabric_name(deftsim_intra_fabric f)
{
    return name_of(deftsim_intra_fabric_names, DEFTSIM_INTRA_COUNT, (unsigned)f);
}
const char *deftsim_allgather_name(deftsim_allgather_algo a)
{
    return name_of(deftsim_allgather_names, DEFTSIM_AG_COUNT, (unsigned)a);
}
const char *deftsim_allreduce_name(deftsim_allreduce_algo a)
{
    return name_of(deftsim_allreduce_names, DEFTSIM_AR_COUNT, (unsigned)a);
}
const char *deftsim_bcast_name(deftsim_bcast_algo a)
{
    return name_of(deftsim_bcast_names, DEFTSIM_BC_COUNT, (unsigned)a);
}
const char *deftsim_sim_mode_name(deftsim_sim_mode m)
{
    return name_of(deftsim_sim_mode_names, DEFTSIM_SIM_MODE_COUNT, (unsigned)m);
}
const char *deftsim_nccl_algo_name(deftsim_nccl_algo a)
{
    return name_of(deftsim_nccl_algo_names, DEFTSIM_NCCL_ALGO_COUNT, (unsigned)a);
}
const char *deftsim_nccl_agv_name(deftsim_nccl_agv a)
{
    return name_of(deftsim_nccl_agv_names, DEFTSIM_NCCL_AGV_COUNT, (unsigned)a);
}

void deftsim_sim_params_default(deftsim_sim_params *p)
{
    memset(p, 0, sizeof *p);
    p->topology = DEFTSIM_TOPO_FLAT;
    p->bandwidth = 25e9 / 8; /* 25 Gbit/s */
    p->latency = 1e-6;
    p->model = DEFTSIM_NET_LV08;
    p->crosstraffic = 0;
    p->allgather = DEFTSIM_AG_BRUCK;
    p->allreduce = DEFTSIM_AR_RABENSEIFNER;
    p->bcast = DEFTSIM_BC_BINOMIAL;
    p->eager_threshold = 65536;
    p->envelope_bytes = 16;
    p->elem_bytes = 4;
    p->gpus_per_node = 1;
    p->intra_fabric = DEFTSIM_INTRA_NVSWITCH;
    p->intra_bandwidth = 450e9; /* H100 SXM's NVLink 4: 900 GB/s both directions together */
    p->intra_latency = 1e-6;
    p->nics_per_node = 1;
    p->nic_bandwidth = 0; /* as bandwidth */
    p->mode = DEFTSIM_SIM_EXACT;
    p->compute = DEFTSIM_SIM_COMPUTE_MEASURED;
    p->gpus_per_node = 1;
    p->library = DEFTSIM_LIB_MPI;
    p->nccl_algorithm = DEFTSIM_NCCL_RING;
    p->nccl_channels = DEFTSIM_NCCL_CHANNELS_DEFAULT;
    p->nccl_allgatherv = DEFTSIM_NCCL_AGV_PAD;
    p->nccl_buffsize = DEFTSIM_NCCL_BUFFSIZE_DEFAULT;
    p->nccl_model = DEFTSIM_NCCL_MODEL_PLAIN;
    p->nccl_proto = DEFTSIM_NCCL_PROTO_AUTO;
    p->nccl_arch = DEFTSIM_NCCL_ARCH_HOPPER;
    p->nccl_tuning = DEFTSIM_NCCL_TUNING_2_30;
    p->nccl_launch = 0;
    p->nccl_launch_gpu = 0;
    p->nccl_gpus_per_thread = 1;
    p->nccl_nvl_efficiency = 1;
    p->nccl_net_efficiency = 1;
    p->nccl_p2p_net_efficiency = -1;
    p->nccl_net_channel_bandwidth = 0;
    p->nccl_p2p_channels = 0;
    p->nccl_p2p_channel_bandwidth = 0;
    p->nccl_p2p_net_channel_bandwidth = 0;
    p->nccl_ll_efficiency = 1;
    p->nccl_ll128_efficiency = 1;
    p->nccl_step_scale = 1;
    p->nccl_net_step_scale = -1;
    p->nccl_nvls_step = 0;
}
