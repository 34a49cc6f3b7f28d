#!/usr/bin/env bash
# The baseline a migration is measured against (docs/migration.md): the
# deterministic trainer on N ranks over the CPU NCCL backend, its median step
# time, and the time a full restart from a checkpoint costs (new processes,
# new communicator, load the checkpoint, first step done), measured in the
# same run. Prints one table; numbers depend on the machine's load.
#
# Usage: tools/dp-restart-bench.sh [RANKS=4] [STEPS=200] [BATCH=64]
#   env BUILD (default build)
set -euo pipefail
RANKS=${1:-4}
STEPS=${2:-200}
BATCH=${3:-64}
BUILD=${BUILD:-build}
T=$BUILD/src/trainer/pitstop-dp-trainer
[[ -x $T ]] || { echo "dp-restart-bench: $T missing; build first" >&2; exit 2; }
WORK=$(mktemp -d /tmp/pst-restart-bench-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export PITSTOP_CPU_NCCL_STORE_DIR=$WORK NCCL_PROFILER_PLUGIN=none
HALF=$((STEPS / 2))
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Job 1: steps [0, HALF), checkpoint at HALF.
ID=$($T --make-unique-id)
for ((r = 0; r < RANKS; r++)); do
  $T --rank $r --nranks $RANKS --unique-id "$ID" --steps $HALF --batch $BATCH \
     --log-every 1 --save-at $HALF --save "$WORK/ckpt$r" > "$WORK/job1.$r" &
done
wait
# Job 2: a full restart from the checkpoint, to STEPS.
ID=$($T --make-unique-id)
t0=$(now_ms)
for ((r = 0; r < RANKS; r++)); do
  $T --rank $r --nranks $RANKS --unique-id "$ID" --steps $STEPS --batch $BATCH \
     --log-every 1 --resume "$WORK/ckpt$r" > "$WORK/job2.$r" &
done
# First step of the new job done on rank 0 (polled: a benchmark, not a test).
until grep -q "^step $HALF " "$WORK/job2.0" 2>/dev/null; do sleep 0.005; done
t1=$(now_ms)
wait
# Reference: the same run without a restart.
ID=$($T --make-unique-id)
for ((r = 0; r < RANKS; r++)); do
  $T --rank $r --nranks $RANKS --unique-id "$ID" --steps $STEPS --batch $BATCH \
     --log-every 1 > "$WORK/ref.$r" &
done
wait
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
STEP_MS=$(awk '/^step/ {print $6}' "$WORK/ref.0" | median)
REF=$(awk '/^final/ {print $3}' "$WORK/ref.0")
RESUMED=$(awk '/^final/ {print $3}' "$WORK/job2.0")
printf '%-34s %s\n' "ranks" "$RANKS" \
  "steps (restart at)" "$STEPS ($HALF)" \
  "median step (ms)" "$STEP_MS" \
  "full restart to first step (ms)" "$((t1 - t0))" \
  "final weights, straight run" "$REF" \
  "final weights, restarted run" "$RESUMED"
[[ $REF == "$RESUMED" ]] || { echo "dp-restart-bench: weights differ" >&2; exit 1; }
