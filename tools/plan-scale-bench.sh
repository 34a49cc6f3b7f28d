#!/bin/bash
# Wall time of the planner at scale, two builds side by side (docs/planning.md,
# "Wall time at scale"): a full plan and a re-plan after the plan's busiest
# switch-to-switch link drops to 25%, per fabric. The two drivers run in
# turn (A B A B ...), one repetition each, so a change of the machine's load
# hits both; the table holds each one's median and the ratio A/B of medians.
#
#   tools/plan-scale-bench.sh OLD_DRIVER NEW_DRIVER [REPS] [--plan|--replan]
#       [EXTRA]
#
# EXTRA: flags added to every case (e.g. "--qps 8": the QP count `pitstop
# plan --qps auto` picks after a degraded link in an exactly full group).
#
# "refused": that build could not read the fabric (the previous reader
# refused Alibaba's published data). A driver is
# tools/plan-scale-bench/plan_scale_bench.cc built in a tree
# (build/tools/plan-scale-bench/pitstop-plan-scale-bench); build it in a
# checkout of the previous revision to compare against it.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$1
NEW=$2
REPS=${3:-3}
WHICH=${4:-}
EXTRA_ALL=${5:-}
SHARED=../shared/data/topology
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Oversubscribed fabrics in the published three-tier CSV layout
# (ip,DSW,PSW,ASW, hashed host ids), 1,024 hosts = 8,192 GPUs with the
# reader's default assumptions (8 aggregation switches per PSW group, 8
# cores per aggregation switch, 400 Gbps): DSW PSW-per-DSW ASW-per-PSW.
# 2 8 16: ToRs 4:1 (32 NICs, 8 uplinks), aggregation 2:1 (16 down, 8 up);
# 2 7 13: 5-6 hosts per ASW, flows that do not divide evenly over a tier.
three_tier_csv() {
  local out="$tmp/csv_$1x$2x$3.csv"
  /usr/bin/python3 - "$1" "$2" "$3" "$out" <<'PY'
import hashlib, sys
d, p, a, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
asws = [(f"G{i}", f"P{j}", f"S{k}") for i in range(d) for j in range(p)
        for k in range(a)]
with open(out, "w") as f:
    f.write("ip,DSW,PSW,ASW\n")
    for h in range(1024):
        g, ps, s = asws[h * len(asws) // 1024]
        f.write(f"{hashlib.sha256(str(h).encode()).hexdigest()},{g},{ps},{s}\n")
PY
  echo "$out"
}
plan_cases=(
  "gen:3tier,gpus=8192|scattered|"
  "gen:leafspine,gpus=8192|scattered|"
  "gen:3tier,gpus=8192,rail=0,hosts_per_tor=4|scattered|"
  "$(three_tier_csv 2 8 16)|scattered|"
  "$(three_tier_csv 4 4 16)|scattered|"
  "$(three_tier_csv 2 8 32)|scattered|"
  "$(three_tier_csv 2 7 13)|scattered|"
)
replan_cases=(
  "gen:3tier,gpus=1024,tors_per_pod=16|scattered|"
  "gen:3tier,gpus=1024,tors_per_pod=16|scattered|--qps 2"
  "gen:leafspine,gpus=1024,rail=0,hosts_per_tor=4|scattered|--qps 8"
  "tests/c4p/testdata/three_tier_64hosts.csv|scattered|--qps 4"
  "$SHARED/lingjun_topo_slice.csv|scattered|--ranks 1024 --qps 4"
)
cases=()
[[ "$WHICH" != "--replan" ]] && cases+=("${plan_cases[@]}")
[[ "$WHICH" != "--plan" ]] && cases+=("${replan_cases[@]}")
echo "| fabric | placement | plan wall ms A / B (A/B) | plan CPU ms A / B | re-plan wall ms A / B (A/B) | re-plan CPU ms A / B | moved/crossing |"
echo "|---|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
  IFS='|' read -r topo place extra <<<"$c"
  extra="$extra${EXTRA_ALL:+ $EXTRA_ALL}"
  : >"$tmp/a"
  : >"$tmp/b"
  for ((i = 0; i < REPS; i++)); do
    # shellcheck disable=SC2086
    "$OLD" "$topo" --placement "$place" $extra --reps 1 2>"$tmp/a.err" |
      grep summary >>"$tmp/a" || true
    # shellcheck disable=SC2086
    "$NEW" "$topo" --placement "$place" $extra --reps 1 2>"$tmp/b.err" |
      grep summary >>"$tmp/b" || true
  done
  /usr/bin/python3 - "$topo${extra:+ $extra}" "$place" "$tmp/a" "$tmp/b" <<'PY'
import json, statistics, sys
name, place, a_path, b_path = sys.argv[1:5]
def load(p):
    return [json.loads(l) for l in open(p)]
a, b = load(a_path), load(b_path)
def med(rows, k):
    return statistics.median(r[k] for r in rows) if rows else None
def pair(k, fmt):
    x, y = med(a, k), med(b, k)
    show = lambda v: "refused" if v is None else fmt.format(v)
    ratio = f" ({x / y:.2f}x)" if x is not None and y else ""
    return f"{show(x)} / {show(y)}" + (ratio if "wall" in k else "")
name = name.replace("../shared/data/topology/", "")
name = name.split("/")[-1] if "/csv_" in name else name
print(f"| {name} | {place} | {pair('plan_wall_ms', '{:.0f}')} | "
      f"{pair('plan_cpu_ms', '{:.0f}')} | {pair('replan_wall_ms', '{:.1f}')} | "
      f"{pair('replan_cpu_ms', '{:.1f}')} | "
      + (f"{b[-1]['moved']}/{b[-1]['crossing']}" if b else "-") + " |")
PY
done
