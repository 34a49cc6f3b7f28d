#!/bin/bash
# The planning benchmark of docs/planning.md: ECMP (100 seeds) vs the plan vs
# the lower bound on the shared SimAI files, a three-tier CSV and generated
# fabrics of 1,024 and 8,192 GPUs, healthy and with the plan's busiest
# switch-to-switch link at a quarter of its capacity. Prints a Markdown table.
#
#   tools/plan-bench.sh [build/tools/pitstop/pitstop] [--quick | --large | --replan | --real]
#
# --real: every real description in ../shared/data/topology (Alibaba's
# published three-tier data at 1,024 GPUs, the ibnetdiscover output, SimAI's
# AlibabaHPN dual- and single-plane, Spectrum-X and DCN+ fabrics), packed
# and scattered.
# QPs per connection: `pitstop plan`'s default, --qps auto (1 unless the
# re-plan recovers < 90% of the healthy bound and 2, 4 or 8 QPs lift it;
# the last column says what was chosen: NCCL_IB_QPS_PER_CONNECTION).
# --replan: only the rows where one degraded link sits in an exactly full
# group of uplinks, each with one QP per connection (--qps 1) and with
# --qps auto (every QP its own flow and path).
set -euo pipefail
cd "$(dirname "$0")/.."
PITSTOP=${1:-build/tools/pitstop/pitstop}
QUICK=${2:-}
SHARED=../shared/data/topology
cases=(
  "$SHARED/Rail_Opti_SingleToR_16g_8gps_200Gbps_H20.txt|packed|"
  "$SHARED/Rail_Opti_SingleToR_16g_8gps_200Gbps_H20.txt|packed|--ranks 12"
  "$SHARED/Rail_Opti_SingleToR_64gpu_8gps_200Gbps_H20.txt|packed|"
  "tests/c4p/testdata/three_tier_64hosts.csv|packed|--aggs-per-pod 8 --cores-per-agg 8"
  "tests/c4p/testdata/three_tier_64hosts.csv|scattered|--aggs-per-pod 8 --cores-per-agg 8"
  "gen:leafspine,gpus=1024|packed|"
  "gen:leafspine,gpus=1024|scattered|"
  "gen:leafspine,gpus=1024,rail=0,hosts_per_tor=4|scattered|"
  "gen:3tier,gpus=1024,tors_per_pod=16|packed|"
  "gen:3tier,gpus=1024,tors_per_pod=16|scattered|"
  "gen:3tier,gpus=2048,tors_per_pod=16|scattered|--ranks 1024"
  "gen:leafspine,gpus=8192|scattered|"
  "gen:3tier,gpus=8192|packed|"
  "gen:3tier,gpus=8192|scattered|"
  "gen:3tier,gpus=8192,rail=0,hosts_per_tor=4|scattered|"
)
if [[ "$QUICK" == "--quick" ]]; then cases=("${cases[@]:0:11}"); fi
if [[ "$QUICK" == "--large" ]]; then cases=("${cases[@]:11}"); fi
if [[ "$QUICK" == "--real" ]]; then
  cases=()
  for t in "lingjun_topo_slice.csv|--ranks 1024" "ibnetdiscover_edr96.topo|" \
    "AlibabaHPN_64g_8gps_DualToR_DualPlane_200Gbps_H100.txt|" \
    "AlibabaHPN_64g_8gps_DualToR_SinglePlane_200Gbps_H100.txt|" \
    "Spectrum-X_64g_8gps_400Gbps_H100.txt|" \
    "DCN+SingleToR_64g_8gps_400Gbps_H100.txt|"; do
    for place in packed scattered; do
      cases+=("$SHARED/${t%%|*}|$place|${t#*|}")
    done
  done
fi
if [[ "$QUICK" == "--replan" ]]; then
  cases=()
  for c in \
    "tests/c4p/testdata/three_tier_64hosts.csv|packed|--aggs-per-pod 8 --cores-per-agg 8" \
    "tests/c4p/testdata/three_tier_64hosts.csv|scattered|--aggs-per-pod 8 --cores-per-agg 8" \
    "gen:leafspine,gpus=1024,rail=0,hosts_per_tor=4|scattered|" \
    "gen:3tier,gpus=1024,tors_per_pod=16|scattered|" \
    "gen:leafspine,gpus=8192|scattered|"; do
    extra=${c##*|}
    cases+=("$c${extra:+ }--qps 1" "$c${extra:+ }--qps auto")
  done
fi
echo "| fabric | placement | ECMP p50 | ECMP p99 | planned | bound | planned/bound | ECMP p99/planned | ECMP p50/planned | plan ms (CPU) | degraded: moved/flows | re-plan ms (CPU) | recovery | ECMP p50 degraded | QPs |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
  IFS='|' read -r topo place extra <<<"$c"
  # shellcheck disable=SC2086
  "$PITSTOP" plan --topology "$topo" --placement "$place" $extra \
      --degrade-busiest 0.25 -o json >/tmp/plan-bench.$$.json
  /usr/bin/python3 - "$topo" "$place" "$extra" /tmp/plan-bench.$$.json <<'PY'
import json, os, sys
topo, place, extra, path = sys.argv[1:5]
d = json.load(open(path))
h = d.get("healthy", d)
e, p, b = h["ecmp"], h["planned"], h["bound"]
name = os.path.basename(topo) + (" " + extra if extra else "")
row = [name, place, "%.2f ms" % (1e3 * e["completion_s_p50"]),
       "%.2f ms" % (1e3 * e["completion_s_p99"]),
       "%.2f ms" % (1e3 * p["completion_s"]), "%.2f ms" % (1e3 * b["completion_s"]),
       "%.3f" % (p["completion_s"] / b["completion_s"]),
       "%.2fx" % (e["completion_s_p99"] / p["completion_s"]),
       "%.2fx" % (e["completion_s_p50"] / p["completion_s"]),
       "%.0f (%.0f)" % (d["plan_ms"], d["plan_cpu_ms"])]
if "replan" in d:
    r = d["replan"]
    row += ["%d/%d (%.2f%%)" % (r["moved_flows"], d["network_flows"], 100 * r["moved_share"]),
            "%.1f (%.1f)" % (r["replan_ms"], r["replan_cpu_ms"]), "%.0f%%" % (100 * r["recovery_of_healthy_bound"]),
            "%.2f ms" % (1e3 * d["ecmp"]["completion_s_p50"])]
else:
    row += ["no switch link carries traffic", "-", "-", "-"]
q = d.get("qps", {})
row.append("%d%s" % (q.get("per_connection", 1), " (auto)" if q.get("auto") else ""))
print("| " + " | ".join(row) + " |")
PY
done
rm -f /tmp/plan-bench.$$.json
