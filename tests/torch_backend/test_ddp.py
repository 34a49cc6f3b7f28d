"""DDP training launched by torchrun (Debian's 1.13 needs --redirects 2
--tee 2, docs/pytorch.md) on pitstop_nccl, against the same run on gloo,
and again with the pitstop library LD_PRELOADed and no agent.

Expected: bit-identical parameters and losses on every rank. Both backends
reduce with gloo's ring in the same rank order (the CPU NCCL backend is
gloo's ring underneath) and DDP divides by the world size the same way, so
there is no reduction-order difference to tolerate; the collectives test
shows the same bit-identity for every float dtype gloo has.
"""

import json
import os
import signal
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "ddp_worker.py")
RANKS = 3
# The entry points the interposer wraps (plugin/pitstop_plugin.map); the
# others are not interposed and reach libnccl.so.2 directly.
INTERPOSED = {"ncclCommInitRank", "ncclCommDestroy", "ncclCommAbort",
              "ncclGroupStart", "ncclGroupEnd", "ncclAllReduce",
              "ncclBroadcast", "ncclReduce", "ncclAllGather",
              "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclGetLastError"}


def torchrun(backend, out, env=None):
    os.makedirs(out)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc_per_node", str(RANKS), "--rdzv_backend", "c10d",
           "--rdzv_endpoint", "127.0.0.1:0", "--redirects", "2", "--tee", "2",
           "--log_dir", os.path.join(out, "logs"), WORKER,
           "--backend", backend, "--out", out]
    e = dict(os.environ, PITSTOP_CPU_NCCL_STORE_DIR=out)
    e.update(env or {})
    # Its own session, so that a hang can be shown and ended as a whole.
    p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        log, _ = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        tree = subprocess.run(["ps", "-s", str(p.pid), "-o",
                               "pid,ppid,stat,etime,wchan:20,cmd"],
                              capture_output=True, text=True).stdout
        os.killpg(p.pid, signal.SIGKILL)
        log, _ = p.communicate()
        raise AssertionError("torchrun %s still running after 300 s; its "
                             "processes:\n%s\noutput:\n%s" % (
                                 backend, tree, log[-8000:]))
    assert p.returncode == 0, "torchrun %s exit %d:\n%s" % (
        backend, p.returncode, log[-8000:])
    return [torch.load(os.path.join(out, "%s.%d.pt" % (backend, rank)))
            for rank in range(RANKS)]


def assert_same(ours, ref, what, params_only=False):
    for key in ("a", "b"):
        for name, t in ref[key].items():
            if params_only and name.startswith("bn.running"):
                continue  # buffers: rank 0's at each forward, then local
            assert torch.equal(ours[key][name], t), (
                "%s: %s.%s differs: max |diff| %g" % (
                    what, key, name, (ours[key][name] - t).abs().max()))
    if not params_only:  # each rank has its own data, hence its loss
        assert ours["losses_a"] == ref["losses_a"], what
        assert ours["losses_b"] == ref["losses_b"], what


def bindings(out, rank):
    with open(os.path.join(out, "bindings.%d.json" % rank)) as f:
        return json.load(f)


def test_ddp_matches_gloo_and_runs_with_the_library_preloaded(tmp_path):
    gloo = torchrun("gloo", str(tmp_path / "gloo"))
    for rank in range(1, RANKS):  # DDP keeps replicas equal
        assert_same(gloo[rank], gloo[0], "gloo rank %d vs 0" % rank,
                    params_only=True)

    out = str(tmp_path / "nccl")
    ours = torchrun("pitstop_nccl", out)
    nccl = os.path.join(os.environ["LD_LIBRARY_PATH"].split(":")[0],
                        "libnccl.so.2")
    for rank in range(RANKS):
        assert_same(ours[rank], gloo[rank], "pitstop_nccl rank %d" % rank)
        b = bindings(out, rank)
        assert os.path.samefile(b["library"], nccl), b
        for name, path in b["bindings"].items():
            assert os.path.samefile(path, nccl), (name, path)

    # The library LD_PRELOADed as users load it, no agent listening: the job
    # runs unchanged, and every wrapped NCCL call goes through it.
    plugin = os.environ["PITSTOP_PLUGIN"]
    out = str(tmp_path / "preload")
    pre = torchrun("pitstop_nccl", out, env={
        "LD_PRELOAD": plugin,
        "PITSTOP_AGENT_SOCKET": str(tmp_path / "no-agent-shm.sock"),
        "PITSTOP_HOST": "node0", "PITSTOP_JOB_ID": "torch-backend-test"})
    for rank in range(RANKS):
        assert_same(pre[rank], gloo[rank], "preloaded rank %d" % rank)
        b = bindings(out, rank)
        assert b["preload"] == plugin
        for name, path in b["bindings"].items():
            want = plugin if name in INTERPOSED else nccl
            assert os.path.samefile(path, want), (name, path, want)
