"""TrainerClient: step reports to the local pitstop agent, directives back.

Reporting is batched and non-blocking: ``report()`` appends a tuple to a
bounded deque (drop-oldest and count when full); a daemon thread sends the
queue every ``flush_interval_s`` with one unary ``ReportSteps`` call (2 s
deadline) and collects the directives in the answer. With no agent (socket
missing, agent down, stubs not generated) training runs unchanged: the
client says so once, drops reports, and retries every few seconds.

Profile requests (a torch.profiler window the controller asks of this
trainer when its rank, or a peer it is compared with, is the suspect of a
slow-rank fault) arrive in the same answers: ``take_profile_requests()``
hands them to the training loop (pitstop.torch.profiling.StepProfiler runs
them) and ``send_profile()`` queues the summary for the next request.

Socket: ``socket=``, else ``$PITSTOP_TRAINER_SOCKET``, else
``$PITSTOP_AGENT_SOCKET`` -- which, for the in-process library preloaded
into the same process, names the agent's *shared-memory* socket
(``...-shm.sock``); the client then talks to the agent's gRPC socket next
to it (``...-shm.sock`` -> ``....sock``, the agent's default pairing).

Thread-safety: ``report``, ``take_directives``, ``take_profile_requests``,
``send_profile``, ``set_state`` and ``close`` may be called from any thread.
"""

import collections
import logging
import os
import threading
import time

log = logging.getLogger("pitstop")

DEFAULT_SOCKET = "/run/pitstop/agent.sock"
# Answers to profile requests held while the agent is away (the oldest are
# dropped beyond) and profile requests waiting for the training loop.
MAX_PENDING_PROFILES = 4
# The agent's limit on steps per ReportSteps request (kMaxStepsPerReport in
# src/controller/trainers/trainer_policy.h; the agent checks the same).
MAX_STEPS_PER_REQUEST = 4096

# Phase names accepted by report(); values are TrainPhase numbers.
PHASES = {
    "data": 1,
    "forward": 2,
    "backward": 3,
    "optimizer": 4,
    "checkpoint": 5,
    "evaluation": 6,
    "communication": 7,
}
# SyncMode numbers.
MODES = {"sync": 1, "local_sgd": 2, "timed": 3}
MODE_NAMES = {v: k for k, v in MODES.items()}


class Directive:
    """A switch the controller asks for (from TrainerDirective)."""

    __slots__ = ("directive_id", "mode", "period_steps", "period_ms",
                 "apply_at_step", "reason", "placement")

    def __init__(self, directive_id, mode, period_steps=0, period_ms=0,
                 apply_at_step=0, reason="", placement=None):
        self.directive_id = int(directive_id)
        self.mode = mode  # "sync" | "local_sgd" | "timed"
        self.period_steps = int(period_steps)
        self.period_ms = int(period_ms)
        self.apply_at_step = int(apply_at_step)
        self.reason = reason
        # Multi-LoRA placement (TrainerDirective.placement) as a dict:
        # {"pipelines": [{"stages": [(rank, begin, end)], "adapters": [..]}],
        #  "excluded": [ranks], "samples_per_s": estimate}; None otherwise.
        self.placement = placement

    def __repr__(self):
        return ("Directive(id=%d, mode=%s, period_steps=%d, period_ms=%d, "
                "apply_at_step=%d, reason=%r)" %
                (self.directive_id, self.mode, self.period_steps,
                 self.period_ms, self.apply_at_step, self.reason))


class ProfileRequest:
    """A torch.profiler window the controller asks of this trainer
    (trainer.proto ProfileRequest)."""

    __slots__ = ("request_id", "steps", "max_ops", "max_duration_ms",
                 "reason")

    def __init__(self, request_id, steps, max_ops=64, max_duration_ms=20000,
                 reason=""):
        self.request_id = int(request_id)
        self.steps = int(steps)
        self.max_ops = int(max_ops)
        self.max_duration_ms = int(max_duration_ms)
        self.reason = reason

    def __repr__(self):
        return ("ProfileRequest(id=%d, steps=%d, max_ops=%d, "
                "max_duration_ms=%d, reason=%r)" %
                (self.request_id, self.steps, self.max_ops,
                 self.max_duration_ms, self.reason))


