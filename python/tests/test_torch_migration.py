"""pitstop.torch.migration: the state a moved torch rank takes along.

The transfer itself is the library's (tests/plugin/migration_test.cc); here
the buffers are read from one rank's memory and written into another's with
TorchState.read/write, which make the library's check (names, sizes, order)
and touch the same addresses the library would."""

import os
import random
import subprocess
import sys
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from pitstop.torch import migration
from pitstop.torch.migration import MigrationError, TorchState


class Net(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.emb = nn.Embedding(32, width)
        self.ln = nn.LayerNorm(width)
        self.bn = nn.BatchNorm1d(width)  # buffers, one of them int64
        self.out = nn.Linear(width, 32)

    def forward(self, idx):
        return self.out(self.bn(self.ln(self.emb(idx))))


def make(seed, width=16):
    torch.manual_seed(seed)
    net = Net(width)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    return net, opt


def train(net, opt, steps):
    for _ in range(steps):
        idx = torch.randint(32, (8,))  # draws from the global generator
        loss = net(idx).logsumexp(-1).mean() + random.random() + \
            float(np.random.rand())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def as_bytes(t):
    return t.detach().contiguous().view(torch.uint8).numpy().tobytes() \
        if t.dim() else t.detach().reshape(1).view(torch.uint8).numpy().tobytes()


def everything(net, opt):
    """Bytes of every parameter, buffer and optimizer tensor, by name."""
    out = {"model/" + k: as_bytes(v) for k, v in net.state_dict().items()}
    for i, p in enumerate(opt.param_groups[0]["params"]):
        for k, v in opt.state[p].items():
            out["optim/%d/%s" % (i, k)] = as_bytes(v)
    return out


class Sampler:
    def __init__(self):
        self.pos = 0

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, s):
        self.pos = s["pos"]


def test_round_trip_is_bit_identical_and_training_continues_identically():
    net, opt = make(1)
    sampler = Sampler()
    random.seed(5)
    np.random.seed(6)
    train(net, opt, 3)
    sampler.pos = 24
    opt.param_groups[0]["lr"] = 0.0123456789  # as a scheduler would
    leaver = TorchState(net, opt, extra={"sampler": sampler})
    leaver.capture(3)
    sent = leaver.read()
    before = everything(net, opt)
    rng = (torch.get_rng_state(), random.getstate(), np.random.get_state())

    # The joiner: other initial weights, no optimizer state, other RNGs.
    jnet, jopt = make(2)
    jsampler = Sampler()
    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    joiner = TorchState(jnet, jopt, extra={"sampler": jsampler})
    joiner.materialise_optimizer_state()
    joiner.write(sent)
    assert joiner.apply() == 3
    assert everything(jnet, jopt) == before
    assert jsampler.pos == 24
    assert jopt.param_groups[0]["lr"] == 0.0123456789
    assert jopt.param_groups[0]["betas"] == opt.param_groups[0]["betas"]
    assert isinstance(jopt.param_groups[0]["betas"], tuple)
    assert torch.equal(torch.get_rng_state(), rng[0])
    assert random.getstate() == rng[1]
    assert np.array_equal(np.random.get_state()[1], rng[2][1])

    # Both go on from the same state: the leaver's RNGs as they were.
    torch.set_rng_state(rng[0])
    random.setstate(rng[1])
    np.random.set_state(rng[2])
    train(net, opt, 2)
    expected = everything(net, opt)
    joiner.apply()  # the joiner's RNGs back to the received state
    train(jnet, jopt, 2)
    assert everything(jnet, jopt) == expected


def test_lazily_created_optimizer_state_is_registered_when_it_appears():
    net, opt = make(1)
    st = TorchState(net, opt)
    first = st.changed()
    assert first[0][0] == migration.STATE_NAME
    assert not any(n.startswith("optim/") for n, _, _ in first)
    assert st.changed() == []  # nothing new at the next boundary
    train(net, opt, 1)  # AdamW creates step, exp_avg, exp_avg_sq
    new = st.changed()
    names = [n for n, _, _ in new]
    assert names and all(n.startswith("optim/") for n in names)
    assert "optim/0.0/exp_avg:float32[32,16]" in names
    assert "optim/0.0/step:float32[]" in names
    # New names go last: the order registered so far is kept.
    assert [n for n, _, _ in first] == st.names()[:len(first)]
    assert st.changed() == []
    # A tensor an optimizer replaces is registered again at its new place.
    p0 = opt.param_groups[0]["params"][0]
    opt.state[p0]["exp_avg"] = opt.state[p0]["exp_avg"].clone()
    moved = st.changed()
    assert [(n, a) for n, a, _ in moved] == [
        ("optim/0.0/exp_avg:float32[32,16]",
         opt.state[p0]["exp_avg"].data_ptr())]
    # So is a parameter a module replaced (same shape: same name).
    net.out.bias = nn.Parameter(net.out.bias.detach().clone())
    moved = st.changed()
    assert [(n, a) for n, a, _ in moved] == [
        ("model/out.bias:float32[32]", net.out.bias.data_ptr())]
    assert st.changed() == []


