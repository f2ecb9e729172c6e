#!/usr/bin/env bash
# The GPU-cluster study of docs/examples/dgx_h100_tuned/, rerun from one command: every method
# on DGX H100 nodes (`network.preset=dgx-h100`: NCCL's tuned model, validated against the
# nccl-tests corpus by `deftsim validate nccl`), ResNet-18 and BERT-base, d = 0.01.
#
#   bash scripts/dgx-h100-study.sh OUT [comm|iter|big|all]
#
#   comm  communication alone (`deftsim bench sim`, approximate mode): ResNet-18 at P = 8 to
#         1024 with NCCL's own choice of algorithm and with the ring forced, BERT-base at
#         P = 8 to 1024 with NCCL's choice; OUT/comm_*.csv
#   iter  the whole iteration with selection (`deftsim sweep` of scenarios/dgx_h100_study.ini,
#         ResNet-18, P = 8 to 64, two iterations, the first left out by analyze): selection
#         timed on this machine's CPU (OUT/cpu), and charged from the H100 profiles
#         (OUT/best, OUT/torch); NCCL's choice, and the ring forced with the best profile
#         (OUT/best_ring)
#   big   the whole iteration at P = 128 to 1024 (16 to 128 nodes), selection charged from the
#         best H100 profile, NCCL's choice (OUT/big_best) and the ring forced
#         (OUT/big_best_ring); one timing repetition (the profile charges the selection, so
#         repetitions would only regenerate the sampled workers' gradients: rows agree to 14
#         significant digits) and half the RAM as memory budget; docs/examples/dgx_h100_tuned says how long it took.
#         Not part of `all`.
#
# Each part prints its wall time; OUT/commands.txt records every command as run, with the
# commit. A sweep resumes where it stopped. DEFTSIM=PATH runs that binary instead of
# build/deftsim (which is built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 2; }
out=$1
what=${2:-all}
case "$what" in comm|iter|big|all) ;; *) echo "dgx-h100-study: unknown part '$what' (comm, iter, big, all)" >&2; exit 2 ;; esac
[ -n "${DEFTSIM:-}" ] || [ -x build/deftsim ] || bash scripts/build.sh
deftsim=${DEFTSIM:-./build/deftsim}
mkdir -p "$out"
log="$out/commands.txt"
echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >> "$log"

run() {
  echo "$*" >> "$log"
  local t0=$SECONDS
  "$@"
  echo "  ($((SECONDS - t0)) s)" | tee -a "$log" >&2
}

net=(--set network.preset=dgx-h100 --set network.library=nccl --set network.mode=approximate)
methods=deft,topk,topk-ag,cltk,gtopk,dgc,dense,micro,exdyna,oktopk

if [ "$what" = comm ] || [ "$what" = all ]; then
  run "$deftsim" bench sim --P 8,16,32,64,128,256,512,1024 --methods "$methods" --csv "${net[@]}" \
    > "$out/comm_resnet18_auto.csv"
  run "$deftsim" bench sim --P 8,16,32,64,128,256,512,1024 --methods "$methods" --csv "${net[@]}" \
    --set network.nccl_algorithm=ring > "$out/comm_resnet18_ring.csv"
  run "$deftsim" bench sim --model bert_base_uncased --P 8,16,32,64,128,256,512,1024 --methods "$methods" \
    --csv "${net[@]}" > "$out/comm_bert_base_auto.csv"
fi

if [ "$what" = iter ] || [ "$what" = all ]; then
  sweep=(scenarios/dgx_h100_study.ini --set gradients.model=resnet18_cifar10 --set gradients.params=none
         --set workers.counts=8,16,32,64 --set scenario.iterations=2)
  for kind in cpu best torch best_ring; do
    extra=(--set network.nccl_algorithm=auto)
    case "$kind" in
      best) extra+=(--set device.kind=profile --set device.profile=profiles/h100-sxm5-best.csv) ;;
      torch) extra+=(--set device.kind=profile --set device.profile=profiles/h100-sxm5-torch.csv) ;;
      best_ring) extra=(--set network.nccl_algorithm=ring --set device.kind=profile
                        --set device.profile=profiles/h100-sxm5-best.csv) ;;
    esac
    run "$deftsim" sweep "${sweep[@]}" "${extra[@]}" -o "$out/$kind"
    run "$deftsim" analyze "$out/$kind" --warmup 1
  done
fi

if [ "$what" = big ]; then
  sweep=(scenarios/dgx_h100_study.ini --set gradients.model=resnet18_cifar10 --set gradients.params=none
         --set scenario.iterations=2 --set device.kind=profile --set device.profile=profiles/h100-sxm5-best.csv
         --set timing.repeats=1 --set engine.memory_budget=0.5)
  for algo in auto ring; do
    dir=$out/big_best; [ "$algo" = ring ] && dir=$out/big_best_ring
    for P in 128,256 512 1024; do
      run "$deftsim" sweep "${sweep[@]}" --set workers.counts=$P --set network.nccl_algorithm=$algo \
        -o "$dir/P${P%%,*}"
      run "$deftsim" analyze "$dir/P${P%%,*}" --warmup 1
    done
  done
fi
