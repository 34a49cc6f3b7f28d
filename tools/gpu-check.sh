#!/usr/bin/env bash
# The prepared GPU check (docs/benchmarks.md, "GPU check"; issue 28).
#
# Builds the in-process library alone (-DPITSTOP_PLUGIN_ONLY=ON: no gRPC,
# Protobuf, Abseil or any other package) and runs a small DDP job on the one
# GPU with torch's own `nccl` backend three ways, interleaved: without the
# library, with it as NCCL_PROFILER_PLUGIN, and LD_PRELOADed. It reads what
# the library counted (PITSTOP_STATS_FILE) and fails loudly when NCCL did not
# load it or it saw nothing, and reports the step-time overhead of each way
# against the baseline. Without a GPU it runs everything before that point
# and exits 4.
set -uo pipefail

usage() {
  cat <<'EOF'
usage: tools/gpu-check.sh [--out DIR] [--reps N] [--steps N] [--warmup N]
                          [--budget-s S] [--cpu-build DIR] [--no-gpu]

  --out DIR        where results go (default: $OUT, else ./gpu-check-out)
  --reps N         repetitions of the three-way trio (default 5; fewer if the
                   time budget runs out, at least 3 for an overhead figure)
  --steps N        timed steps per run (default 300), --warmup N untimed (30)
  --budget-s S     wall-clock budget for the whole check (default 450 s); the
                   GPU repetitions stop early to stay inside it
  --cpu-build DIR  a default build tree with the CPU NCCL backend
                   (cpu_nccl_rank): without a GPU, the stats path is checked
                   on it (default: build/ of this checkout; skipped, with a
                   line, when absent)
  --no-gpu         stop where the GPU part starts even if there is a GPU
  PYTHON=...       the python with torch (default: python3, else /usr/bin/python3)
  PITSTOP_CMAKE_ARGS=...  extra cmake arguments for the library-alone build

Writes under the output directory (at most 8 files, as the device tool
brings back): result.md and result.json (the GPU result, or "not run: no
GPU"), runs.tar.gz (runs/rep<k>-<mode>/: job.json, job.log with NCCL's INFO
lines, stats-<pid>.json), build.log; without a GPU also dry-run/ and
cpu-nccl/ (the CPU self-checks).

Exit codes:
  0  GPU check ran; NCCL loaded the library both ways and it counted events
     and interposer calls (the overhead target is reported in result.md)
  1  a check failed: NCCL did not load the plugin, zero events, no
     interposer call, a job failed or timed out, or a CPU self-check failed
  2  usage error
  3  building the library alone failed (cmake >= 3.25 and a C++20 compiler
     are needed)
  4  no GPU here: the library-alone build and the CPU self-checks passed,
     the GPU part was not run
EOF
}

start=$(date +%s)
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-./gpu-check-out}
reps=5 steps=300 warmup=30 budget_s=450 cpu_build="$repo/build" no_gpu=0
while (($#)); do
  case "$1" in
    --out | --reps | --steps | --warmup | --budget-s | --cpu-build)
      (($# >= 2)) || { echo "gpu-check: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --out) out=$2 ;;
        --reps) reps=$2 ;;
        --steps) steps=$2 ;;
        --warmup) warmup=$2 ;;
        --budget-s) budget_s=$2 ;;
        --cpu-build) cpu_build=$2 ;;
      esac
      shift 2
      ;;
    --no-gpu) no_gpu=1 && shift ;;
    -h | --help) usage && exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2 && usage >&2 && exit 2 ;;
  esac
done
for v in reps steps warmup budget_s; do
  min=1
  [[ $v == warmup ]] && min=0
  if ! [[ ${!v} =~ ^[0-9]+$ ]] || ((${!v} < min)); then
    echo "gpu-check: --${v//_/-} must be an integer >= $min, not '${!v}'" >&2
    exit 2
  fi
done

