"""pitstop.torch.profiling.StepProfiler and the client's profile path: a
request from the agent is captured over its steps (a real torch.profiler
of real torch ops, and a scripted one for the limits), answered once with
the summary, a failure answered as an error; the client sends the answer
with its next request and drops it once the agent took it; the client's
socket for step reports next to the library's shared-memory socket."""

import time

import pytest

from pitstop.client import ProfileRequest, TrainerClient, default_socket
from pitstop.torch.profiling import StepProfiler, summarize


class FakeClient:
    def __init__(self, requests=()):
        self.requests = list(requests)
        self.sent = []

    def take_profile_requests(self):
        out, self.requests = self.requests, []
        return out

    def send_profile(self, request_id, **kw):
        self.sent.append(dict(kw, request_id=request_id))


def test_real_capture_names_the_ops_a_step_ran():
    import torch
    c = FakeClient([ProfileRequest(5, steps=3, max_ops=10)])
    p = StepProfiler(c)
    a = torch.randn(64, 64)
    for step in range(1, 6):
        p.begin_step(step)
        for _ in range(step):  # later steps do more matmuls
            a = torch.mm(a, a).clamp_(-1, 1)
        p.end_step()
    assert not p.active and len(c.sent) == 1
    s = c.sent[0]
    assert s["request_id"] == 5 and s["steps"] == 3 and s["first_step"] == 1
    assert not s["error"] and s["wall_s"] > 0
    ops = {name: (calls, self_s, total_s) for name, calls, self_s, total_s
           in s["ops"]}
    # Steps 1..3 ran 1 + 2 + 3 matmuls.
    assert ops["aten::mm"][0] == 6, ops
    assert ops["aten::mm"][1] > 0 and ops["aten::mm"][2] >= ops["aten::mm"][1]
    assert len(s["ops"]) <= 10
    # Nothing more is captured without a request.
    p.begin_step(6)
    p.end_step()
    assert len(c.sent) == 1


class ScriptedProfiler:
    def __init__(self, fail_stop=False):
        self.stopped = False
        self.fail_stop = fail_stop

    def stop(self):
        if self.fail_stop:
            raise RuntimeError("kineto went away")
        self.stopped = True

    def key_averages(self):
        class E:
            def __init__(self, key, count, self_us, total_us):
                self.key, self.count = key, count
                self.self_cpu_time_total = self_us
                self.cpu_time_total = total_us
        return [E("aten::add", 10, 100.0, 100.0), E("aten::mm", 4, 900.0,
                                                     950.0),
                E("pitstop_nccl:allreduce", 2, 500.0, 500.0)]


def test_capture_ends_at_its_duration_and_keeps_the_largest_ops():
    now = [0.0]
    c = FakeClient([ProfileRequest(1, steps=50, max_ops=2,
                                   max_duration_ms=1000)])
    p = StepProfiler(c, clock=lambda: now[0],
                     start_profiler=ScriptedProfiler)
    p.begin_step(10)
    for _ in range(3):
        now[0] += 0.4
        p.end_step()
        p.begin_step(0)
    assert len(c.sent) == 1
    s = c.sent[0]
    assert s["steps"] == 3 and s["first_step"] == 10
    assert [o[0] for o in s["ops"]] == ["aten::mm", "pitstop_nccl:allreduce"]
    assert s["ops"][0] == ("aten::mm", 4, 900e-6, 950e-6)


