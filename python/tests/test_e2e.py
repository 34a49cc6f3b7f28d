"""End to end: 2 gloo ranks (one slow) -> real pitstop-agent -> real
pitstop-controller with the AUTO sync policy -> directive -> both ranks
switch to A-EDiT at the same step. Needs the built daemons
($PITSTOP_BUILD_DIR, default <repo>/build)."""

import json
import os
import subprocess
import time

import pytest

from test_edit_dist import spawn

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("PITSTOP_BUILD_DIR", os.path.join(REPO, "build"))
CONTROLLER = os.path.join(BUILD, "src/controller/pitstop-controller")
AGENT = os.path.join(BUILD, "src/agent/pitstop-agent")
CTL = os.path.join(BUILD, "tools/pitstopctl/pitstopctl")


@pytest.fixture
def daemons(tmp_path):
    for b in (CONTROLLER, AGENT, CTL):
        assert os.path.exists(b), "%s not built" % b
    log = open(tmp_path / "daemons.log", "w")
    port_file = tmp_path / "port"
    procs = [subprocess.Popen(
        [CONTROLLER, "--listen", "127.0.0.1:0", "--port-file", str(port_file),
         "--db", str(tmp_path / "c.db"), "--metrics-address", "",
         "--detection-cycle-ms", "200"], stdout=log, stderr=log)]
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert time.monotonic() < deadline and procs[0].poll() is None
            time.sleep(0.05)
        addr = "127.0.0.1:" + port_file.read_text().strip()
        sock = str(tmp_path / "agent.sock")
        procs.append(subprocess.Popen(
            [AGENT, "--ingest-socket", sock, "--controller", addr,
             "--metrics-address", "", "--batch-ms", "200", "--host", "e2e-node"],
            stdout=log, stderr=log))
        while not os.path.exists(sock):
            assert time.monotonic() < deadline and procs[1].poll() is None
            time.sleep(0.05)
        yield addr, sock, tmp_path / "daemons.log"
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(10)
        log.close()


def ctl(addr, *argv):
    r = subprocess.run([CTL, "--controller", addr, "-o", "json"] + list(argv),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_slow_rank_switches_job_to_timed_local_sgd(daemons, tmp_path):
    addr, sock, log = daemons
    ctl(addr, "sync-policy", "e2e-job", "auto", "--slow-persist-s", "1",
        "--healthy-s", "600", "--local-mode", "timed", "--period-ms", "300",
        "--apply-lead-steps", "2")
    res, logs = spawn(tmp_path, 2, "e2e",
                      {"job": "e2e-job", "socket": sock, "seconds": 40,
                       "slow_rank": 1, "slow_s": 0.03}, timeout=90)
    for r in res:
        assert r["connected"] and r["sent"] > 0
        assert r["mode"] == "timed", (r, logs[0], open(log).read()[-3000:])
        assert len(r["switches"]) == 1
        assert r["consistent"]
    assert res[0]["switches"] == res[1]["switches"]
    assert res[0]["checksum"] == res[1]["checksum"]
    assert "switched sync -> timed" in logs[0]
    job = ctl(addr, "job", "e2e-job")["job"]
    sync = job["sync"]
    assert sync["step_stragglers"] == [1], sync
    sent = [d for d in sync["decisions"] if d.get("sent")]
    assert len(sent) == 1 and sent[0]["to_mode"] == "SYNC_MODE_TIMED"
    assert "rank 1 computes" in sent[0]["evidence"]["text"]
    assert sync["reported_mode"] == "SYNC_MODE_TIMED"
    # The switch happened at or after the directive's apply_at_step.
    assert res[0]["switches"][0][0] >= int(sent[0]["apply_at_step"])