mkdir -p "$out" && out=$(cd "$out" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
# The library-alone tree sits beside the default tree (--cpu-build), as
# build-gpu-check.XXXXXX: ccache (CCACHE_BASEDIR) keys on paths relative to
# the build folder, so only a folder at the same place relative to the
# sources reuses the default tree's objects (from $tmp every one of the 28
# missed: 40 s of CPU). Elsewhere, when that folder cannot be written.
build_parent=$(dirname "$cpu_build")
if ! build=$(mktemp -d "$build_parent/build-gpu-check.XXXXXX" 2> /dev/null); then
  build="$tmp/build"
fi
trap 'rm -rf "$tmp" "$build"' EXIT
elapsed() { echo $(($(date +%s) - start)); }
say() { echo "=== [$(elapsed)s] $*"; }
fail() {
  echo "gpu-check: FAIL: $*" >&2
  exit "${2:-1}"
}

# --- 1. The library alone ----------------------------------------------------
# Every package the full build uses is disabled: a find_package(... REQUIRED)
# of one of them is a configure error, so this proves the GPU machine (which
# has none of them) can build it.
say "building libnccl-profiler-pitstop.so alone (PITSTOP_PLUGIN_ONLY=ON)"
disabled=()
for p in absl Protobuf gRPC OpenSSL fmt spdlog CLI11 yaml-cpp prometheus-cpp \
  SQLite3 ZLIB nlohmann_json PkgConfig GTest benchmark Gloo; do
  disabled+=("-DCMAKE_DISABLE_FIND_PACKAGE_$p=ON")
done
command -v cmake > /dev/null || fail "cmake not found (3.25+ needed)" 3
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
jobs=$(nproc 2> /dev/null || echo 2)
# PITSTOP_CMAKE_ARGS (as tools/test.sh takes it; CI sets -Werror there): the
# same flags as the tree just built, so ccache serves its objects.
read -ra extra <<< "${PITSTOP_CMAKE_ARGS:-}"
configure=(cmake -S "$repo" -B "$build" "${gen[@]}" -DPITSTOP_PLUGIN_ONLY=ON
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPITSTOP_DEBUG_INFO=lines "${extra[@]}"
  "${disabled[@]}")
echo "+ ${configure[*]}" > "$out/build.log"
if ! timeout 120 "${configure[@]}" >> "$out/build.log" 2>&1; then
  tail -20 "$out/build.log" >&2
  fail "configuring the library alone failed ($out/build.log)" 3
fi
if ! timeout 600 cmake --build "$build" -j "$jobs" \
  --target nccl-profiler-pitstop >> "$out/build.log" 2>&1; then
  tail -30 "$out/build.log" >&2
  fail "building the library alone failed ($out/build.log)" 3
fi
lib="$build/plugin/libnccl-profiler-pitstop.so"
[[ -f $lib ]] || fail "no $lib after the build" 3
if command -v readelf > /dev/null; then
  needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  say "built $lib (NEEDED: $needed)"
else
  say "built $lib"
fi

# --- 2. Python with torch ----------------------------------------------------
# The python with torch: asked once for its torch, CUDA and GPU count.
probe="import torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(n, torch.__version__, torch.version.cuda or 'none')"
py="" torch_line=""
for c in ${PYTHON:-python3 /usr/bin/python3}; do
  command -v "$c" > /dev/null || continue
  if torch_line=$(timeout 120 "$c" -c "$probe" 2> "$tmp/torch.err"); then
    py=$c
    break
  fi
done
if [[ -z $py ]]; then
  cat "$tmp/torch.err" >&2
  fail "no python with torch (tried: ${PYTHON:-python3 /usr/bin/python3}; set PYTHON=...)"
fi
read -r n_gpus torch_version cuda_version <<< "$torch_line"
say "python: $py, torch $torch_version (CUDA $cuda_version), $n_gpus GPU(s)"

# run_job DIR TIMEOUT [-u NAME | NAME=VALUE]... -- JOB ARGS...: one run of
# the job with that environment, bounded by TIMEOUT seconds.
run_job() {
  local dir=$1 limit=$2
  shift 2
  local unset=() set=()
  while [[ $1 != -- ]]; do
    if [[ $1 == -u ]]; then
      unset+=(-u "$2") && shift 2
    else
      set+=("$1") && shift
    fi
  done
  shift
  mkdir -p "$dir"
  timeout "$limit" env "${unset[@]}" "${set[@]}" "$py" \
    "$repo/tools/gpu_check/job.py" --out "$dir/job.json" "$@" \
    > "$dir/job.log" 2>&1
}

gpu=1
((n_gpus > 0)) || gpu=0
((no_gpu)) && gpu=0

if ((!gpu)); then
  # --- 3. CPU self-checks (what this machine can run) ------------------------
  say "job script self-check: --dry-run (CPU, gloo)"
  if ! run_job "$out/dry-run" 180 -u LD_PRELOAD -u NCCL_PROFILER_PLUGIN \
    -u PITSTOP_STATS_FILE -- --dry-run; then
    tail -20 "$out/dry-run/job.log" >&2
    fail "the job script's dry run failed ($out/dry-run/job.log)"
  fi
  tail -1 "$out/dry-run/job.log"

  # The stats path on real collectives: the library just built, loaded by
  # the CPU NCCL backend as its profiler and again LD_PRELOADed, read by the
  # same checks the GPU runs get.
  rank_bin="$cpu_build/tests/nccl/cpu_nccl_rank"
  cpu_nccl="$cpu_build/src/nccl/cpu/lib/libnccl.so.2"
  if [[ -x $rank_bin && -f $cpu_nccl ]]; then
    for mode in profiler preload; do
      say "stats path over the CPU NCCL backend: library as $mode"
      d="$out/cpu-nccl/$mode"
      rm -rf "$d" && mkdir -p "$d"
      store="$tmp/store-$mode" && mkdir -p "$store"
      id=$(PITSTOP_CPU_NCCL_STORE_DIR=$store "$py" -c "
import ctypes, sys
buf = ctypes.create_string_buffer(128)
rc = ctypes.CDLL(sys.argv[1]).ncclGetUniqueId(buf)
sys.exit(rc) if rc else print(buf.raw.hex())
" "$cpu_nccl") || fail "ncclGetUniqueId of $cpu_nccl failed"
      if [[ $mode == profiler ]]; then
        load=(-u LD_PRELOAD "NCCL_PROFILER_PLUGIN=$lib")
      else
        load=(-u NCCL_PROFILER_PLUGIN "LD_PRELOAD=$lib")
      fi
      pids=()
      for r in 0 1; do
        timeout 120 env "${load[@]}" PITSTOP_CPU_NCCL_STORE_DIR="$store" \
          PITSTOP_STATS_FILE="$d/stats-%p.json" \
          PITSTOP_AGENT_SOCKET="$tmp/no-agent.sock" \
          "$rank_bin" collectives "$r" 2 "$id" > "$d/rank$r.log" 2>&1 &
        pids+=($!)
      done
      for p in "${pids[@]}"; do
        wait "$p" || fail "cpu_nccl_rank ($mode) failed: $(tail -5 "$d"/rank*.log)"
      done
      timeout 60 "$py" "$repo/tools/gpu_check/report.py" stats --mode "$mode" \
        --label "cpu-nccl/$mode" "$d" ||
        fail "the stats check over the CPU NCCL backend ($mode) failed"
    done
  else
    say "stats path over the CPU NCCL backend: skipped (no $rank_bin; build it" \
      "with: cmake --preset default && cmake --build build --target cpu_nccl_rank)"
  fi

  reason="no GPU visible to torch ($py: torch $torch_version, CUDA $cuda_version)"
  ((no_gpu)) && reason="--no-gpu given"
  {
    echo "# GPU check result"
    echo
    echo "not run: $reason. The library-alone build and the CPU self-checks"
    echo "passed ($(date -u +%FT%TZ), $(elapsed) s)."
  } > "$out/result.md"
  printf '{"passed": null, "not_run": "%s"}\n' "$reason" > "$out/result.json"
  say "NO GPU: $reason. Everything before the GPU part passed; exit 4."
  exit 4
fi

# --- 4. The GPU runs -----------------------------------------------------------
command -v nvidia-smi > /dev/null && nvidia-smi -L | sed 's/^/    /'
# The runs stay in $tmp and leave as one archive (the device tool brings
# back at most 8 files from $OUT), refreshed after every repetition so a run
# cut short still leaves what it measured.
runs="$tmp/runs"
rm -f "$out/runs.tar.gz" && mkdir -p "$runs"
pack() { tar -czf "$out/runs.tar.gz" -C "$tmp" runs; }
common=(-u PITSTOP_STATS_FILE NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,ENV"
  "PITSTOP_AGENT_SOCKET=$tmp/no-agent.sock")
# mode_env MODE DIR: sets `menv`, the environment of one way to run the job.
mode_env() {
  case "$1" in
    baseline) menv=(-u LD_PRELOAD -u NCCL_PROFILER_PLUGIN) ;;
    profiler) menv=(-u LD_PRELOAD "NCCL_PROFILER_PLUGIN=$lib"
      "PITSTOP_STATS_FILE=$2/stats-%p.json") ;;
    preload) menv=(-u NCCL_PROFILER_PLUGIN "LD_PRELOAD=$lib"
      "PITSTOP_STATS_FILE=$2/stats-%p.json") ;;
  esac
}
# A run may take at most 120 s and never past the budget: a job that hangs
# fails the check instead of the device tool's limit ending it.
run_limit() {
  local left=$((budget_s - $(elapsed)))
  echo $((left < 120 ? (left > 10 ? left : 10) : 120))
}
say "warm-up run (baseline, not counted)"
t0=$(date +%s)
run_job "$runs/warmup" "$(run_limit)" "${common[@]}" -u LD_PRELOAD \
  -u NCCL_PROFILER_PLUGIN -- --steps 50 --warmup 10 ||
  fail "the warm-up job failed: $(tail -20 "$runs/warmup/job.log")"
