/* config_preset.c - [network] presets: the node keys of NVIDIA DGX systems from their
 * datasheets (docs/NETWORK.md, "Presets", has every figure with its source and what is
 * assumed). A preset fills the keys a scenario leaves at their defaults (config.c,
 * apply_preset); `deftsim config --presets` lists them, `--preset NAME` prints one.
 *
 * Bandwidths are per direction: a SPLITDUPLEX link's bandwidth in SimGrid is that of each
 * direction. NVIDIA quotes NVLink per GPU as both directions together ("900 GB/s
 * bidirectional"): half of it is one direction. Network figures (400 Gb/s) are per direction
 * already. No datasheet gives a latency: the presets leave latency and intra_latency as the
 * scenario has them. */
#include <string.h>

#include "config_internal.h"

const char *const deftsim_cfg_preset_names[] = {"none", "dgx-h100", "dgx-a100", "dgx1-v100", NULL};

/* The validated NCCL configuration every GPU preset shares (docs/NETWORK.md, "NCCL as it
 * runs"), and the four figures `deftsim validate nccl --fit` fits per GPU, with the tables. */
#define NCCL_VALIDATED                                                                             \
    {"library", "nccl", "GPUs exchange through NCCL: its algorithms and the model validated below"}, \
    {"model", "CM02", "the plain alpha-beta model: LV08's factors are fitted to TCP (docs/NETWORK.md)"}, \
    {"crosstraffic", "0", "NVLink and InfiniBand carry acknowledgements out of band"},            \
    {"latency", "1ns", "a token: NCCL's per-step latencies (nccl_model = tuned) hold the wire's; equal " \
                       "route latencies keep SimGrid from sharing a port by latency"},            \
    {"intra_latency", "1ns", "as latency"},                                                        \
    {"nccl_model", "tuned", "NCCL as it runs, validated against sim/validation/nccl"},            \
    {"nccl_algorithm", "auto", "NCCL's own choice of algorithm (its tuning model)"}
#define NCCL_FITTED(launch, launch_gpu, gpu_why, nvl, net, net_why, step, ll, ll128, why)          \
    {"nccl_launch", launch, why},                                                                  \
    {"nccl_launch_gpu", launch_gpu, gpu_why},                                                      \
    {"nccl_nvl_efficiency", nvl, "fitted with nccl_launch (same tables)"},                         \
    {"nccl_net_efficiency", net, net_why},                                                         \
    {"nccl_step_scale", step, "fitted with nccl_launch (same tables)"},                            \
    {"nccl_ll_efficiency", ll, "fitted with nccl_launch (same tables)"},                           \
    {"nccl_ll128_efficiency", ll128, "fitted with nccl_launch (same tables)"}

