import logging
import os
import time

from pitstop.client import TrainerClient


def test_stubs_are_generated():
    # Built by proto/CMakeLists.txt (pitstop_py_proto); a missing build
    # must fail here, not skip.
    from pitstop.v1 import trainer_pb2, trainer_pb2_grpc  # noqa: F401
    assert trainer_pb2.TRAIN_PHASE_CHECKPOINT == 5
    assert hasattr(trainer_pb2_grpc, "TrainerServiceStub")


def test_no_agent_training_runs_unchanged_and_says_so_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pitstop")
    sock = str(tmp_path / "none.sock")
    c = TrainerClient("job", 0, 2, socket=sock, flush_interval_s=0.05)
    for i in range(2000):
        c.report(i, time.time_ns(), 1000, {"forward": 0.001}, "sync", 64, 1.0)
    deadline = time.monotonic() + 10
    while c._connected is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # several more failed flushes (backoff)
    c.close()
    msgs = [r.getMessage() for r in caplog.records
            if "no agent" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert sock in msgs[0] and "runs unchanged" in msgs[0]
    assert not c.connected
    assert c.dropped >= 2000
    assert c.take_directives() == []


def test_bad_identity_is_refused():
    import pytest
    with pytest.raises(ValueError, match="job_id"):
        TrainerClient("", 0, start=False)
    with pytest.raises(ValueError, match="global_rank"):
        TrainerClient("j", -1, start=False)


def test_queue_is_bounded(tmp_path):
    c = TrainerClient("j", 0, socket=str(tmp_path / "x"), max_queue=10,
                      start=False)
    for i in range(25):
        c.report(i, 0, 1)
    assert len(c._queue) == 10 and c.dropped == 15
    assert [q[0] for q in c._queue] == list(range(15, 25))