def test_joiner_materialises_optimizer_state_without_touching_weights():
    net, opt = make(3)
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    st = TorchState(net, opt)
    st.materialise_optimizer_state()
    for k, v in net.state_dict().items():
        assert torch.equal(v, weights[k]), k
    assert all(p.grad is None for p in net.parameters())
    assert len(opt.state) == len(list(net.parameters()))
    # Same buffers as a leaver that has stepped.
    lnet, lopt = make(4)
    train(lnet, lopt, 1)
    assert st.names() == TorchState(lnet, lopt).names()


def test_shape_mismatch_is_refused_naming_the_tensor_and_nothing_is_written():
    net, opt = make(1, width=16)
    train(net, opt, 1)
    leaver = TorchState(net, opt)
    leaver.capture(1)
    jnet, jopt = make(2, width=8)
    joiner = TorchState(jnet, jopt)
    joiner.materialise_optimizer_state()
    before = everything(jnet, jopt)
    with pytest.raises(MigrationError) as e:
        joiner.write(leaver.read())
    msg = str(e.value)
    assert "'model/emb.weight:float32[32,8]' here" in msg, msg
    assert "'model/emb.weight:float32[32,16]' on the leaver" in msg, msg
    assert everything(jnet, jopt) == before


def test_a_leaver_without_optimizer_state_is_refused_by_count():
    net, opt = make(1)
    leaver = TorchState(net, opt)  # before its first optimizer step
    leaver.capture(0)
    jnet, jopt = make(1)
    joiner = TorchState(jnet, jopt)
    joiner.materialise_optimizer_state()
    with pytest.raises(MigrationError, match=r"leaver sent 11 state buffer\(s\)"
                       r", this process registered 32"):
        joiner.write(leaver.read())


def test_small_state_that_does_not_fit_names_the_sizes():
    net, opt = make(1)
    st = TorchState(net, opt, state_bytes=1024)
    with pytest.raises(MigrationError, match=r"small state is \d+ bytes, "
                       r"the buffer 1024"):
        st.capture(0)


def test_corrupt_small_state_is_refused():
    net, opt = make(1)
    st = TorchState(net, opt)
    st.capture(0)
    st.small[0] ^= 1
    with pytest.raises(MigrationError, match="offset 0: not a packed torch "
                       "state"):
        st.apply()


def test_without_the_library(monkeypatch):
    assert migration.TrainerApi.find() is None  # pytest is not preloaded
    monkeypatch.delenv("PITSTOP_VIRTUALIZE_COMMS", raising=False)
    monkeypatch.delenv("PITSTOP_MIGRATION_ROLE", raising=False)
    net, opt = make(1)
    hook = migration.Migration(net, opt)
    assert hook.step(7) == 7  # the job runs without pitstop
    monkeypatch.setenv("PITSTOP_VIRTUALIZE_COMMS", "1")
    with pytest.raises(migration.LibraryNotLoaded, match="LD_PRELOAD="):
        migration.Migration(net, opt)
    monkeypatch.delenv("PITSTOP_VIRTUALIZE_COMMS")
    monkeypatch.setenv("PITSTOP_MIGRATION_ROLE", "joiner")
    with pytest.raises(migration.LibraryNotLoaded, match="not loaded"):
        migration.Migration(net, opt)


def _plugin():
    build = os.environ.get("PITSTOP_BUILD_DIR") or os.path.join(
        os.path.dirname(__file__), "..", "..", "build")
    path = os.path.join(build, "plugin", "libnccl-profiler-pitstop.so")
    if not os.path.exists(path):
        pytest.fail("%s not built (cmake --build build --target "
                    "nccl-profiler-pitstop)" % path)
    return path


