#!/usr/bin/python3
"""Slurm integration against a real Slurm (Debian's slurmctld, slurmd, munge).

Starts munged, slurmctld and one slurmd (as Slurm node "node1") on
localhost in a temporary directory with their own slurm.conf, then:
  1. srun through deploy/slurm/pitstop-task-prolog.sh: the task gets
     PITSTOP_JOB_ID = SLURM_JOB_ID and NCCL_PROFILER_PLUGIN;
  2. `pitstop sim --scenario ci-straggler` (GPU 1 of node1 slow) with a
     controller whose policy is ACT and slurm.enabled: the Slurm node node1
     is DRAINed with "pitstop <fault id>: ..." as reason, node0 is not;
  3. `pitstopctl resolve <fault id>`: node1 is resumed; the actions journal
     has both scontrol calls with exit 0.
Exit 77 (skipped) with the reason when Slurm is not installed or not root.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, timeout_s, log=None):
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.5)
    msg = f"timed out after {timeout_s} s waiting for {what}"
    if log:
        msg += "\n" + log()
    raise AssertionError(msg)


class Slurm:
    def __init__(self, root, prolog):
        self.root = root
        self.procs = []
        self.conf = os.path.join(root, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        os.makedirs(os.path.join(root, "state"))
        os.makedirs(os.path.join(root, "spool"))
        os.chmod(root, 0o711)  # munged wants its socket directory reachable
        ctld_port, slurmd_port = free_port(), free_port()
        host = socket.gethostname().split(".")[0]
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=pitstoptest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
TaskProlog={prolog}
# node0 has no slurmd (TEST-NET address): it only shows that pitstop drains
# the suspect's node and no other.
NodeName=node0 NodeAddr=192.0.2.1 CPUs=1 RealMemory=100 State=UNKNOWN
NodeName=node1 NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=debug Nodes=node0,node1 Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, argv, name):
        out = open(os.path.join(self.root, name + ".out"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                             env=self.env, start_new_session=True)
        self.procs.append((name, p))
        return p

    def up(self):
        r = self.root
        subprocess.run(["mungekey", "--create", f"--keyfile={r}/munge.key"],
                       check=True)
        self.start(["munged", "-F", "-f", f"--socket={r}/munge.sock",
                    f"--key-file={r}/munge.key", f"--pid-file={r}/munged.pid",
                    f"--log-file={r}/munged.log", f"--seed-file={r}/munged.seed"],
                   "munged")
        wait_for("munged socket", lambda: os.path.exists(f"{r}/munge.sock"), 20,
                 self.logs)
        self.start(["slurmctld", "-D", "-f", self.conf], "slurmctld")
        self.start(["slurmd", "-D", "-f", self.conf, "-N", "node1"], "slurmd")
        wait_for("node1 IDLE", lambda: "State=IDLE " in self.node("node1") and
                 "DRAIN" not in self.node("node1"), 60, self.logs)

    def scontrol(self, *args):
        r = subprocess.run(["scontrol", *args], capture_output=True, text=True,
                           env=self.env, timeout=30)
        return r.stdout + r.stderr

    def node(self, name):
        return self.scontrol("show", "node", "--oneliner", name)

    def logs(self):
        text = ""
        for name in ["slurmctld.log", "slurmd.log", "slurmctld.out",
                     "slurmd.out", "munged.out"]:
            path = os.path.join(self.root, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text += f"--- {name}\n" + f.read()[-3000:]
        return text

    def down(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def field(line, key):
    m = re.search(rf"\b{key}=(\S+)", line)
    return m.group(1) if m else ""


def reason(line):
    i = line.find(" Reason=")
    return line[i + 8:].strip() if i >= 0 else ""


def main():
    src = os.environ.get("PITSTOP_SOURCE_DIR") or os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    build = os.environ.get("PITSTOP_BINARY_DIR") or os.path.join(src, "build")
    missing = [p for p in ["slurmctld", "slurmd", "scontrol", "srun", "munged",
                           "mungekey"] if shutil.which(p) is None]
    if missing:
        skip("Slurm is not installed (missing " + ", ".join(missing) +
             "; tools/install-deps.sh installs slurmctld slurmd slurm-client munge)")
    if os.geteuid() != 0:
        skip("starting slurmctld/slurmd needs root")
    pitstop = os.path.join(build, "tools/pitstop/pitstop")
    ctl = os.path.join(build, "tools/pitstopctl/pitstopctl")
    plugin = os.path.join(build, "plugin/libnccl-profiler-pitstop.so")
    for p in [pitstop, ctl, plugin]:
        assert os.path.exists(p), f"{p} not built"
    prolog = os.path.join(src, "deploy/slurm/pitstop-task-prolog.sh")

    root = tempfile.mkdtemp(prefix="pitstop-slurm-")
    slurm = Slurm(root, prolog)
    sim = None
    try:
        slurm.up()
        print("slurm up: node1 IDLE", flush=True)

        # 1. The TaskProlog sets the library and the job id for the task.
        env = dict(slurm.env, PITSTOP_PROFILER_LIB=plugin)
        env.pop("NCCL_PROFILER_PLUGIN", None)
        r = subprocess.run(["srun", "-N1", "-w", "node1", "--time=1", "env"],
                           capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr + slurm.logs()
        task_env = dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)
        assert task_env.get("PITSTOP_JOB_ID") == task_env.get("SLURM_JOB_ID") != None, task_env
        assert task_env.get("NCCL_PROFILER_PLUGIN") == plugin, task_env
        print(f"TaskProlog: job {task_env['SLURM_JOB_ID']} got PITSTOP_JOB_ID="
              f"{task_env['PITSTOP_JOB_ID']} NCCL_PROFILER_PLUGIN={plugin}",
              flush=True)

        # 2. A confirmed GPU straggler on node1 drains Slurm node node1.
        work = os.path.join(root, "sim")
        cfg = os.path.join(root, "controller.yaml")
        with open(cfg, "w") as f:
            f.write("detection:\n  mode: act\nslurm:\n  enabled: true\n"
                    "  timeout_ms: 20000\n")
        sim_out = open(os.path.join(root, "sim.out"), "w")
        sim = subprocess.Popen(
            [pitstop, "sim", "--scenario", "ci-straggler", "--controller-config",
             cfg, "--keep-running", "--timeline", "", "--work-dir", work],
            stdout=sim_out, stderr=subprocess.STDOUT, env=slurm.env,
            start_new_session=True)

        def sim_log():
            with open(os.path.join(root, "sim.out"), errors="replace") as f:
                return "--- sim\n" + f.read()[-4000:] + slurm.logs()

        def controller_addr():
            assert sim.poll() is None, "pitstop sim exited\n" + sim_log()
            with open(os.path.join(root, "sim.out"), errors="replace") as f:
                m = re.search(r"controller at (\S+),", f.read())
            return m.group(1) if m else None

        addr = wait_for("pitstop sim's controller", controller_addr, 120, sim_log)
        line = wait_for("node1 drained by pitstop",
                        lambda: (lambda n: n if "DRAIN" in field(n, "State") and
                                 reason(n).startswith("pitstop F") else None)(
                                     slurm.node("node1")), 180, sim_log)
        fault_id = re.match(r"pitstop (F\d+):", reason(line)).group(1)
        print(f"node1 {field(line, 'State')} Reason={reason(line)}", flush=True)
        assert "NON_COMM_SLOW" in reason(line), line
        assert "pitstop" not in reason(slurm.node("node0")), slurm.node("node0")

        out = subprocess.run([ctl, "--controller", addr, "-o", "json", "fault",
                              "show", fault_id], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stdout + out.stderr
        fault = json.loads(out.stdout)
        assert fault["state"] in ("FAULT_STATE_CONFIRMED",
                                  "FAULT_STATE_ACKNOWLEDGED"), fault
        assert any(s["host"] == "node1" for s in fault["suspects"]), fault

        # 3. Resolving the fault resumes the node.
        out = subprocess.run([ctl, "--controller", addr, "resolve", fault_id,
                              "--who", "slurm-test", "--note", "GPU replaced"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stdout + out.stderr
        # Slurm flags a resumed node NOT_RESPONDING until its next ping.
        line = wait_for("node1 resumed (IDLE)",
                        lambda: (lambda n: n if field(n, "State") == "IDLE"
                                 else None)(slurm.node("node1")), 60, sim_log)
        print(f"after resolve: node1 State={field(line, 'State')}", flush=True)

        journal = os.path.join(work, "actions.jsonl")
        with open(journal) as f:
            records = [json.loads(l) for l in f if l.strip()]
        mine = [(r["action"], r["target"], r["result"], r["exit_code"])
                for r in records if r["fault_id"] == fault_id]
        assert ("slurm_drain", "node1", "ok", 0) in mine, records
        assert ("slurm_resume", "node1", "ok", 0) in mine, records
        print(f"journal {journal}: {mine}", flush=True)
        print("PASS", flush=True)
    finally:
        if sim is not None and sim.poll() is None:
            os.killpg(sim.pid, signal.SIGINT)
            try:
                sim.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(sim.pid, signal.SIGKILL)
                sim.wait()
        slurm.down()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
