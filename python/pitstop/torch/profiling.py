"""On-demand torch.profiler windows for the controller (docs/pytorch.md,
"A slow rank's torch.profiler diff").

When the controller confirms a slow-rank fault (a straggler) of a job whose
trainers run this library, it asks the suspect's trainer and one healthy
peer's for a profile of a few training steps (a ProfileRequest, through the
node agent, in the answer to a step report). StepProfiler runs it at the
trainer's step boundaries: the next step after the request arrives starts a
torch.profiler (CPU activity), the capture ends after ``steps`` steps or
``max_duration_ms``, whichever comes first, and the summary goes back with
the next step report: per op (torch.profiler's key_averages(): collectives
under the backend's name, e.g. ``pitstop_nccl:allreduce``) the calls, self
CPU time and total CPU time, the ``max_ops`` largest by self time.

EDiT and MultiLoraTrainer run one when they have a client; a hand-written
loop does it with its own client::

    prof = StepProfiler(client)
    for batch in data:
        prof.begin_step(step)
        ...                      # forward, backward, optimizer, collectives
        prof.end_step()

Costs nothing between requests (one list check per step). A failure to
profile (torch.profiler missing or refusing to start, e.g. another profiler
active) is answered as an error instead of a summary; training goes on.

Thread-safety: the training thread calls begin_step / end_step.
"""

import logging
import time

log = logging.getLogger("pitstop")


def summarize(key_averages, max_ops):
    """(name, calls, self_cpu_s, total_cpu_s) of the `max_ops` ops with the
    most self CPU time, from torch.profiler's key_averages() (times in us)."""
    ops = [(e.key, int(e.count), e.self_cpu_time_total / 1e6,
            e.cpu_time_total / 1e6) for e in key_averages]
    ops.sort(key=lambda o: -o[2])
    return ops[:max(0, int(max_ops))]


class StepProfiler:
    def __init__(self, client, clock=time.monotonic, start_profiler=None):
        """`start_profiler()` returns a started profiler with stop() and
        key_averages() (default: torch.profiler, CPU activity)."""
        self.client = client
        self.clock = clock
        self._start_profiler = start_profiler or _torch_profiler
        self._req = None
        self._prof = None
        self._steps = 0
        self._first = 0
        self._t0 = 0.0
        self.captures = []  # (request id, steps, error) of finished ones

    @property
    def active(self):
        return self._req is not None

    def begin_step(self, step_no):
        """Before a step: starts a requested capture."""
        if self._req is not None or self.client is None:
            return
        reqs = self.client.take_profile_requests()
        if not reqs:
            return
        for old in reqs[:-1]:  # a newer request of the controller wins
            self._answer(old, 0, 0.0, (), "superseded by request %d" %
                         reqs[-1].request_id)
        req = reqs[-1]
        try:
            self._prof = self._start_profiler()
        except Exception as e:  # noqa: BLE001 (any failure is answered)
            self._answer(req, 0, 0.0, (), "torch.profiler did not start: %r"
                         % (e,))
            return
        self._req = req
        self._steps = 0
        self._first = int(step_no)
        self._t0 = self.clock()
        log.info("pitstop: profiling %d step(s) from step %d for the "
                 "controller (%s)", req.steps, step_no, req.reason)

    def end_step(self):
        """After a step: ends the capture once it has its steps or its
        time, and queues the summary."""
        if self._req is None:
            return
        self._steps += 1
        elapsed = self.clock() - self._t0
        if (self._steps >= self._req.steps or
                elapsed * 1000.0 >= self._req.max_duration_ms):
            self._finish(elapsed)

    def close(self):
        """Ends a capture in progress, answered with the steps so far."""
        if self._req is not None:
            self._finish(self.clock() - self._t0)

    def _finish(self, elapsed):
        req, prof, self._req, self._prof = self._req, self._prof, None, None
        try:
            prof.stop()
            ops = summarize(prof.key_averages(), req.max_ops)
        except Exception as e:  # noqa: BLE001
            self._answer(req, 0, 0.0, (), "torch.profiler failed: %r" % (e,))
            return
        self._answer(req, self._steps, elapsed, ops,
                     "" if self._steps else "no step captured")

    def _answer(self, req, steps, wall_s, ops, error):
        self.captures.append((req.request_id, steps, error))
        if error:
            log.warning("pitstop: profile request %d: %s", req.request_id,
                        error)
        self.client.send_profile(req.request_id, first_step=self._first,
                                 steps=steps, wall_s=wall_s, ops=ops,
                                 error=error)


def _torch_profiler():
    import torch.profiler as tp
    p = tp.profile(activities=[tp.ProfilerActivity.CPU])
    p.start()
    return p
