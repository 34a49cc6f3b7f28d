"""EDiT / A-EDiT for PyTorch: a wrapper around a model and its optimizer
that runs synchronous data parallelism or local SGD, and switches between
them at a step every rank agrees on.

Modes (``mode``):

* ``"sync"``: gradients are averaged over all ranks (one all-reduce) before
  every optimizer step.
* ``"local_sgd"`` (EDiT): each rank takes ``period_steps`` local optimizer
  steps, then the ranks synchronise: each rank's pseudo-gradient
  (global parameters - local parameters) is filtered by the
  pseudo-gradient penalty (penalty.py), averaged (weighted by the local
  steps each rank took, ``weight_by_steps``), and applied to the global
  parameters by an outer SGD optimizer with Nesterov momentum (as EDiT and
  DiLoCo do); every rank continues from the new global parameters.
  Defaults lr 1.0, momentum 0.5: DiLoCo's 0.7 / 0.9 are tuned for H = 500
  local steps; a switched job syncs every few seconds (H of 5-30 steps),
  where a steady pseudo-gradient is amplified lr / (1 - momentum) = 7x and
  overshoots (on the demo's model: +4.9 % loss at 0.8 / 0.8, +3.8 % at
  1.0 / 0.5, +10 % for plain averaging 1.0 / 0, H = 20)
* ``"timed"`` (A-EDiT): as local_sgd, but the ranks synchronise every
  ``period_ms`` of wall time, so a fast rank takes more local steps than a
  slow one instead of waiting for it. Each rank joins the sync at the
  last step boundary that fits in the period (``timed_fit``, default on;
  its step time is the median of its last 5 local steps), so no rank
  holds the others at the collective with a step that straddles the
  deadline (timed_sync_due).

Learning-rate schedule (``lr_lambda``): a function of the job's progress
in synchronous-equivalent steps (all ranks' steps / world size,
``progress_steps``) returning a multiplier of each parameter group's
initial lr, applied before every inner optimizer step. It counts the
tokens every rank consumed, so the schedule reaches its end at the same
token budget in every mode (a per-rank LambdaLR counts local steps).

Post-local SGD (``min_sync_steps``): a switch to a local mode is applied
no earlier than this step (agreed, like every switch), so the first,
fastest-changing phase of training stays synchronous (Lin et al., "Don't
use large mini-batches, use local SGD", 2020; PyTorch's
PostLocalSGDOptimizer ``warmup_steps``). 0: no minimum.

Pseudo-gradient penalty inputs (``norm_per_step``): in A-EDiT a rank takes
a varying number of local steps per round, and its pseudo-gradient grows
with them; the penalty judges ||delta|| / local steps so a rank that was
given more CPU is not mistaken for an anomaly.

Switching: directives come from the controller through the node agent
(TrainerClient) or from ``request_switch``; SwitchAgreement (switch.py)
decides at a synchronisation point, identically on every rank. Switching
to sync happens right after an outer sync (parameters identical) and
averages the inner optimizer's state over the ranks (Adam moments differ
after local steps; the step count takes the maximum), so every rank then
applies identical updates. Each switch is logged with its reason and
verified by an all-gathered parameter checksum.

Usage::

    edit = EDiT(model, optimizer, job_id="job-1")
    for batch in data:
        edit.begin_step()
        with edit.phase("forward"):
            loss = model(batch)
        with edit.phase("backward"):
            loss.backward()
        edit.step(tokens=batch.numel(), loss=loss.item())

Thread-safety: one training thread calls everything; the reporter thread
of the client is internal.
"""

import contextlib
import logging
import math
import time

import torch
import torch.distributed as dist

from pitstop.client import MODES, Directive, TrainerClient
from pitstop.torch.penalty import PseudoGradientPenalty
from pitstop.torch.profiling import StepProfiler
from pitstop.torch.switch import CONTROL_LEN, SwitchAgreement

log = logging.getLogger("pitstop")


