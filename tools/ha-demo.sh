#!/usr/bin/env bash
# tools/ha-demo.sh: several controllers on etcd under `kill -9` of the
# leader (docs/ha.md, numbers in docs/reliability.md).
#
# Starts, all on loopback in a temporary directory with free ports:
#   - three etcd members (one cluster),
#   - two pitstop-controllers on that etcd (--ha-etcd-endpoints),
#   - four pitstop-agents given both controllers (--controller a,b),
#   - 16 emulated ranks (pitstop-sim-rank through the real profiler plugin,
#     the "straggler" scenario of `pitstop sim`: rank 6 slows down at 8 s).
# Waits for the straggler fault, acknowledges it (through whichever
# controller leads), then kills the leader with SIGKILL N times (restarting
# it as a follower each time) and prints per kill: the time until the other
# controller leads, until every agent streams to it, faults/acknowledgements
# lost, and in the end actions taken twice (the on_confirmed hook's log) and
# fenced writes refused (controller logs). Then deposes a live leader:
# revokes its lease in etcd while two clients write through it, and shows
# its writes refused by etcd (fenced_writes_refused), its step-down and
# nothing lost; a `pitstopctl faults --watch` through it sees its stream end
# naming the new leader and watches there.
#
# Usage: tools/ha-demo.sh [--kills N] [--build DIR] [--lease-ttl-s S] [--keep]
#                         [--no-time-targets]
# Exit: 0 every target met (new leader <= 3 s, agents <= 5 s, nothing lost,
# nothing done twice, a live deposed leader fenced and stepped down, the
# watch re-followed the leader), 1 a
# target missed, 2 usage or start-up failure,
# 77 skipped (no etcd binary; Debian: etcd-server, tools/install-deps.sh).
# --no-time-targets: the times are printed but do not decide the exit status
# (ctest's run: the machine may be shared; the timed run is this script).
set -euo pipefail
cd "$(dirname "$0")/.."

KILLS=20
BUILD=build
TTL=2
KEEP=0
export HA_TIME_TARGETS=1
while (($#)); do
  case $1 in
    --kills) KILLS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --lease-ttl-s) TTL=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --no-time-targets) HA_TIME_TARGETS=0; shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ha-demo: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $KILLS =~ ^[0-9]+$ ]] || { echo "ha-demo: --kills: expected a number, got '$KILLS'" >&2; exit 2; }

ETCD=${PITSTOP_ETCD:-$(command -v etcd || true)}
if [[ -z $ETCD ]]; then
  echo "ha-demo: SKIPPED: no etcd binary (Debian: apt-get install etcd-server, or tools/install-deps.sh; or set PITSTOP_ETCD)"
  exit 77
fi
CTL_BIN=$BUILD/tools/pitstopctl/pitstopctl
CONTROLLER=$BUILD/src/controller/pitstop-controller
AGENT=$BUILD/src/agent/pitstop-agent
RANK=$BUILD/src/sim/pitstop-sim-rank
PITSTOP=$BUILD/tools/pitstop/pitstop
PLUGIN=$BUILD/plugin/libnccl-profiler-pitstop.so
for b in "$CTL_BIN" "$CONTROLLER" "$AGENT" "$RANK" "$PITSTOP" "$PLUGIN"; do
  [[ -e $b ]] || { echo "ha-demo: $b missing: build first (cmake --build --preset default)" >&2; exit 2; }
done
PY=/usr/bin/python3

WORK=$(mktemp -d /tmp/pitstop-ha-XXXXXX)
touch "$WORK/actions.log"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if ((KEEP)); then echo "ha-demo: logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
# Faults of snapshot $1 missing from snapshot $2, or acknowledged there and
# no longer: what a failover lost.
count_lost() {
  $PY - "$1" "$2" <<'EOF'
import sys
def parse(text):
    return dict(line.split() for line in text.splitlines() if line.strip())
before, after = parse(sys.argv[1]), parse(sys.argv[2])
kept = ("FAULT_STATE_ACKNOWLEDGED", "FAULT_STATE_MITIGATING", "FAULT_STATE_RESOLVED")
lost = [f for f in before if f not in after]
lost += [f for f, st in before.items()
         if f in after and st in kept and after[f] not in kept]
print(len(lost))
EOF
}