PRELOADED = r"""
import sys, torch
from pitstop.torch import migration
torch.manual_seed(1)
net = torch.nn.Linear(4, 2)
opt = torch.optim.AdamW(net.parameters())
hook = migration.Migration(net, opt)
assert hook.api is not None
print("step", hook.step(3))
try:
    hook.api.join(10)
except migration.MigrationError as e:
    print("join:", e)
"""


def test_through_the_preloaded_library():
    env = dict(os.environ, LD_PRELOAD=_plugin(), PITSTOP_VIRTUALIZE_COMMS="1",
               PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
    env.pop("PITSTOP_MIGRATION_ROLE", None)
    out = subprocess.run([sys.executable, "-c", PRELOADED], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "step 3" in out.stdout  # registered, polled: CONTINUE
    assert "join: pitstop_trainer_join: pitstop_trainer_join needs " \
           "PITSTOP_MIGRATION_ROLE=joiner" in out.stdout, out.stdout


IMPORTS = r"""
import sys
import torch
from pitstop.torch import migration
heavy = sorted(m for m in ("grpc", "pitstop.client", "pitstop.torch.edit",
                           "pitstop.torch.multi_lora", "pitstop.torch.penalty",
                           "pitstop.torch.placement", "pitstop.torch.switch")
               if m in sys.modules)
print("heavy:", ",".join(heavy))
from pitstop.torch import EDiT, MultiLoraTrainer, compute_placement
import pitstop.torch
print("lazy:", EDiT.__module__, MultiLoraTrainer.__module__,
      compute_placement.__module__, "EDiT" in dir(pitstop.torch))
"""


def test_a_torch_job_imports_only_what_migration_needs():
    """A joiner imports pitstop.torch.migration at start-up, while the job
    waits for it: the package's trainers (and grpc, via pitstop.client) are
    imported when first used, not with the package."""
    env = dict(os.environ,
               PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
    out = subprocess.run([sys.executable, "-c", IMPORTS], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "heavy: \n" in out.stdout, out.stdout
    assert ("lazy: pitstop.torch.edit pitstop.torch.multi_lora "
            "pitstop.torch.placement True") in out.stdout, out.stdout


def test_joiner_skips_only_the_init_barrier(monkeypatch):
    """The job's ranks passed the group's store barrier long ago; a joiner
    is one arrival more on the same store. Torch's own call waits until its
    timeout, the joiner's does not."""
    server = dist.TCPStore("127.0.0.1", 0, 1, True,
                           timeout=timedelta(seconds=10))
    kw = dict(store=server, rank=0, world_size=1,
              timeout=timedelta(seconds=2))
    monkeypatch.delenv("PITSTOP_MIGRATION_ROLE", raising=False)
    migration.init_process_group("gloo", **kw)  # the job's rank
    dist.destroy_process_group()
    with pytest.raises(RuntimeError, match="Timed out initializing"):
        dist.init_process_group("gloo", **kw)  # one arrival too many
    if dist.is_initialized():
        dist.destroy_process_group()
    monkeypatch.setenv("PITSTOP_MIGRATION_ROLE", "joiner")
    migration.init_process_group("gloo", **kw)
    assert dist.get_rank() == 0
    dist.destroy_process_group()


def test_ddp_rebuild_pending_until_the_second_forward():
    """A joiner must not join before its DDP rebuilt its buckets: that
    rebuild broadcasts, and after the join the other ranks all-reduce."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    server = dist.TCPStore("127.0.0.1", 0, 1, True,
                           timeout=timedelta(seconds=10))
    dist.init_process_group("gloo", store=server, rank=0, world_size=1)
    try:
        net, _ = make(1)
        net.bn = nn.Identity()  # DDP broadcasts buffers; keep it to params
        model = DDP(net)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        assert not migration.ddp_rebuild_pending(net)  # not a DDP
        assert migration.ddp_rebuild_pending(model)
        train(model, opt, 1)
        assert migration.ddp_rebuild_pending(model)  # rebuilt at forward 2
        train(model, opt, 1)
        assert not migration.ddp_rebuild_pending(model)
        unused = DDP(make(2)[0], find_unused_parameters=True)
        assert not migration.ddp_rebuild_pending(unused)  # never rebuilds
    finally:
        dist.destroy_process_group()