def timed_sync_due(elapsed_s, step_s, period_ms):
    """A-EDiT: whether a rank that has been in this round for `elapsed_s`
    and takes about `step_s` per local step (median of its last ones)
    joins the outer sync now. It does when the next step would end past
    the period: every rank reaches the sync by the deadline, at the last
    step boundary that fits, instead of the first one after it. The
    collective waits for the last rank to arrive, so a slow rank finishing
    a step that straddles the deadline (up to one of its long steps) would
    hold every fast rank idle; this way the slow rank idles instead -- at
    most one of its steps, which is worth half as much. step_s 0: the
    first boundary at or past the deadline."""
    return (elapsed_s + step_s) * 1000.0 >= period_ms


def outer_weights(penalty, norms, steps, norm_per_step=True,
                  weight_by_steps=True):
    """The outer sync's arithmetic on all-gathered numbers (identical on
    every rank): each rank's pseudo-gradient norm and local steps ->
    (weights, clip scales, anomalous, the norms as judged). With
    norm_per_step the penalty judges norm / local steps; with
    weight_by_steps the kept ranks' weights are also proportional to their
    local steps (A-EDiT: a rank that took more steps saw more data)."""
    world = len(norms)
    steps = [max(float(k), 0.0) for k in steps]
    if norm_per_step:
        norms = [n / max(k, 1.0) for n, k in zip(norms, steps)]
    if penalty is not None:
        weights, scales, anomalous = penalty.step(norms)
    else:
        weights = [1.0 / world] * world
        scales = [1.0] * world
        anomalous = [False] * world
    if weight_by_steps:
        tot = sum(w * k for w, k in zip(weights, steps))
        if tot > 0:
            weights = [w * k / tot for w, k in zip(weights, steps)]
    return weights, scales, anomalous, norms


