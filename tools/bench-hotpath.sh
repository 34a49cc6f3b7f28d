#!/usr/bin/env bash
# The in-process library's hot path, side by side: this tree's build against
# a baseline build of the library, driven by the same harness in the same
# process (plugin_bench's BM_Pair, BM_BasePair, BM_NullPair; repetitions
# interleaved at random), several runs. Prints, per event pair, the own cost
# (pair minus the do-nothing plugin through the same harness) of each
# library, per run and the median over runs, and the ratio new/old.
# docs/benchmarks.md ("In-process library") has the numbers and the method.
#
#   tools/bench-hotpath.sh --baseline-rev 487ec2e        # build old .so once
#   tools/bench-hotpath.sh --baseline path/to/libnccl-profiler-pitstop.so
#
# Options:
#   --baseline SO       the library to compare against (a built .so)
#   --baseline-rev REV  build that commit's library in a git worktree of
#                       its own (BUILD/hotpath-baseline-REV, kept for later
#                       runs; only the .so target is built)
#   --build DIR         this tree's build directory (default: build); its
#                       plugin_bench is built if missing
#   --runs N            processes to run, one after another (default: 5)
#   --threads 1|2       producing threads per benchmark (default: 1)
#   --types LIST        pair types: 0 Coll, 1 KernelCh, 2 ProxyOp,
#                       3 ProxyStep (default: 0123)
#   --json DIR          keep each run's Google Benchmark JSON there
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
baseline=""
baseline_rev=""
runs=5
threads=1
types=0123
json_dir=""

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --baseline) baseline="$2"; shift 2 ;;
    --baseline-rev) baseline_rev="$2"; shift 2 ;;
    --build) build="$(cd "$2" && pwd)"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --types) types="$2"; shift 2 ;;
    --json) json_dir="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-hotpath: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done

if [[ -z "$baseline" && -z "$baseline_rev" ]]; then
  echo "bench-hotpath: give --baseline SO or --baseline-rev REV (--help)" >&2
  exit 2
fi
if ! [[ "$runs" =~ ^[1-9][0-9]*$ && "$threads" =~ ^[12]$ &&
        "$types" =~ ^[0-3]+$ ]]; then
  echo "bench-hotpath: --runs N>0, --threads 1|2, --types digits 0-3" >&2
  exit 2
fi

if [[ -n "$baseline_rev" ]]; then
  sha="$(git -C "$root" rev-parse --short=12 "$baseline_rev^{commit}")"
  wt="$build/hotpath-baseline-$sha"
  if [[ ! -f "$wt/build/plugin/libnccl-profiler-pitstop.so" ]]; then
    echo "bench-hotpath: building the library of $sha in $wt" >&2
    [[ -d "$wt" ]] || git -C "$root" worktree add --detach "$wt" "$sha" >&2
    cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPITSTOP_BUILD_BENCHMARKS=OFF >/dev/null
    ninja -C "$wt/build" -j"${JOBS:-2}" nccl-profiler-pitstop >&2
  fi
  baseline="$wt/build/plugin/libnccl-profiler-pitstop.so"
fi
[[ -f "$baseline" ]] || { echo "bench-hotpath: no such library: $baseline" >&2; exit 2; }
baseline="$(cd "$(dirname "$baseline")" && pwd)/$(basename "$baseline")"

bench="$build/tests/plugin/plugin_bench"
if [[ ! -x "$bench" ]]; then
  ninja -C "$build" -j"${JOBS:-2}" plugin_bench nccl-profiler-pitstop >&2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
out_dir="${json_dir:-$tmp}"
mkdir -p "$out_dir"
filter="^BM_(Base|Null)?Pair/type:[$types]/repeats:5/threads:$threads\$"
echo "bench-hotpath: $runs runs of $bench" >&2
echo "  new:      $build/plugin/libnccl-profiler-pitstop.so" >&2
echo "  baseline: $baseline" >&2
echo "  filter:   $filter (random interleaving), load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((i = 1; i <= runs; i++)); do
  PITSTOP_BENCH_BASELINE_PLUGIN="$baseline" "$bench" \
    --benchmark_filter="$filter" \
    --benchmark_enable_random_interleaving=true \
    --benchmark_out="$out_dir/run$i.json" --benchmark_out_format=json \
    >/dev/null 2>"$tmp/err$i" || { cat "$tmp/err$i" >&2; exit 1; }
done

# Debian's python3 (standard library only).
/usr/bin/python3 - "$out_dir" "$runs" "$types" "$threads" <<'EOF'
import json, statistics, sys
out_dir, runs, types, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
names = {"0": "Coll", "1": "KernelCh", "2": "ProxyOp", "3": "ProxyStep"}
per = {t: {"new": [], "old": [], "null": []} for t in types}
allocs = 0
for i in range(1, runs + 1):
    with open(f"{out_dir}/run{i}.json") as f:
        doc = json.load(f)
    med = {}
    for b in doc["benchmarks"]:
        if b.get("aggregate_name") == "median":
            assert b["time_unit"] == "ns", b["time_unit"]
            med[b["run_name"]] = b["cpu_time"]
            if b["run_name"].startswith("BM_Pair/"):
                allocs = max(allocs, b.get("allocs_per_pair", 0))
    for t in types:
        key = f"/type:{t}/repeats:5/threads:{threads}"
        null = med["BM_NullPair" + key]
        per[t]["null"].append(null)
        per[t]["new"].append(med["BM_Pair" + key] - null)
        per[t]["old"].append(med["BM_BasePair" + key] - null)

print(f"Own cost per start+stop pair, ns CPU (median of 5 repetitions minus "
      f"the null plugin's, {threads} thread(s)), {runs} runs:")
print(f"{'pair':<10} {'library':<9} " +
      " ".join(f"{'run ' + str(i):>7}" for i in range(1, runs + 1)) +
      f" {'median':>8}")
for t in types:
    for lib in ("old", "new"):
        v = per[t][lib]
        print(f"{names[t]:<10} {lib:<9} " + " ".join(f"{x:7.1f}" for x in v) +
              f" {statistics.median(v):8.1f}")
    r = [n / o if o > 0 else float("nan") for n, o in zip(per[t]["new"], per[t]["old"])]
    print(f"{names[t]:<10} {'new/old':<9} " + " ".join(f"{x:7.2f}" for x in r) +
          f" {statistics.median(r):8.2f}")
    print(f"{names[t]:<10} {'null':<9} " +
          " ".join(f"{x:7.1f}" for x in per[t]["null"]) +
          f" {statistics.median(per[t]['null']):8.1f}")
print(f"allocations per pair (new library, counted): at most {allocs:g}")
EOF
