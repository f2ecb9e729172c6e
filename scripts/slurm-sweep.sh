#!/usr/bin/env bash
# slurm-sweep.sh - an example of a deftsim sweep on a Slurm cluster: a job array of N shards
# that sweep one folder on a shared file system, and a job that depends on the array, joins the
# shards and analyses them (docs/CLUSTER.md, "Sharded sweeps").
#
# NOT TESTED ON SLURM: no Slurm cluster was at hand when this was written. What it runs was
# checked by tests/sweep/slurm_script.py, which runs this script's `shard` and `merge` steps
# with SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT set by hand, and its `submit` step with a
# stand-in sbatch that records its arguments. Adapt the #SBATCH lines (partition, account,
# time, memory) to your cluster.
#
# Usage, from the repository root on a login node (deftsim built, the output folder on a file
# system every compute node mounts: NFS, Lustre, GPFS, BeeGFS):
#
#   SCENARIO=scenarios/resnet18_default.ini OUT=/shared/results/resnet18 SHARDS=8 \
#       bash scripts/slurm-sweep.sh submit
#
# which submits
#   1. this script as a job array of SHARDS tasks (sbatch --array=0-<SHARDS-1>), each running
#        deftsim sweep SCENARIO -o OUT --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT
#      (a task that failed or ran out of time: resubmit its index alone, with N given, e.g.
#        SHARD_COUNT=8 sbatch --array=5 scripts/slurm-sweep.sh
#      and it resumes its shard);
#   2. this script's `merge` step as a job that starts when every task has ended well
#      (--dependency=afterok:<array job>): deftsim sweep --merge OUT, deftsim analyze OUT and,
#      when gnuplot is there, deftsim plot OUT.
# The last task to finish joins rows.csv and manifest.json already; the merge job makes the
# join certain (a file system's attribute caching can hide a shard's last write from another
# node for a few seconds) and is idempotent.
#
# The same script can be given to sbatch directly, with the array size in the #SBATCH line
# below (N shards: --array=0-N-1); the merge then has to be submitted by hand:
#   jid=$(sbatch --parsable scripts/slurm-sweep.sh)
#   sbatch --dependency=afterok:$jid --wrap="bash scripts/slurm-sweep.sh merge"
# The array's indices must be 0 to N-1 with no step (the shard is SLURM_ARRAY_TASK_ID of
# SLURM_ARRAY_TASK_COUNT); "%K" after the range, which caps the tasks running at once, is fine.
#
# Variables: SCENARIO (scenario file), OUT (output folder, shared), SHARDS (submit: N),
# SHARD_COUNT (shard: N, when the array is not the whole split),
# DEFTSIM (the program; default build/deftsim), EXTRA (more options for deftsim sweep, such as
# "--vary network.bandwidth=10Gbps,25Gbps"; every shard must be given the same), PLOT (0: no
# figures).
#
#SBATCH --job-name=deftsim-sweep
#SBATCH --array=0-3
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --time=04:00:00
#SBATCH --output=deftsim-sweep-%A_%a.log
# For measured times, a node to each shard (shards sharing a node compete for its cores):
##SBATCH --exclusive
set -euo pipefail

SCENARIO=${SCENARIO:-scenarios/resnet18_default.ini}
OUT=${OUT:-results/slurm-sweep}
DEFTSIM=${DEFTSIM:-build/deftsim}
SHARDS=${SHARDS:-4}
EXTRA=${EXTRA:-}
PLOT=${PLOT:-1}
step=${1:-shard}

case "$step" in
shard)
    # One array task: shard I of N. Slurm sets both variables in every task of an array.
    : "${SLURM_ARRAY_TASK_ID:?not in a Slurm job array (set SLURM_ARRAY_TASK_ID by hand to test)}"
    : "${SLURM_ARRAY_TASK_COUNT:?not in a Slurm job array (set SLURM_ARRAY_TASK_COUNT by hand)}"
    # SHARD_COUNT, when set, is N instead: a task resubmitted alone (sbatch --array=5) is in an
    # array of one task, but still shard 5 of the N.
    count=${SHARD_COUNT:-$SLURM_ARRAY_TASK_COUNT}
    # shellcheck disable=SC2086 # EXTRA holds several options on purpose
    exec "$DEFTSIM" sweep "$SCENARIO" -o "$OUT" $EXTRA \
        --shard "$SLURM_ARRAY_TASK_ID/$count" --progress lines
    ;;
merge)
    # After every shard: the join (idempotent: the last shard may have done it), the summary,
    # the figures.
    "$DEFTSIM" sweep --merge "$OUT"
    "$DEFTSIM" analyze "$OUT"
    if [ "$PLOT" != 0 ] && command -v gnuplot >/dev/null 2>&1; then
        "$DEFTSIM" plot "$OUT"
    fi
    ;;
submit)
    # From a login node: the array, then the merge once every task has ended well. The
    # variables travel with the jobs (sbatch exports the environment by default).
    export SCENARIO OUT DEFTSIM EXTRA PLOT
    export SHARD_COUNT=$SHARDS
    self=$(readlink -f "${BASH_SOURCE[0]}")
    # The scenario checked here, before anything waits in the queue.
    # shellcheck disable=SC2086
    "$DEFTSIM" sweep "$SCENARIO" -o "$OUT" $EXTRA --dry-run --shard 0/"$SHARDS" >/dev/null
    array=$(sbatch --parsable --array=0-$((SHARDS - 1)) "$self" shard)
    array=${array%%;*} # "jobid;cluster" on a federated cluster
    # --wrap: a job of its own, without this file's #SBATCH lines (no --array).
    merge=$(sbatch --parsable --job-name=deftsim-merge --dependency=afterok:"$array" \
        --output=deftsim-merge-%j.log --wrap="bash '$self' merge")
    echo "submitted: shards $array (array 0-$((SHARDS - 1))), merge ${merge%%;*} after them -> $OUT"
    ;;
*)
    echo "usage: bash scripts/slurm-sweep.sh [shard|merge|submit]" >&2
    exit 2
    ;;
esac
