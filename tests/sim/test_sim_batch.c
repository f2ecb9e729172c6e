/* test_sim_batch.c - deftsim_sim_run_batch: several simulations on one loaded platform give
 * every job's results to the last bit as deftsim_sim_run gives them alone, on a generated
 * multi-GPU platform with NCCL (exact and approximate) and on the flat cluster with MPI's
 * algorithms, one job at a time or several side by side; a failing job is named and leaves
 * nothing allocated. The schedules of one deftsim_sim_run (a point's iterations) are likewise
 * each simulated as if alone, whatever the number of processes. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "simtest.h"

#define NJOBS 5

/* Five unlike schedules: an allreduce, an uneven allgather, gTop-k's tree, Ok-Topk's rounds
 * and a broadcast then an allreduce. */
static void make_jobs(deftsim_schedule *s, uint32_t P)
{
    simtest_one_step(&s[0], P, DEFTSIM_STEP_ALLREDUCE, 4u * 40000, 0, 0);
    simtest_one_step(&s[1], P, DEFTSIM_STEP_ALLGATHER, 3000, 1, 0);
    simtest_gtopk(&s[2], P, 8000);
    simtest_oktopk_rounds(&s[3], P, 800, 0);
    simtest_one_step(&s[4], P, DEFTSIM_STEP_BCAST, 200000, 0, 3);
    deftsim_step *st = deftsim_schedule_add(&s[4], DEFTSIM_STEP_ALLREDUCE, "after");
    cr_assert(st);
    for (uint32_t r = 0; r < P; r++) st->bytes[r] = 4u * 5000;
}

static void same_as_alone(const deftsim_sim_params *p)
{
    deftsim_schedule s[NJOBS];
    const deftsim_schedule *ptr[NJOBS];
    deftsim_sim_job jobs[NJOBS];
    deftsim_sim_result batch[NJOBS];
    make_jobs(s, p->P);
    for (size_t i = 0; i < NJOBS; i++) {
        ptr[i] = &s[i];
        jobs[i] = (deftsim_sim_job){&ptr[i], 1};
    }
    size_t failed = 99;
    cr_assert_eq(deftsim_sim_run_batch(p, jobs, NJOBS, batch, &failed), DEFTSIM_OK, "%s",
                 deftsim_error_message());
    for (size_t i = 0; i < NJOBS; i++) {
        deftsim_sim_result one;
        cr_assert_eq(deftsim_sim_run(p, &ptr[i], 1, &one), DEFTSIM_OK, "%s", deftsim_error_message());
        size_t cells = one.step_offset[1] * p->P;
        cr_expect_eq(batch[i].step_offset[1], one.step_offset[1]);
        cr_expect_eq(batch[i].messages, one.messages, "job %zu: %llu messages against %llu", i,
                     (unsigned long long)batch[i].messages, (unsigned long long)one.messages);
        cr_expect_eq(memcmp(batch[i].start, one.start, cells * sizeof(double)), 0, "job %zu start", i);
        cr_expect_eq(memcmp(batch[i].end, one.end, cells * sizeof(double)), 0, "job %zu end", i);
        cr_expect_eq(memcmp(batch[i].sent, one.sent, cells * sizeof(uint64_t)), 0, "job %zu sent", i);
        cr_expect_eq(memcmp(batch[i].recv, one.recv, cells * sizeof(uint64_t)), 0, "job %zu recv", i);
        cr_expect_eq(batch[i].iteration_seconds[0], one.iteration_seconds[0], "job %zu: %.17g against %.17g",
                     i, batch[i].iteration_seconds[0], one.iteration_seconds[0]);
        cr_expect_eq(batch[i].mode, one.mode);
        cr_expect_gt(batch[i].wall_seconds, 0);
        cr_expect_gt(batch[i].peak_rss_bytes, 0);
        deftsim_sim_result_free(&one);
        deftsim_sim_result_free(&batch[i]);
    }
    for (size_t i = 0; i < NJOBS; i++) deftsim_schedule_free(&s[i]);
}

/* NCCL on 4 nodes of 8 GPUs, a NIC each, 4 channels. */
static void nccl_eight_gpu_nodes(deftsim_sim_params *p)
{
    simtest_params(p, 32);
    p->library = DEFTSIM_LIB_NCCL;
    p->gpus_per_node = 8;
    p->nics_per_node = 8;
    p->nccl_channels = 4;
}

Test(sim_batch, nccl_on_eight_gpu_nodes_as_alone)
{
    deftsim_sim_params p;
    nccl_eight_gpu_nodes(&p);
    same_as_alone(&p);
    p.mode = DEFTSIM_SIM_APPROXIMATE;
    same_as_alone(&p);
    p.procs = 3; /* jobs 0 to 2 side by side, then 3 and 4 as the earlier ones end */
    same_as_alone(&p);
}