def default_socket():
    """The agent's gRPC socket for step reports (see the module doc)."""
    s = os.environ.get("PITSTOP_TRAINER_SOCKET")
    if s:
        return s
    s = os.environ.get("PITSTOP_AGENT_SOCKET")
    if not s:
        return DEFAULT_SOCKET
    if s.endswith("-shm.sock"):
        return s[:-len("-shm.sock")] + ".sock"
    return s


def _placement(d):
    if not d.HasField("placement"):
        return None
    p = d.placement
    return {"pipelines": [{"stages": [(s.rank, s.layer_begin, s.layer_end)
                                      for s in pipe.stages],
                           "adapters": list(pipe.adapters)}
                          for pipe in p.pipelines],
            "excluded": list(p.excluded_ranks),
            "samples_per_s": p.estimated_samples_per_s}


class TrainerClient:
    def __init__(self, job_id, global_rank, world_size=0, socket=None,
                 flush_interval_s=0.5, max_queue=8192, start=True):
        if not job_id:
            raise ValueError("job_id: required")
        if global_rank < 0:
            raise ValueError("global_rank: must be >= 0, got %r" % global_rank)
        if world_size and not global_rank < world_size:
            raise ValueError("global_rank %r: not a rank of world_size %r"
                             % (global_rank, world_size))
        self.job_id = job_id
        self.global_rank = int(global_rank)
        self.world_size = int(world_size)
        self.socket = socket or default_socket()
        self.flush_interval_s = flush_interval_s
        self._queue = collections.deque(maxlen=max_queue)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._dropped = 0
        self._sent = 0
        self._mode = MODES["sync"]
        self._seen_directive = 0
        self._inbox = []
        self._profile_inbox = []   # ProfileRequest, for the training loop
        self._profiles_out = []    # ProfileResult messages to send
        self._profile_ids = set()  # request ids received (each taken once)
        self._connected = None  # None: not tried yet
        self.refused = 0  # reports the agent answered with a refusal
        self._nan_logged = False
        self._refusal_reasons = set()
        self._refusals = ()  # gRPC codes of an agent that answered: _load
        self.controller_connected = False
        self.thread_cpu_s = 0.0  # CPU the sender thread used (overhead)
        self.report_s = 0.0      # time spent inside report() (overhead)
        self._stub = None
        self._pb = None
        self._thread = None
        if start:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="pitstop-reporter")
            self._thread.start()

    # -- called by the training loop ---------------------------------------
    def report(self, step, start_unix_ns, wall_ns, phases=None, mode=None,
               tokens=0, loss=0.0, lora=None):
        """Queues one step report. phases: {name: seconds}; lora: the
        multi-LoRA stage time (StepReport.lora fields). Never blocks."""
        t0 = time.perf_counter()
        loss = float(loss)
        if loss != loss:  # NaN: the agent refuses it; 0 = no loss reported
            if not self._nan_logged:
                self._nan_logged = True
                log.warning("pitstop: loss is NaN at step %s; step reports "
                            "carry no loss while it is", step)
            loss = 0.0
        item = (int(step), int(start_unix_ns), int(wall_ns),
                tuple(phases.items()) if phases else (),
                MODES.get(mode, 0) if mode else self._mode, int(tokens),
                loss, lora)
        with self._lock:
            if len(self._queue) == self._queue.maxlen:
                self._dropped += 1
            self._queue.append(item)
        self.report_s += time.perf_counter() - t0

    def take_directives(self):
        """Directives received since the last call (oldest first)."""
        with self._lock:
            out, self._inbox = self._inbox, []
        return out

    def take_profile_requests(self):
        """Profile requests received since the last call (oldest first)."""
        with self._lock:
            out, self._profile_inbox = self._profile_inbox, []
        return out

    def send_profile(self, request_id, first_step=0, steps=0, wall_s=0.0,
                     ops=(), error=""):
        """Queues the answer to profile request `request_id` for the next
        request to the agent. ops: (name, calls, self_cpu_s, total_cpu_s)
        tuples; error: why nothing was captured. Never blocks."""
        item = (int(request_id), int(first_step), int(steps), float(wall_s),
                tuple((str(n)[:256], int(c), float(s), float(t))
                      for n, c, s, t in ops), str(error)[:1024])
        with self._lock:
            self._profiles_out.append(item)
            del self._profiles_out[:-MAX_PENDING_PROFILES]
        self._wake.set()

    def set_state(self, mode=None):
        with self._lock:
            if mode is not None:
                self._mode = MODES[mode]

    def flush(self):
        """Asks the sender thread to send now (still non-blocking)."""
        self._wake.set()

    def close(self, timeout_s=2.0):
        """Sends what is queued (bounded by timeout_s) and stops the thread."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def connected(self):
        return bool(self._connected)

    @property
    def dropped(self):
        return self._dropped

    @property
    def sent(self):
        return self._sent

    # -- sender thread -------------------------------------------------------
    def _load(self):
        try:
            import grpc
            from pitstop.v1 import trainer_pb2, trainer_pb2_grpc
        except ImportError as e:
            log.warning(
                "pitstop: trainer stubs unavailable (%s); training runs "
                "unchanged without step reports", e)
            return False
        self._grpc = grpc
        self._pb = trainer_pb2
        c = grpc.StatusCode
        self._refusals = (c.INVALID_ARGUMENT, c.FAILED_PRECONDITION,
                          c.PERMISSION_DENIED, c.OUT_OF_RANGE,
                          c.UNAUTHENTICATED)
        channel = grpc.insecure_channel("unix:" + self.socket)
        self._stub = trainer_pb2_grpc.TrainerServiceStub(channel)
        return True

    def _build(self, items):
        pb = self._pb
        req = pb.ReportStepsRequest()
        req.trainer.job_id = self.job_id
        req.trainer.global_rank = self.global_rank
        req.trainer.world_size = self.world_size
        req.trainer.pid = os.getpid()
        with self._lock:
            req.current_mode = self._mode
            req.seen_directive_id = self._seen_directive
            req.dropped_reports = self._dropped
            profiles = list(self._profiles_out)
        for rid, first, steps, wall, ops, error in profiles:
            p = req.profiles.add()
            p.request_id = rid
            p.first_step = first
            p.steps = steps
            p.wall_ns = int(wall * 1e9)
            p.error = error
            for name, calls, self_s, total_s in ops:
                o = p.ops.add()
                o.name = name
                o.calls = calls
                o.self_cpu_ns = int(self_s * 1e9)
                o.total_cpu_ns = int(total_s * 1e9)
        for step, start, wall, phases, mode, tokens, loss, lora in items:
            s = req.steps.add()
            s.step = step
            s.start_unix_ns = start
            s.wall_ns = wall
            s.mode = mode
            s.tokens = tokens
            s.loss = loss
            for name, secs in phases:
                if name in PHASES:  # unknown names are not sent
                    p = s.phases.add()
                    p.phase = PHASES[name]
                    p.duration_ns = int(secs * 1e9)
            if lora:
                costs = lora.get("layer_costs", ())
                s.lora.layer_costs.extend(costs)
                for k, v in lora.items():
                    if k == "layer_costs":
                        continue
                    if isinstance(v, (list, tuple)):
                        getattr(s.lora, k).extend(v)
                    else:
                        setattr(s.lora, k, v)
        return req

    def _send_once(self):
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
        # The agent takes at most MAX_STEPS_PER_REQUEST steps per request:
        # a longer queue (fast steps, or an agent back after the back-off)
        # goes in several. An empty queue still polls for directives.
        for i in range(0, max(len(items), 1), MAX_STEPS_PER_REQUEST):
            if not self._send_chunk(items[i:i + MAX_STEPS_PER_REQUEST],
                                    len(items) - i):
                return False
        return True

    def _send_chunk(self, chunk, unsent):
        """Sends one request; False when the agent is not answering (then
        `unsent`, this chunk and the ones after it, count as dropped)."""
        req = self._build(chunk)
        try:
            resp = self._stub.ReportSteps(req, timeout=2.0)
        except self._grpc.RpcError as e:
            if e.code() in self._refusals:
                self._refused(e, len(chunk))
                # A refused answer would be refused again: dropped too.
                self._answered_profiles(req, self._pb.ReportStepsResponse())
                return True
            with self._lock:
                self._dropped += unsent
            if self._connected is not False:
                log.warning(
                    "pitstop: no agent answering at unix:%s (%s); training "
                    "runs unchanged, step reports are dropped until it is "
                    "back", self.socket, e.code().name)
            self._connected = False
            return False
        if self._connected is False:
            log.info("pitstop: agent at unix:%s reachable again", self.socket)
        self._connected = True
        self._sent += len(chunk)
        self._answered_profiles(req, resp)
        self.controller_connected = resp.controller_connected
        new = []
        for d in resp.directives:
            new.append(Directive(d.directive_id, MODE_NAMES.get(d.mode, "sync"),
                                 d.period_steps, d.period_ms, d.apply_at_step,
                                 d.reason, _placement(d)))
        if new:
            with self._lock:
                for d in new:
                    if d.directive_id > self._seen_directive:
                        self._seen_directive = d.directive_id
                        self._inbox.append(d)
        return True

    def _answered_profiles(self, req, resp):
        """After a request the agent took: the profile answers it carried
        are delivered; the profile requests in its answer wait for the
        training loop."""
        sent = {p.request_id for p in req.profiles}
        with self._lock:
            self._profiles_out = [p for p in self._profiles_out
                                  if p[0] not in sent]
            for r in resp.profile_requests:
                if r.request_id in self._profile_ids:
                    continue
                self._profile_ids.add(r.request_id)
                self._profile_inbox.append(ProfileRequest(
                    r.request_id, r.steps, r.max_ops, r.max_duration_ms,
                    r.reason))
                del self._profile_inbox[:-MAX_PENDING_PROFILES]

    def _refused(self, error, n):
        """The agent answered and refused the request (a report it cannot
        take, an identity that does not hold): it is reachable, the reports
        are dropped and counted, and the reason is logged once per reason
        rather than read as a missing agent."""
        with self._lock:
            self._dropped += n
            self.refused += n
        self._connected = True
        reason = "%s: %s" % (error.code().name, error.details())
        if reason not in self._refusal_reasons and \
                len(self._refusal_reasons) < 16:
            self._refusal_reasons.add(reason)
            log.warning("pitstop: the agent at unix:%s refused %d step "
                        "report(s) of job %s rank %d (%s); they are dropped",
                        self.socket, n, self.job_id, self.global_rank, reason)

    def _run(self):
        t_cpu0 = time.thread_time()
        if not self._load():
            self._connected = False
            with self._lock:
                self._queue.clear()
            return
        backoff = self.flush_interval_s
        while True:
            self._wake.wait(backoff)
            self._wake.clear()
            try:
                ok = self._send_once()
            except Exception as e:  # never let the reporter thread die
                log.warning("pitstop: step report failed: %r", e)
                ok = False
            self.thread_cpu_s = time.thread_time() - t_cpu0
            if self._stop:
                if ok and self._queue:
                    self._send_once()
                return
            backoff = self.flush_interval_s if ok else min(
                max(backoff * 2, 1.0), 5.0)