class EDiT:
    def __init__(self, model, optimizer, *, mode="sync", period_steps=8,
                 period_ms=2000, outer_lr=1.0, outer_momentum=0.5,
                 penalty=True, penalty_args=None, job_id=None, client=None,
                 switch_timeout_s=30.0, control_every=1, clock=time.monotonic,
                 weight_by_steps=True, norm_per_step=True, lr_lambda=None,
                 min_sync_steps=0, timed_fit=True, group=None,
                 control_group=None):
        if mode not in MODES:
            raise ValueError("mode: one of %s, got %r" % (sorted(MODES), mode))
        if period_steps <= 0 or period_ms <= 0:
            raise ValueError("period_steps and period_ms must be > 0")
        self.model = model
        self.optimizer = optimizer
        self.group = group
        # The small control exchange of every sync step (switch agreement,
        # stop vote) on its own group when given (e.g. gloo beside an NCCL
        # data group): the data group then carries only the gradient and
        # outer-sync collectives, whose late rank the controller's
        # straggler detector sees in every one (a second collective right
        # after the gradient all-reduce has a random last arriver).
        self.control_group = control_group if control_group is not None \
            else group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.period_steps = period_steps
        self.period_ms = period_ms
        self.outer_lr = outer_lr
        self.outer_momentum = outer_momentum
        self.control_every = max(1, control_every)
        self.weight_by_steps = weight_by_steps
        # A-EDiT: join the outer sync at the last step boundary that fits in
        # the period (timed_sync_due).
        self.timed_fit = timed_fit
        self._last_step_end = 0.0
        self._step_times = []
        self.norm_per_step = norm_per_step
        # The inner learning rate follows the job's progress in tokens, not
        # this rank's optimizer steps: in local modes ranks take different
        # numbers of steps, so a per-rank scheduler (LambdaLR) would put
        # every rank at a different point of the schedule.
        self.lr_lambda = lr_lambda
        self._base_lrs = [g.get("initial_lr", g["lr"])
                          for g in optimizer.param_groups]
        self.clock = clock
        self.penalty = (PseudoGradientPenalty(self.world, **(penalty_args or {}))
                        if penalty else None)
        self.agreement = SwitchAgreement(switch_timeout_s, clock,
                                         min_local_step=min_sync_steps)
        self.client = client
        if self.client is None and job_id:
            self.client = TrainerClient(job_id, self.rank, self.world)
        # The controller's torch.profiler windows (a slow-rank fault).
        self.profiler = StepProfiler(self.client) if self.client else None
        self.step_no = 0
        self.local_steps = 0
        self.outer_syncs = 0
        self.switches = []    # (agreed_step, from, to, reason, consistent)
        self.abandoned = []   # (directive_id, missing ranks)
        self.last_weights = None
        self.stopped = False   # agreed at a sync point: leave the loop
        self.synced = False    # the last step() ended at a sync point
        self.total_steps = 0   # sum of all ranks' steps at the last sync point
        self._step_at_sync = 0  # this rank's step_no at that point
        self._pace = float(self.world)
        self._lr_progress = 0.0
        self._stop_vote = False
        self.mode = "sync"
        self._global = None
        self._outer_buf = None
        self._phases = {}
        self._t0 = None
        self._start_ns = 0
        with torch.no_grad():
            for p in self.params:  # every rank starts from rank 0's model
                dist.broadcast(p.data, 0, group=group)
        if mode != "sync":
            self._enter_local(mode)

    # -- the training loop's calls -------------------------------------------
    def begin_step(self):
        self._phases = {}
        self._t0 = time.perf_counter()
        self._start_ns = time.time_ns()
        if self.profiler is not None:
            self.profiler.begin_step(self.step_no + 1)

    @contextlib.contextmanager
    def phase(self, name):
        t = time.perf_counter()
        try:
            yield
        finally:
            self._phases[name] = self._phases.get(name, 0.0) + (
                time.perf_counter() - t)

    def request_stop(self):
        """Votes to stop. Ranks leave together: ``stopped`` becomes True on
        every rank at the first sync point after any rank voted (in local
        modes ranks take different numbers of steps, so a loop must end on
        ``while not edit.stopped``, not on a step count). Parameters are
        identical on every rank when ``stopped`` becomes True."""
        self._stop_vote = True

    def request_switch(self, directive):
        """Offers a directive as if it came from the controller."""
        self.agreement.offer(directive)

    def step(self, tokens=0, loss=None):
        """Optimizer step (+ gradient all-reduce or outer sync as due)."""
        if self._t0 is None:
            self.begin_step()
        gathered = None
        if self.mode == "sync":
            with self.phase("communication"):
                self._allreduce_grads()
            with self.phase("optimizer"):
                self._apply_lr()
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            self.step_no += 1
            if self.step_no % self.control_every == 0:
                self._poll()
                with self.phase("communication"):
                    gathered = self._exchange([])
        else:
            with self.phase("optimizer"):
                self._apply_lr()
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            self.step_no += 1
            self.local_steps += 1
            if self._sync_due():
                self._poll()
                with self.phase("communication"):
                    gathered = self._outer_sync()
        self.synced = gathered is not None
        if gathered is not None:
            total = int(sum(g[2] for g in gathered))
            mine = self.step_no - self._step_at_sync
            # All ranks' steps per step of this rank in the round just
            # ended: how fast the job progresses while this rank steps.
            self._pace = ((total - self.total_steps) / mine if mine > 0
                          else float(self.world))
            self.total_steps = total
            self._step_at_sync = self.step_no
            if any(g[CONTROL_LEN] > 0 for g in gathered):
                self.stopped = True
            decision = self.agreement.decide([g[:CONTROL_LEN] for g in gathered])
            if decision is not None:
                self._act(decision)
        self._report(tokens, loss)
        if self.profiler is not None:
            self.profiler.end_step()
        self._t0 = None

    @property
    def phase_times(self):
        """Seconds per phase of the current step, or of the last one after
        ``step()`` until the next ``begin_step()``: the caller's phases
        plus ``optimizer`` and ``communication`` (the wrapper's own), as
        reported to the controller."""
        return dict(self._phases)

    @property
    def progress_steps(self):
        """The job's progress in synchronous-equivalent steps: the steps of
        all ranks / world size (tokens consumed by the job / tokens of one
        rank's step). Exact at sync points (every step in sync mode);
        between outer syncs, the total at the last one plus this rank's
        steps since times the job's pace in the last round (all ranks'
        steps per step of this rank)."""
        since = self.step_no - self._step_at_sync
        return (self.total_steps + since * self._pace) / self.world

    def _apply_lr(self):
        if self.lr_lambda is None:
            return
        # Never backwards: a rank whose estimate ran ahead of the job holds
        # its rate until the job catches up.
        self._lr_progress = max(self._lr_progress, self.progress_steps)
        f = float(self.lr_lambda(self._lr_progress))
        for g, base in zip(self.optimizer.param_groups, self._base_lrs):
            g["lr"] = base * f

    def close(self):
        if self.profiler is not None:
            self.profiler.close()
        if self.client is not None:
            self.client.close()

    # -- synchronous DP ---------------------------------------------------------
    def _allreduce_grads(self):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p)
                 for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.group)
        flat.div_(self.world)
        off = 0
        for p, g in zip(self.params, grads):
            n = g.numel()
            if p.grad is None:
                p.grad = flat[off:off + n].view_as(p).clone()
            else:
                p.grad.copy_(flat[off:off + n].view_as(p))
            off += n

    # -- local SGD ----------------------------------------------------------------
    def _sync_due(self):
        if self.mode == "local_sgd":
            return self.local_steps >= self.period_steps
        now = self.clock()
        self._step_times.append(now - self._last_step_end)
        del self._step_times[:-5]
        self._last_step_end = now
        est = (sorted(self._step_times)[len(self._step_times) // 2]
               if self.timed_fit else 0.0)
        return timed_sync_due(now - self._round_start, est, self.period_ms)

    def _enter_local(self, mode):
        with torch.no_grad():
            self._global = [p.detach().clone() for p in self.params]
            self._outer_buf = [torch.zeros_like(p) for p in self.params]
        self.mode = mode
        self.local_steps = 0
        self._round_start = self.clock()
        self._last_step_end = self._round_start
        self._step_times = []

    def _outer_sync(self):
        with torch.no_grad():
            deltas = [g - p.detach() for g, p in zip(self._global, self.params)]
            flat = torch.cat([d.reshape(-1) for d in deltas])
            norm = float(flat.double().norm())
            gathered = self._exchange([norm, float(self.local_steps)])
            norms = [g[CONTROL_LEN + 1] for g in gathered]
            steps = [g[CONTROL_LEN + 2] for g in gathered]
            weights, scales, anomalous, norms = outer_weights(
                self.penalty, norms, steps, self.norm_per_step,
                self.weight_by_steps)
            self.last_weights = weights
            if any(anomalous):
                log.warning(
                    "pitstop: rank %d step %d: pseudo-gradient of rank(s) %s "
                    "anomalous (norms%s %s); dropped from this sync",
                    self.rank,
                    self.step_no, [i for i, a in enumerate(anomalous) if a],
                    " per local step" if self.norm_per_step else "",
                    ["%.3g" % n for n in norms])
            coeff = weights[self.rank] * scales[self.rank]
            if coeff == 0.0 or not math.isfinite(norm):
                flat.zero_()
            else:
                flat.mul_(coeff)
            dist.all_reduce(flat, group=self.group)
            if sum(weights) > 0:
                off = 0
                for g, buf in zip(self._global, self._outer_buf):
                    n = g.numel()
                    d = flat[off:off + n].view_as(g)
                    off += n
                    buf.mul_(self.outer_momentum).add_(d)
                    # Nesterov: step along d + momentum * buf.
                    g.sub_(self.outer_lr * (d + self.outer_momentum * buf))
            for p, g in zip(self.params, self._global):
                p.copy_(g)
        self.outer_syncs += 1
        self.local_steps = 0
        self._round_start = self.clock()
        self._last_step_end = self._round_start
        return gathered

    # -- control -------------------------------------------------------------------
    def _exchange(self, extra):
        vec = (self.agreement.control(self.step_no) +
               [1.0 if self._stop_vote else 0.0] + list(extra))
        t = torch.tensor(vec, dtype=torch.float64)
        out = [torch.zeros_like(t) for _ in range(self.world)]
        dist.all_gather(out, t, group=self.control_group)
        return [o.tolist() for o in out]

    def _poll(self):
        if self.client is None:
            return
        for d in self.client.take_directives():
            if getattr(d, "placement", None):  # multi-LoRA, not a switch
                continue
            if self.agreement.offer(d):
                log.info("pitstop: rank %d step %d: received %r", self.rank,
                         self.step_no, d)

    def _act(self, decision):
        if decision.kind == "abandon":
            self.abandoned.append((decision.directive_id, decision.missing_ranks))
            log.warning(
                "pitstop: rank %d: directive %d abandoned at step %d: rank(s) "
                "%s never received it within %.0f s; staying in %s",
                self.rank, decision.directive_id, decision.agreed_step,
                decision.missing_ranks, self.agreement.timeout_s, self.mode)
            return
        d = decision.directive
        old = self.mode
        if d.mode == "sync":
            if old != "sync":
                # Parameters are identical here (right after an outer sync).
                self._average_optimizer_state()
                self._global = None
                self._outer_buf = None
            self.mode = "sync"
        else:
            if d.period_steps > 0:
                self.period_steps = d.period_steps
            if d.period_ms > 0:
                self.period_ms = d.period_ms
            if old == "sync":
                self._enter_local(d.mode)
            else:
                self.mode = d.mode
        consistent = self.consistent()
        self.switches.append((decision.agreed_step, old, self.mode, d.reason,
                              consistent))
        level = logging.INFO if consistent else logging.ERROR
        log.log(level,
                "pitstop: rank %d: switched %s -> %s at agreed step %d "
                "(directive %d: %s); model %s across ranks", self.rank, old,
                self.mode, decision.agreed_step, d.directive_id, d.reason,
                "consistent" if consistent else "INCONSISTENT")
        if self.client is not None:
            self.client.set_state(mode=self.mode)

    def _average_optimizer_state(self):
        with torch.no_grad():
            for p in self.params:
                st = self.optimizer.state.get(p, {})
                for k in sorted(st):
                    v = st[k]
                    if not torch.is_tensor(v):
                        continue
                    if k == "step":
                        w = v.detach().to(torch.float64).reshape(1).clone()
                        dist.all_reduce(w, op=dist.ReduceOp.MAX, group=self.group)
                        v.copy_(w.reshape(v.shape).to(v.dtype))
                    elif v.is_floating_point():
                        dist.all_reduce(v, group=self.group)
                        v.div_(self.world)

    def checksum(self):
        with torch.no_grad():
            s = 0.0
            for i, p in enumerate(self.params):
                s += float(p.detach().double().sum()) * (i + 1)
                s += float(p.detach().double().abs().sum())
            return s

    def consistent(self):
        """All ranks hold bit-identical parameters (all-gathered checksum)."""
        t = torch.tensor([self.checksum()], dtype=torch.float64)
        out = [torch.zeros_like(t) for _ in range(self.world)]
        dist.all_gather(out, t, group=self.group)
        return all(float(o) == float(out[0]) for o in out)

    def _report(self, tokens, loss):
        if self.client is None:
            return
        wall = time.perf_counter() - self._t0
        self.client.report(self.step_no, self._start_ns, int(wall * 1e9),
                           self._phases, self.mode, tokens,
                           0.0 if loss is None else float(loss))