now_ms() { date +%s%3N; }
die() { echo "ha-demo: $*" >&2; exit 2; }

# Free loopback ports: 3 etcd x (client, peer) + 2 controllers.
read -r -a PORTS <<<"$($PY - <<'EOF'
import socket
socks = []
for _ in range(8):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)"

# --- etcd: three members --------------------------------------------------
CLUSTER=""
for i in 0 1 2; do
  CLUSTER+="${CLUSTER:+,}e$i=http://127.0.0.1:${PORTS[$((2 * i + 1))]}"
done
ENDPOINTS=""
for i in 0 1 2; do
  c=${PORTS[$((2 * i))]}
  p=${PORTS[$((2 * i + 1))]}
  ENDPOINTS+="${ENDPOINTS:+,}127.0.0.1:$c"
  "$ETCD" --name "e$i" --data-dir "$WORK/etcd$i" \
    --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
    --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new \
    --initial-cluster-token pitstop-ha-demo >"$WORK/etcd$i.log" 2>&1 &
  PIDS+=($!)
done
for _ in $(seq 300); do
  ETCDCTL_API=3 etcdctl --endpoints="$ENDPOINTS" --command-timeout=1s endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
ETCDCTL_API=3 etcdctl --endpoints="$ENDPOINTS" --command-timeout=2s endpoint health >/dev/null 2>&1 ||
  die "etcd cluster not healthy; see $WORK/etcd*.log"
echo "[ha] etcd: 3 members at $ENDPOINTS"

# --- two controllers --------------------------------------------------------
CADDR=("127.0.0.1:${PORTS[6]}" "127.0.0.1:${PORTS[7]}")
CPID=(0 0)
CONTROLLERS="${CADDR[0]},${CADDR[1]}"
start_controller() {
  local i=$1
  rm -f "$WORK/c$i.port"
  "$CONTROLLER" --listen "${CADDR[$i]}" --port-file "$WORK/c$i.port" \
    --db "$WORK/c$i.db" --metrics-address "" --log-level info \
    --ha-etcd-endpoints "$ENDPOINTS" --ha-etcd-prefix /pitstop-ha-demo/ \
    --ha-lease-ttl-s "$TTL" --detection-mode act \
    --actions-on-confirmed "echo \"\$PITSTOP_FAULT_ID c$i\" >> $WORK/actions.log" \
    >>"$WORK/c$i.log" 2>&1 &
  CPID[$i]=$!
  PIDS+=($!)
  for _ in $(seq 300); do [[ -s $WORK/c$i.port ]] && return 0; sleep 0.05; done
  die "controller c$i did not start; see $WORK/c$i.log"
}
start_controller 0
start_controller 1
ctl() { "$CTL_BIN" --timeout-s 2 "$@"; }
# role_of I -> LEADER / FOLLOWER / DOWN, plus nodes_ready as "ROLE READY".
role_of() {
  ctl --controller "${CADDR[$1]}" -o json status 2>/dev/null | $PY -c '
import json, sys
s = json.load(sys.stdin)
print(s.get("role", "?").replace("CONTROLLER_ROLE_", ""), s.get("nodes_ready", 0))
' 2>/dev/null || echo "DOWN 0"
}
leader_index() {
  for i in 0 1; do [[ $(role_of "$i") == LEADER* ]] && { echo "$i"; return; }; done
  echo -1
}
for _ in $(seq 200); do [[ $(leader_index) != -1 ]] && break; sleep 0.05; done
[[ $(leader_index) != -1 ]] || die "no controller became leader; see $WORK/c*.log"
echo "[ha] controllers: ${CADDR[0]} (c0), ${CADDR[1]} (c1); leader c$(leader_index)"

# --- agents and 16 emulated ranks -------------------------------------------
NODES=4
DURATION=$((40 + KILLS * 12))
"$PITSTOP" sim --scenario straggler --duration-s "$DURATION" --print >"$WORK/scenario.yaml" ||
  die "pitstop sim --print failed"
