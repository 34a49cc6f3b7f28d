"""The demo PyTorch job of the torch scenarios (tools/torch-job/train_lm.py):
it learns (the loss falls), a run is reproducible bit for bit (same loss
curve, same final weights), a run resumed from a checkpoint ends where an
uninterrupted one does, and bad flags are refused before anything starts.
Each run is a real torchrun with 2 ranks (one node) on
$PITSTOP_TORCH_JOB_BACKEND."""
import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_DIR = os.path.join(HERE, "..", "..", "tools", "torch-job")
SCRIPT = os.path.join(JOB_DIR, "train_lm.py")
sys.path.insert(0, JOB_DIR)
import train_lm  # noqa: E402

# ctest sets it: pitstop_nccl (with PYTHONPATH, PITSTOP_PY_GEN and
# LD_LIBRARY_PATH for it) when the backend is built, else gloo.
BACKEND = os.environ.get("PITSTOP_TORCH_JOB_BACKEND", "gloo")
CORPUS = train_lm.CORPUS_DIR

needs_corpus = pytest.mark.skipif(
    not os.path.isdir(CORPUS),
    reason="%s missing: install Debian's fortunes (tools/install-deps.sh)" %
    CORPUS)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(out, *args, ranks=2):
    """Runs the job under torchrun; returns rank 0's log lines."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = ["/usr/bin/torchrun", "--nnodes", "1", "--nproc_per_node",
           str(ranks), "--master_addr", "127.0.0.1", "--master_port",
           str(free_port()), "--redirects", "2", "--tee", "2",
           "--log_dir", os.path.join(out, "torchrun"), SCRIPT,
           "--backend", BACKEND, "--out", out] + list(args)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    assert p.returncode == 0, p.stdout.decode()[-4000:]
    with open(os.path.join(out, "losses-rank0.jsonl")) as f:
        return [json.loads(line) for line in f]


def losses(lines):
    return [x["loss"] for x in lines if "loss" in x]


def digest(out):
    with open(os.path.join(out, "weights.sha256")) as f:
        return f.read().strip()


@needs_corpus
def test_loss_falls_runs_repeat_and_resume_bit_for_bit(tmp_path):
    a, b, c = (str(tmp_path / n) for n in "abc")
    flags = ["--steps", "40", "--eval-every", "20", "--ckpt-every", "20",
             "--seed", "3"]
    la = torchrun(a, *flags)
    lb = torchrun(b, *(flags + ["--keep-ckpts", "1"]))
    assert sorted(os.listdir(os.path.join(a, "ckpt"))) == ["step20.pt",
                                                          "step40.pt"]
    assert os.listdir(os.path.join(b, "ckpt")) == ["step40.pt"]
    assert len(losses(la)) == 40
    assert losses(la) == losses(lb)  # exact floats, every step
    assert digest(a) == digest(b)
    # Bytes are 5.5 nats at random; 40 steps already learn letter
    # frequencies.
    first, last = losses(la)[:10], losses(la)[-10:]
    assert sum(last) / 10 < sum(first) / 10 - 1.0, losses(la)
    vals = [x["val_loss"] for x in la if "val_loss" in x]
    assert vals[-1] < vals[0], vals

    # Stopped after the step-20 checkpoint, then resumed to 40.
    torchrun(c, *(flags[2:] + ["--steps", "20"]))
    assert os.path.exists(os.path.join(c, "ckpt", "step20.pt"))
    assert digest(c) != digest(a)
    lc = torchrun(c, *(flags + ["--resume"]))
    assert digest(c) == digest(a)
    # The log goes on where the first process stopped: the resumed one
    # trained steps 21..40 and nothing twice.
    assert [x["step"] for x in lc if "loss" in x] == list(range(1, 41))
    assert losses(lc) == losses(la)


@pytest.mark.parametrize("argv,message", [
    (["--steps", "0"], "--steps: must be >= 1"),
    (["--keep-ckpts", "0"], "--keep-ckpts: must be >= 1"),
    (["--d-model", "30", "--heads", "4"], "not a multiple of --heads"),
    (["--duration-s", "5"], "--duration-s needs --eval-every"),
    (["--inject-desync", "3"], "expected RANK:STEP"),
])
def test_bad_flags_are_refused(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        train_lm.parse_args(["--out", "/nonexistent"] + argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_corpus_is_the_fortunes_without_their_index_files(tmp_path):
    (tmp_path / "one").write_bytes(b"a fortune\n%\nanother\n%\n" * 5000)
    (tmp_path / "one.dat").write_bytes(b"\x00\x01binary index" * 100)
    os.symlink("one", tmp_path / "one.u8")
    data = bytes(train_lm.load_corpus(str(tmp_path)).tolist())
    assert data.startswith(b"a fortune\n\nanother\n\na fortune")
    assert b"binary" not in data and b"%" not in data
    with pytest.raises(SystemExit, match="not found"):
        train_lm.load_corpus(str(tmp_path / "missing"))
