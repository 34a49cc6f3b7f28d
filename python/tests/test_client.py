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


def test_rank_outside_the_world_is_refused_at_once():
    import pytest
    with pytest.raises(ValueError, match="not a rank of world_size 4"):
        TrainerClient("j", 7, 4, start=False)


def test_queue_is_bounded(tmp_path):
    c = TrainerClient("j", 0, socket=str(tmp_path / "x"), max_queue=10,
                      start=False)
    for i in range(25):
        c.report(i, 0, 1)
    assert len(c._queue) == 10 and c.dropped == 15
    assert [q[0] for q in c._queue] == list(range(15, 25))


class _ScriptedAgent:
    """A TrainerService on a unix socket answering each poll with the
    job's newest directive above seen_directive_id, like the agent's
    TrainerHub; `directives` can be extended while it runs."""

    def __init__(self, path):
        import grpc
        from concurrent import futures
        from pitstop.v1 import trainer_pb2, trainer_pb2_grpc
        self.pb = trainer_pb2
        self.directives = []
        self.steps = []      # every step report received
        self.refuse = None   # a message: answer INVALID_ARGUMENT with it
        agent = self

        class Servicer(trainer_pb2_grpc.TrainerServiceServicer):
            def ReportSteps(self, request, context):
                if agent.refuse:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  agent.refuse)
                agent.steps.extend(request.steps)
                resp = trainer_pb2.ReportStepsResponse()
                newest = agent.directives[-1] if agent.directives else None
                if newest and newest.directive_id > request.seen_directive_id:
                    resp.directives.append(newest)
                return resp

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trainer_pb2_grpc.add_TrainerServiceServicer_to_server(Servicer(),
                                                              self.server)
        self.server.add_insecure_port("unix:" + path)
        self.server.start()

    def stop(self):
        self.server.stop(0)


def _wait_directives(c, n, timeout=20):
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        c.flush()
        got += c.take_directives()
        time.sleep(0.05)
    return got


def test_sync_directive_after_a_lora_directive_is_applied(tmp_path):
    # The controller numbers a job's directives in one sequence for both
    # policies (src/controller/trainers/directive_ids.h): a local-SGD
    # switch after a placement directive has the next id, and the client
    # (which keeps only ids above the highest it saw) hands it to the
    # local-SGD trainer, whose agreement applies it.
    from types import SimpleNamespace
    from pitstop.torch.edit import EDiT
    from pitstop.torch.switch import SwitchAgreement
    sock = str(tmp_path / "agent.sock")
    agent = _ScriptedAgent(sock)
    pb = agent.pb
    try:
        lora = pb.TrainerDirective(directive_id=1, job_id="j",
                                   apply_at_step=3, reason="placement")
        stage = lora.placement.pipelines.add().stages.add()
        stage.rank, stage.layer_begin, stage.layer_end = 0, 0, 4
        agent.directives.append(lora)
        c = TrainerClient("j", 0, 1, socket=sock, flush_interval_s=0.05)
        first = _wait_directives(c, 1)
        assert [d.directive_id for d in first] == [1]
        assert first[0].placement["pipelines"][0]["stages"] == [(0, 0, 4)]
        agent.directives.append(pb.TrainerDirective(
            directive_id=2, job_id="j", mode=pb.SYNC_MODE_LOCAL_SGD,
            period_steps=4, apply_at_step=5, reason="slow rank"))
        second = _wait_directives(c, 1)
        c.close()
        assert [(d.directive_id, d.mode) for d in second] == [(2, "local_sgd")]
        # The local-SGD trainer skips the placement directive and applies
        # the switch at the agreed step.
        trainer = SimpleNamespace(client=SimpleNamespace(
            take_directives=lambda: first + second),
            agreement=SwitchAgreement(), rank=0, step_no=5)
        EDiT._poll(trainer)
        dec = trainer.agreement.decide([trainer.agreement.control(5)])
        assert dec is not None and dec.kind == "apply", dec
        assert dec.directive.directive_id == 2
        assert dec.directive.mode == "local_sgd"
    finally:
        agent.stop()


def _until(cond, timeout=20):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return cond()


def test_a_long_queue_goes_in_several_requests(tmp_path):
    # The agent takes 4096 steps per request; 6000 queued (fast steps, or
    # an agent back after the back-off) must all arrive and be counted.
    sock = str(tmp_path / "agent.sock")
    agent = _ScriptedAgent(sock)
    try:
        c = TrainerClient("j", 0, 1, socket=sock, flush_interval_s=60,
                          max_queue=10000)
        for i in range(6000):
            c.report(i, 0, 1000)
        c.flush()
        assert _until(lambda: len(agent.steps) >= 6000)
        c.close()
        assert [s.step for s in agent.steps] == list(range(6000))
        assert c.sent == 6000 and c.dropped == 0
    finally:
        agent.stop()


def test_refused_reports_are_named_not_read_as_a_missing_agent(tmp_path,
                                                                caplog):
    caplog.set_level(logging.INFO, logger="pitstop")
    sock = str(tmp_path / "agent.sock")
    agent = _ScriptedAgent(sock)
    agent.refuse = "steps[0].phases[0].phase: unknown value 99"
    try:
        c = TrainerClient("j", 0, 1, socket=sock, flush_interval_s=0.05)
        for i in range(3):
            c.report(i, 0, 1000)
        assert _until(lambda: c.refused >= 3)
        for i in range(3, 5):  # the same reason again: logged once
            c.report(i, 0, 1000)
        assert _until(lambda: c.refused >= 5)
        agent.refuse = None  # accepted again, without a reconnect message
        c.report(5, 0, 1000)
        assert _until(lambda: len(agent.steps) == 1)
        c.close()
    finally:
        agent.stop()
    msgs = [r.getMessage() for r in caplog.records]
    refused = [m for m in msgs if "refused" in m]
    assert len(refused) == 1, msgs
    assert "INVALID_ARGUMENT" in refused[0] and "unknown value 99" in refused[0]
    assert not any("no agent" in m or "reachable again" in m for m in msgs)
    assert c.connected and c.dropped == 5 and c.sent == 1


def test_nan_loss_is_sent_without_a_loss(tmp_path, caplog):
    # The agent refuses a NaN loss (the controller averages losses): one
    # diverged step must not cost the batch, nor a diverged run its reports
    # and directives.
    caplog.set_level(logging.INFO, logger="pitstop")
    sock = str(tmp_path / "agent.sock")
    agent = _ScriptedAgent(sock)
    try:
        c = TrainerClient("j", 0, 1, socket=sock, flush_interval_s=0.05)
        c.report(1, 0, 1000, loss=2.5)
        c.report(2, 0, 1000, loss=float("nan"))
        c.report(3, 0, 1000, loss=float("nan"))
        assert _until(lambda: len(agent.steps) == 3)
        c.close()
    finally:
        agent.stop()
    assert [s.loss for s in agent.steps] == [2.5, 0.0, 0.0]
    nan = [r for r in caplog.records if "NaN" in r.getMessage()]
    assert len(nan) == 1
    assert c.refused == 0 and c.dropped == 0