for n in $(seq 0 $((NODES - 1))); do
  "$AGENT" --ingest-socket "$WORK/node$n.sock" --ingest-shm-socket "$WORK/node$n.shm" \
    --controller "$CONTROLLERS" --host "node$n" --batch-ms 200 --metrics-address "" \
    --log-level info >"$WORK/agent$n.log" 2>&1 &
  PIDS+=($!)
done
for n in $(seq 0 $((NODES - 1))); do
  for _ in $(seq 200); do [[ -S $WORK/node$n.shm ]] && break; sleep 0.05; done
  [[ -S $WORK/node$n.shm ]] || die "agent node$n did not start; see $WORK/agent$n.log"
done
START_NS=$($PY -c 'import time; print(time.monotonic_ns() + 3_000_000_000)')
for r in $(seq 0 15); do
  PITSTOP_AGENT_SOCKET="$WORK/node$((r / 4)).shm" PITSTOP_HOST="node$((r / 4))" \
    PITSTOP_JOB_ID=straggler RANK=$r LOCAL_RANK=$((r % 4)) WORLD_SIZE=16 \
    "$RANK" --scenario "$WORK/scenario.yaml" --rank "$r" --start-ns "$START_NS" \
    --plugin "$PLUGIN" >"$WORK/rank$r.log" 2>&1 &
  PIDS+=($!)
done
echo "[ha] 4 agents, 16 ranks streaming (straggler scenario, ${DURATION} s)"