Test(sim_batch, mpi_on_the_flat_cluster_as_alone)
{
    deftsim_sim_params p;
    simtest_params(&p, 24);
    same_as_alone(&p);
}

Test(sim_batch, a_failing_job_is_named)
{
    deftsim_sim_params p;
    simtest_params(&p, 8);
    deftsim_schedule good, bad;
    simtest_one_step(&good, 8, DEFTSIM_STEP_ALLREDUCE, 4000, 0, 0);
    simtest_one_step(&bad, 4, DEFTSIM_STEP_ALLREDUCE, 4000, 0, 0); /* 4 ranks, not P = 8 */
    const deftsim_schedule *pg = &good, *pb = &bad;
    deftsim_sim_job jobs[3] = {{&pg, 1}, {&pg, 1}, {&pb, 1}};
    deftsim_sim_result r[3];
    size_t failed = 99;
    cr_expect_neq(deftsim_sim_run_batch(&p, jobs, 3, r, &failed), DEFTSIM_OK);
    cr_expect_eq(failed, 2);
    for (size_t i = 0; i < 3; i++) cr_expect_null(r[i].start);
    deftsim_schedule_free(&good);
    deftsim_schedule_free(&bad);
}

/* The schedules of one deftsim_sim_run each give, to the last bit, what they give alone: one
 * at a time (procs = 1) or 2 or 3 side by side. */
static void schedules_as_alone(deftsim_sim_params *p)
{
    deftsim_schedule s[NJOBS];
    const deftsim_schedule *ptr[NJOBS];
    deftsim_sim_result alone[NJOBS];
    make_jobs(s, p->P);
    for (size_t i = 0; i < NJOBS; i++) {
        ptr[i] = &s[i];
        cr_assert_eq(deftsim_sim_run(p, &ptr[i], 1, &alone[i]), DEFTSIM_OK, "%s",
                     deftsim_error_message());
    }
    for (unsigned procs = 1; procs <= 3; procs++) {
        p->procs = procs;
        deftsim_sim_result all;
        cr_assert_eq(deftsim_sim_run(p, ptr, NJOBS, &all), DEFTSIM_OK, "%s", deftsim_error_message());
        uint64_t messages = 0;
        for (size_t i = 0; i < NJOBS; i++) {
            size_t cells = alone[i].step_offset[1] * p->P, at = all.step_offset[i] * p->P;
            cr_expect_eq(all.step_offset[i + 1] - all.step_offset[i], alone[i].step_offset[1]);
            cr_expect_eq(memcmp(all.start + at, alone[i].start, cells * sizeof(double)), 0,
                         "procs %u, schedule %zu: start", procs, i);
            cr_expect_eq(memcmp(all.end + at, alone[i].end, cells * sizeof(double)), 0,
                         "procs %u, schedule %zu: end", procs, i);
            cr_expect_eq(memcmp(all.sent + at, alone[i].sent, cells * sizeof(uint64_t)), 0,
                         "procs %u, schedule %zu: sent", procs, i);
            cr_expect_eq(memcmp(all.recv + at, alone[i].recv, cells * sizeof(uint64_t)), 0,
                         "procs %u, schedule %zu: recv", procs, i);
            cr_expect_eq(all.iteration_seconds[i], alone[i].iteration_seconds[0],
                         "procs %u, schedule %zu: %.17g against %.17g", procs, i,
                         all.iteration_seconds[i], alone[i].iteration_seconds[0]);
            cr_expect_eq(all.comm_seconds[i], alone[i].comm_seconds[0], "procs %u, schedule %zu",
                         procs, i);
            messages += alone[i].messages;
        }
        cr_expect_eq(all.messages, messages, "procs %u: %llu messages against %llu", procs,
                     (unsigned long long)all.messages, (unsigned long long)messages);
        cr_expect_eq(all.mode, p->mode);
        cr_expect_gt(all.wall_seconds, 0);
        cr_expect_gt(all.peak_rss_bytes, 0);
        cr_expect(all.procs >= 1 && all.procs <= procs, "procs %u: %u at once", procs, all.procs);
        deftsim_sim_result_free(&all);
    }
    for (size_t i = 0; i < NJOBS; i++) {
        deftsim_sim_result_free(&alone[i]);
        deftsim_schedule_free(&s[i]);
    }
}

Test(sim_batch, a_points_iterations_each_as_alone)
{
    deftsim_sim_params p;
    nccl_eight_gpu_nodes(&p);
    schedules_as_alone(&p);
    p.mode = DEFTSIM_SIM_APPROXIMATE;
    schedules_as_alone(&p);
    simtest_params(&p, 24);
    schedules_as_alone(&p);
}