def test_failures_are_answered_and_training_goes_on():
    def refuse():
        raise RuntimeError("profiler already enabled")
    c = FakeClient([ProfileRequest(1, steps=2), ProfileRequest(2, steps=2)])
    p = StepProfiler(c, start_profiler=refuse)
    p.begin_step(1)
    p.end_step()
    # The older request is superseded, the newer cannot start.
    assert [(s["request_id"], s["steps"]) for s in c.sent] == [(1, 0), (2, 0)]
    assert "superseded by request 2" in c.sent[0]["error"]
    assert "profiler already enabled" in c.sent[1]["error"]
    c = FakeClient([ProfileRequest(3, steps=1)])
    p = StepProfiler(c, start_profiler=lambda: ScriptedProfiler(True))
    p.begin_step(1)
    p.end_step()
    assert "kineto went away" in c.sent[0]["error"]
    # Closed mid-capture: answered with the steps taken.
    c = FakeClient([ProfileRequest(4, steps=5)])
    p = StepProfiler(c, start_profiler=ScriptedProfiler)
    p.begin_step(1)
    p.end_step()
    p.close()
    assert c.sent[0]["steps"] == 1 and not c.sent[0]["error"]


def test_summarize_orders_by_self_time():
    ops = summarize(ScriptedProfiler().key_averages(), 5)
    assert [o[0] for o in ops] == ["aten::mm", "pitstop_nccl:allreduce",
                                   "aten::add"]


def test_client_delivers_requests_once_and_sends_the_answer(tmp_path):
    import grpc
    from concurrent import futures
    from pitstop.v1 import trainer_pb2 as pb, trainer_pb2_grpc
    sock = str(tmp_path / "agent.sock")
    seen, answers = [], []

    # Each poll is answered with the profile request until the client
    # answered it (the agent hands a request out once; this one insists,
    # to show the client takes it once).
    class Servicer(trainer_pb2_grpc.TrainerServiceServicer):
        def ReportSteps(self, request, context):
            seen.append(request.trainer.global_rank)
            answers.extend(request.profiles)
            resp = pb.ReportStepsResponse()
            if not answers:
                resp.profile_requests.append(pb.ProfileRequest(
                    request_id=11, job_id="j", global_rank=0, steps=2,
                    max_ops=8, max_duration_ms=5000, reason="fault F1"))
            return resp

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trainer_pb2_grpc.add_TrainerServiceServicer_to_server(Servicer(), server)
    server.add_insecure_port("unix:" + sock)
    server.start()
    try:
        c = TrainerClient("j", 0, 1, socket=sock, flush_interval_s=0.05)
        got, deadline = [], time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = c.take_profile_requests()
            time.sleep(0.05)
        assert [(r.request_id, r.steps, r.max_ops) for r in got] == \
            [(11, 2, 8)]
        time.sleep(0.3)  # more polls: the same request is not handed again
        assert c.take_profile_requests() == []
        c.send_profile(11, first_step=4, steps=2, wall_s=0.5,
                       ops=[("aten::mm", 3, 0.2, 0.25)])
        deadline = time.monotonic() + 20
        while not answers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(answers) == 1
        a = answers[0]
        assert (a.request_id, a.first_step, a.steps, a.wall_ns) == \
            (11, 4, 2, 500_000_000)
        assert [(o.name, o.calls, o.self_cpu_ns, o.total_cpu_ns)
                for o in a.ops] == [("aten::mm", 3, 200_000_000,
                                     250_000_000)]
        time.sleep(0.3)
        assert len(answers) == 1  # sent once
        c.close()
    finally:
        server.stop(0)


@pytest.mark.parametrize("env,want", [
    ({}, "/run/pitstop/agent.sock"),
    ({"PITSTOP_AGENT_SOCKET": "/tmp/a/agent-shm.sock"}, "/tmp/a/agent.sock"),
    ({"PITSTOP_AGENT_SOCKET": "/tmp/a/x.sock"}, "/tmp/a/x.sock"),
    ({"PITSTOP_AGENT_SOCKET": "/tmp/a/agent-shm.sock",
      "PITSTOP_TRAINER_SOCKET": "/tmp/t.sock"}, "/tmp/t.sock"),
])
def test_socket_next_to_the_librarys(monkeypatch, env, want):
    for k in ("PITSTOP_AGENT_SOCKET", "PITSTOP_TRAINER_SOCKET"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert default_socket() == want