modes=(baseline profiler preload)
done_reps=0 rep_s=$((3 * ($(date +%s) - t0)))
for ((rep = 1; rep <= reps; rep++)); do
  left=$((budget_s - $(elapsed) - 20))
  if ((rep_s > left)); then
    say "time budget: stopping after $done_reps repetitions (next needs ~${rep_s}s, ${left}s left)"
    break
  fi
  t0=$(date +%s)
  for ((k = 0; k < 3; k++)); do # rotate: each way takes each slot in turn
    mode=${modes[$(((k + rep) % 3))]}
    d="$runs/rep$rep-$mode"
    mode_env "$mode" "$d"
    if run_job "$d" "$(run_limit)" "${common[@]}" "${menv[@]}" \
      -- --steps "$steps" --warmup "$warmup"; then
      say "rep $rep $mode: $(tail -1 "$d/job.log")"
    else
      say "rep $rep $mode: FAILED (exit $?): $(tail -3 "$d/job.log" | tr '\n' ' ')"
    fi
  done
  rep_s=$(($(date +%s) - t0))
  done_reps=$rep
  pack
done
((done_reps >= 3)) || say "WARNING: only $done_reps repetitions: the overhead spread is not meaningful"

say "report"
timeout 120 "$py" "$repo/tools/gpu_check/report.py" final --runs "$runs" \
  --out "$out" --target-pct 0.3 \
  --command "tools/gpu-check.sh --reps $reps --steps $steps --warmup $warmup"
rc=$?
pack
say "done in $(elapsed) s; results in $out (result.md, result.json, runs.tar.gz)"
((rc == 0)) || fail "see $out/result.md"
exit 0