static const deftsim_config_preset_key h100[] = {
    {"gpus_per_node", "8", "8 H100 SXM GPUs"},
    {"intra_fabric", "nvswitch", "4 NVSwitch chips: every GPU to every other at full NVLink speed"},
    {"intra_bandwidth", "450GBps", "NVLink 4: 900 GB/s per GPU, both directions together"},
    {"nics_per_node", "8", "8 single-port ConnectX-7, one for each GPU (rail-optimized)"},
    {"nic_bandwidth", "400Gbps", "ConnectX-7: up to 400 Gb/s InfiniBand (NDR)"},
    {"bandwidth", "400Gbps", "the compute fabric's links: NDR InfiniBand, 400 Gb/s"},
    NCCL_VALIDATED,
    {"nccl_arch", "hopper", "H100: NCCL's Hopper constants (LL's and LL128's caps, NVLS)"},
    {"nccl_channels", "16", "two channels a NIC (NCCL finds 12 to 24 on a DGX H100)"},
    NCCL_FITTED("2.121us", "4.75us",
                "fitted alone on the same tables (2026-12-06, a scan of its mean |log ratio|) "
                "after a multi-GPU thread's launches became the call's floor, and kept by the "
                "refit with the rest; the Together AI tables are its -g 8 runs",
                "0.8", "1",
                "fitted with nccl_net_channel_bandwidth (below), by a scan of the mean |log ratio| "
                "of the 10-node cluster's 16 tables at 0.96, 0.98 and 1: the 1- to 4-GPU rings "
                "want the NIC's whole rate in the model; 0.7847 before, fitted with nccl_launch "
                "on its 14 tables when every H100 table across nodes had 8 GPUs a node",
                "1.1123", "0.75", "0.8171",
                "fitted (deftsim validate nccl --fit, 8 rounds from the figures before, "
                "mean |log ratio| 0.1220) to the 14 H100 tables of sim/validation/nccl with "
                "status ok, all rows, the GCP Ethernet one left out"),
    {"nccl_nvls_step", "3.797us", "fitted with nccl_launch (same tables; the NVLS allreduce rows "
                                  "of the one-node tables constrain it)"},
    {"nccl_net_channel_bandwidth", "20.25GBps",
     "fitted with nccl_net_efficiency (2026-12-07, a scan from 18 to 21 GB/s of the mean |log "
     "ratio| of the 16 tables h100_10n*_nccl2.29.2: 1, 2, 4 and 8 GPUs a node, minimum 0.0762): "
     "with 16 channels an 8-GPU node's rings reach 2 x 20.25 GB/s a NIC, the smaller nodes' the "
     "NIC's rate"},
    {"nccl_p2p_net_efficiency", "0.91",
     "fitted alone (2026-12-07, a scan of the mean |log ratio| from 0.86 to 0.94) to the one H100 "
     "alltoall table across nodes on the preset's NICs, h100_10n_alltoall_default_nccl2.29.2; the "
     "2-node alltoall table sets its own link from its cluster's sendrecv rows"},
    {"nccl_p2p_channels", "32",
     "the one-node sendrecv tables (h100_1n_sendrecv_default_nccl2.29.2, 8 GPUs): 32 and 64 MiB "
     "move at 4 channels' rate, 128 MiB at 8, 256 MiB at 16; NCCL gives a transfer at least the "
     "p2p channels over the ranks (32 / 8 = 4), so 32"},
    {"nccl_p2p_channel_bandwidth", "20.5GBps",
     "fitted (2026-12-08, a scan of the mean |log ratio| from 19 to 21 GB/s, minimum 0.0191) to "
     "the one-node sendrecv tables of 8 and 4 GPUs, h100_1n_sendrecv_default_nccl2.29.2 and "
     "h100_1nx4_sendrecv_default_nccl2.29.2, 20 rows"},
    {"nccl_p2p_net_channel_bandwidth", "10.1GBps",
     "fitted (2026-12-08, a scan from 9.5 to 10.5 GB/s, flat at 0.0322 from 10 to 10.25) to the "
     "pairwise sendrecv tables of 1 and 8 GPUs a node, h100_2nx1_sendrecv_pair_nccl2.29.2 and "
     "h100_2n_sendrecv_pair_nccl2.29.2: a network peer gets 4 channels (one for each 14 GB/s of "
     "the 50 GB/s NIC), 40.4 GB/s, where the cluster's 45 pairs move 39.0 to 44.2 GB/s"},
    {"nccl_net_step_scale", "-1",
     "as nccl_step_scale: no H100 table has a call under 32 MiB across nodes (fitted, it "
     "went to 8.0 for the 10-node 32 MiB rows; docs/NETWORK.md)"},
};

static const deftsim_config_preset_key a100[] = {
    {"gpus_per_node", "8", "8 A100 SXM GPUs"},
    {"intra_fabric", "nvswitch", "6 NVSwitch chips: every GPU to every other at full NVLink speed"},
    {"intra_bandwidth", "300GBps", "NVLink 3: 600 GB/s per GPU, both directions together"},
    {"nics_per_node", "8", "8 single-port ConnectX-6, one for each GPU"},
    {"nic_bandwidth", "200Gbps", "ConnectX-6: 200 Gb/s HDR InfiniBand"},
    {"bandwidth", "200Gbps", "the compute fabric's links: HDR InfiniBand, 200 Gb/s"},
    NCCL_VALIDATED,
    {"nccl_arch", "ampere", "A100: NCCL's Ampere constants"},
    {"nccl_channels", "16", "two channels a NIC"},
    NCCL_FITTED("3.999us", "4us",
                "fitted with the rest (same tables)",
                "0.7655", "0.5299", "fitted with nccl_launch (same tables)", "1.6809", "0.2839",
                "0.7416",
                "fitted (validate nccl --fit, 10 rounds, mean |log ratio| 0.1242) to the 8 A100 "
                "tables of sim/validation/nccl with status ok, each with its NCCL's figures"),
    {"nccl_net_step_scale", "0.747", "fitted with nccl_launch (same tables; the 2- to 16-node "
                                     "ABCI rows below 1 MiB constrain it)"},
};

