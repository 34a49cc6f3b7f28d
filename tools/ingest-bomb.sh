#!/usr/bin/env bash
# Issue #33 F7: a real pitstop-agent under the ingest parse bombs
# (tests/hardening/ingest_bomb_main.cc), with no controller; prints the
# agent's peak RSS (VmHWM) and RSS afterwards for each attack, and what
# another job's ring lost meanwhile. docs/reliability.md, "Bounded parsing".
#
#   tools/ingest-bomb.sh [BUILD_DIR]
#   PITSTOP_AGENT=/path/to/other/pitstop-agent tools/ingest-bomb.sh  (before)
set -euo pipefail
build=${1:-build}
agent_bin=${PITSTOP_AGENT:-$build/src/agent/pitstop-agent}
dir=$(mktemp -d)
trap 'kill $agent 2>/dev/null || true; rm -rf "$dir"' EXIT

rss() { awk -v k="$2" '$1==k":" {print int($2/1024) " MiB"}' "/proc/$1/status"; }

start_agent() {
  "$agent_bin" --ingest-socket "$dir/a.sock" \
    --ingest-shm-socket "$dir/s.sock" --controller "" \
    --metrics-address "" --log-level warn >"$dir/agent.log" 2>&1 &
  agent=$!
  for _ in $(seq 100); do [[ -S $dir/s.sock ]] && return; sleep 0.1; done
  echo "agent did not start" >&2; cat "$dir/agent.log" >&2; exit 1
}

run() {
  local what=$1; shift
  start_agent
  echo "== $what (agent at start: $(rss $agent VmRSS))"
  "$build/tests/hardening/pitstop_ingest_bomb" "$@" | sort | uniq -c
  echo "agent peak $(rss $agent VmHWM), after $(rss $agent VmRSS)"
  kill $agent; wait $agent 2>/dev/null || true
  rm -f "$dir"/*.sock "$dir"/*.lock
}

run "gRPC: 1 stream, 4 MB of empty records" grpc "$dir/a.sock" 1
run "gRPC: 4 streams at once" grpc "$dir/a.sock" 4
run "shm: one 15 MB message of empty records" shm "$dir/s.sock" 12 big
run "shm: 16 MiB ring of 30,000-record messages" shm "$dir/s.sock" 12 batches