# --- the fault, acknowledged --------------------------------------------------
FAULT=""
for _ in $(seq 600); do
  FAULT=$(ctl --controller "$CONTROLLERS" -o json faults 2>/dev/null | $PY -c '
import json, sys
f = json.load(sys.stdin).get("faults", [])
print(f[-1]["fault_id"] if f else "")' 2>/dev/null || true)
  [[ -n $FAULT ]] && break
  sleep 0.1
done
[[ -n $FAULT ]] || die "no fault detected within 60 s; see $WORK/c*.log"
ctl --controller "$CONTROLLERS" ack "$FAULT" --who ha-demo --note "failover test" >/dev/null ||
  die "acknowledging $FAULT failed"
echo "[ha] fault $FAULT detected and acknowledged"
# The on_confirmed hook has run once for a confirmed fault: the action a
# failover must not repeat.
for _ in $(seq 600); do [[ -s $WORK/actions.log ]] && break; sleep 0.1; done
[[ -s $WORK/actions.log ]] || die "no fault confirmed within 60 s; see $WORK/c*.log"
echo "[ha] on_confirmed hook ran for: $(awk '{print $1}' "$WORK/actions.log" | sort -u | tr '\n' ' ')"

# faults as "ID STATE" lines, from whichever controller leads.
snapshot() {
  ctl --controller "$CONTROLLERS" -o json faults --all 2>/dev/null | $PY -c '
import json, sys
for f in json.load(sys.stdin).get("faults", []):
    print(f["fault_id"], f.get("state", "?"))' | sort
}

# --- kill the leader, repeatedly --------------------------------------------
LEAD_MS=()
AGENTS_MS=()
LOST=0
for k in $(seq 1 "$KILLS"); do
  old=$(leader_index)
  [[ $old != -1 ]] || die "kill $k: no leader before the kill"
  new=$((1 - old))
  before=$(snapshot)
  t0=$(now_ms)
  kill -9 "${CPID[$old]}"
  wait "${CPID[$old]}" 2>/dev/null || true
  t_lead=0
  t_agents=0
  while (($(now_ms) - t0 < 30000)); do
    read -r role ready < <(role_of "$new")
    if [[ $role == LEADER ]]; then
      ((t_lead)) || t_lead=$(($(now_ms) - t0))
      if [[ $ready == "$NODES" ]]; then t_agents=$(($(now_ms) - t0)); break; fi
    fi
    sleep 0.05
  done
  ((t_lead && t_agents)) || die "kill $k: c$new did not take over within 30 s; see $WORK/c$new.log"
  after=$(snapshot)
  # Lost: a fault missing, or an acknowledgement undone.
  lost=$(count_lost "$before" "$after")
  LOST=$((LOST + lost))
  LEAD_MS+=("$t_lead")
  AGENTS_MS+=("$t_agents")
  printf '[ha] kill %2d: c%d killed; c%d leads after %5d ms, all %d agents stream to it after %5d ms; lost %d\n' \
    "$k" "$old" "$new" "$t_lead" "$NODES" "$t_agents" "$lost"
  start_controller "$old"
done

# --- depose a live leader: its in-flight writes are fenced ---------------------
# kill -9 shows a dead leader replaced; fencing is about a leader that is
# still running but no longer holds the lease (a pause, a partition, an
# operator revoking it). The leader's lease is revoked in etcd while two
# clients keep writing policies through it: it learns of the loss at its
# next keepalive (every ttl/3), so writes it sends before then carry the
# dead lease, which etcd refuses (fenced_writes_refused). It must step
# down, the other controller must lead, nothing may be lost. The first
# write is racing the keepalive; up to 5 tries.
status_field() {  # status_field I FIELD -> value from c$I's status (0 if absent)
  ctl --controller "${CADDR[$1]}" -o json status 2>/dev/null |
    $PY -c 'import json, sys; print(json.load(sys.stdin).get(sys.argv[1], 0))' "$2" 2>/dev/null || echo 0
}
FENCE_TRIES=0
FENCE_REFUSED=0
FENCE_LOST=0
FENCE_STEPPED_DOWN=0
WATCH_REFOLLOWED=0
while ((FENCE_TRIES < 5 && FENCE_REFUSED == 0)); do
  FENCE_TRIES=$((FENCE_TRIES + 1))
  old=$(leader_index)
  [[ $old != -1 ]] || die "fence: no leader"
  new=$((1 - old))
  before=$(snapshot)
  refused0=$(status_field "$old" fenced_writes_refused)
  downs0=$(grep -c "stepped down" "$WORK/c$old.log" || true)
  writers=()
  for w in 1 2; do
    (while :; do
      "$CTL_BIN" --timeout-s 2 --controller "${CADDR[$old]}" policy set "fence-demo-$w" \
        --mode observe >/dev/null 2>&1 || true
    done) &
    writers+=($!)
  done
  # An operator's watch through the leader (both addresses, the leader
  # first): when it steps down the stream must end naming the new leader
  # and pitstopctl must watch there (docs/ha.md).
  "$CTL_BIN" --controller "${CADDR[$old]},${CADDR[$new]}" faults --watch \
    >"$WORK/watch.out" 2>"$WORK/watch.err" &
  watcher=$!
  PIDS+=("$watcher")
  sleep 0.5
  lease=$(ETCDCTL_API=3 etcdctl --endpoints="$ENDPOINTS" get /pitstop-ha-demo/leader -w json |
    $PY -c 'import json, sys; k = json.load(sys.stdin).get("kvs", []); print("%x" % k[0]["lease"] if k else "")')
  [[ -n $lease ]] || die "fence: no leader key in etcd"
  t0=$(now_ms)
  ETCDCTL_API=3 etcdctl --endpoints="$ENDPOINTS" lease revoke "$lease" >/dev/null ||
    die "fence: revoking lease $lease failed"
  # Deposed: c$old logs its step-down; then a leader (normally c$new; c$old
  # may win the new election too) with every agent.
  t_down=0
  t_lead=0
  leader=-1
  while (($(now_ms) - t0 < 30000)); do
    if ((!t_down)) && (($(grep -c "stepped down" "$WORK/c$old.log" || true) > downs0)); then
      t_down=$(($(now_ms) - t0))
    fi
    if ((t_down)); then
      leader=$(leader_index)
      if [[ $leader != -1 ]]; then
        read -r _ ready < <(role_of "$leader")
        if [[ $ready == "$NODES" ]]; then t_lead=$(($(now_ms) - t0)); break; fi
      fi
    fi
    sleep 0.05
  done
  for w in "${writers[@]}"; do kill "$w" 2>/dev/null || true; wait "$w" 2>/dev/null || true; done
  # The watch re-followed: its stream on c$old ended UNAVAILABLE and it
  # watches again at the leader, still running (up to 10 s more).
  for _ in $(seq 200); do
    grep -q "watching at" "$WORK/watch.err" && break
    sleep 0.05
  done
  if grep -q "watching at" "$WORK/watch.err" && kill -0 "$watcher" 2>/dev/null; then
    WATCH_REFOLLOWED=1
  fi
  kill "$watcher" 2>/dev/null || true
  wait "$watcher" 2>/dev/null || true
  ((t_down)) || die "fence: c$old did not step down within 30 s; see $WORK/c$old.log"
  ((t_lead)) || die "fence: no leader with all agents within 30 s; see $WORK/c*.log"
  FENCE_STEPPED_DOWN=1
  old_role="stepped down after ${t_down} ms"
  refused=$(( $(status_field "$old" fenced_writes_refused) - refused0 ))
  FENCE_REFUSED=$refused
  after=$(snapshot)
  FENCE_LOST=$(count_lost "$before" "$after")
  LOST=$((LOST + FENCE_LOST))
  printf '[ha] fence try %d: lease %s of c%d revoked under write load; c%d %s; its writes refused by etcd: %d; c%d leads with all agents after %d ms; lost %d\n' \
    "$FENCE_TRIES" "$lease" "$old" "$old" "$old_role" "$refused" "$leader" "$t_lead" "$FENCE_LOST"
  printf '[ha] pitstopctl faults --watch on c%d: %s\n' "$old" \
    "$( ((WATCH_REFOLLOWED)) && grep -m1 "watching at" "$WORK/watch.err" || echo "DID NOT re-follow the leader")"
done

# --- summary -------------------------------------------------------------------
DUPES=$(awk '{print $1}' "$WORK/actions.log" 2>/dev/null | sort | uniq -d | wc -l)
HOOKS=$(wc -l <"$WORK/actions.log" 2>/dev/null || echo 0)
FENCED=$(cat "$WORK"/c*.log | grep -c "fenced write refused" || true)
OPENED=$(snapshot | wc -l)
$PY - "$KILLS" "$LOST" "$DUPES" "$HOOKS" "$FENCED" "$OPENED" "${LEAD_MS[*]:-}" "${AGENTS_MS[*]:-}" \
  "$FENCE_REFUSED" "$FENCE_STEPPED_DOWN" "$FENCE_TRIES" "$WATCH_REFOLLOWED" <<'EOF'
import sys
kills, lost, dupes, hooks, fenced, opened = map(int, sys.argv[1:7])
lead = [int(x) for x in sys.argv[7].split()]
agents = [int(x) for x in sys.argv[8].split()]
fence_refused, fence_down, fence_tries, watch_refollowed = map(int, sys.argv[9:13])
def stats(v):
    if not v: return "-"
    v = sorted(v)
    return "median %d ms, max %d ms" % (v[len(v) // 2], v[-1])
print("[ha] summary over %d kill -9 of the leader:" % kills)
print("  new leader elected:             %s (target <= 3000 ms)" % stats(lead))
print("  every agent streaming to it:    %s (target <= 5000 ms)" % stats(agents))
print("  faults/acknowledgements lost:   %d" % lost)
print("  actions taken twice:            %d (on_confirmed hook ran %d times; faults recorded %d)" % (dupes, hooks, opened))
print("  fenced writes refused:          %d (writes of a deposed leader etcd refused)" % fenced)
print("  live leader deposed (lease revoked under writes): %d of its writes refused by etcd, %s (%d tries)"
      % (fence_refused, "stepped down" if fence_down else "DID NOT step down", fence_tries))
print("  its faults --watch:             %s" % ("ended naming the leader and re-followed it"
      if watch_refollowed else "DID NOT re-follow the leader"))
import os
timing = os.environ.get("HA_TIME_TARGETS", "1") == "1"
ok = (lead and (not timing or (max(lead) <= 3000 and max(agents) <= 5000))
      and lost == 0 and dupes == 0 and fence_refused > 0 and fence_down
      and watch_refollowed)
if not timing:
    print("[ha] times printed only (--no-time-targets)")
print("[ha] targets " + ("met" if ok else "MISSED"))
sys.exit(0 if ok else 1)
EOF