static const deftsim_config_preset_key v100[] = {
    {"gpus_per_node", "8", "8 V100 SXM2 GPUs"},
    {"intra_fabric", "nvlink_mesh",
     "the hybrid cube-mesh approximated: one NVLink between every pair (the real one joins each "
     "GPU to 4 others, 2 of them by two links)"},
    {"intra_bandwidth", "25GBps", "one NVLink 2 link: 25 GB/s in each direction"},
    {"nics_per_node", "4", "4 ConnectX EDR InfiniBand NICs, one for each pair of GPUs"},
    {"nic_bandwidth", "100Gbps", "EDR InfiniBand: 100 Gb/s"},
    {"bandwidth", "100Gbps", "the compute fabric's links: EDR InfiniBand, 100 Gb/s"},
    NCCL_VALIDATED,
    {"nccl_arch", "volta", "V100: NCCL's Volta constants"},
    {"nccl_channels", "8", "two channels a NIC"},
    NCCL_FITTED("0.065us", "1us", "fitted with nccl_launch (same tables)", "0.6562", "0.8438",
                "fitted with nccl_launch (same tables)", "1.4766", "0.3125", "0.6562",
                "fitted (validate nccl --fit, 10 rounds, NCCL 2.8's figures, mean |log ratio| "
                "0.1869) to the 3 V100 tables with status ok (4-GPU ABCI nodes, not DGX-1)"),
    {"nccl_net_step_scale", "1.055", "fitted with nccl_launch (same tables; the 2- and 32-node "
                                     "rows below 1 MiB constrain it)"},
};

#define KEYS(a) a, sizeof a / sizeof a[0]

static const deftsim_config_preset presets[] = {
    {"dgx-h100", "NVIDIA DGX H100: 8 H100 SXM on NVSwitch (NVLink 4), 8 ConnectX-7 at 400 Gb/s",
     "https://docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-foundation-"
     "enterprise-ai/latest/core-components.html; "
     "https://www.nvidia.com/de-de/technologies/hopper-architecture/",
     KEYS(h100)},
    {"dgx-a100", "NVIDIA DGX A100: 8 A100 SXM on NVSwitch (NVLink 3), 8 ConnectX-6 at 200 Gb/s",
     "https://developer.nvidia.com/blog/introducing-hgx-a100-most-powerful-accelerated-server-"
     "platform-for-ai-hpc/; https://developer.nvidia.com/blog/defining-ai-innovation-with-dgx-a100/",
     KEYS(a100)},
    {"dgx1-v100", "NVIDIA DGX-1 (V100): 8 V100 SXM2, NVLink 2 hybrid cube-mesh, 4 EDR InfiniBand NICs",
     "NVIDIA DGX-1 System Architecture white paper (WP-08437-001); "
     "https://www.naddod.com/blog/hpc-networking-delivering-high-performance-for-dgx-server",
     KEYS(v100)},
};
#define NPRESETS (sizeof presets / sizeof presets[0])

_Static_assert(sizeof deftsim_cfg_preset_names / sizeof deftsim_cfg_preset_names[0] == NPRESETS + 2,
               "a name for every preset, after none");

size_t deftsim_config_preset_count(void) { return NPRESETS; }

const deftsim_config_preset *deftsim_config_preset_get(size_t i)
{
    return i < NPRESETS ? &presets[i] : NULL;
}

const deftsim_config_preset *deftsim_config_preset_find(const char *name)
{
    for (size_t i = 0; i < NPRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}
