"""Multi-LoRA pipeline trainer (mLoRA-style) with rescheduling at an agreed
step.

K LoRA adapters train on one frozen base model (pitstop.torch.lora_model)
cut into P pipeline stages over P processes; activations and gradients go
point-to-point (torch.distributed send/recv, gloo in tests). A step pushes
every adapter's micro-batches through the pipeline, interleaved
(adapter 0 mb 0, adapter 1 mb 0, ..., adapter 0 mb 1, ...): while one
adapter's micro-batch is in stage s, the next adapter's fills stage s - 1,
so the adapters fill each other's bubbles. Each adapter has its own data
(ShardedCorpus) and its own optimizer state (one AdamW per adapter and
layer: AdamW is element-wise, so this equals one AdamW per adapter and lets
a layer's state move alone). Checkpoints are per adapter and per layer, so
they do not depend on the placement.

Every rank reports its stage's compute time per step through the trainer
library (StepReport.lora), so the controller sees a slow stage without
NCCL. A placement directive (from the controller through the agent, or
offer() in tests) names new layer ranges per stage and excluded ranks and
the step to apply it at. After every step the ranks all-gather a control
vector (pitstop.torch.switch.SwitchAgreement): the move happens at the
first step boundary where every rank has the directive and the agreed step
has reached apply_at_step, so a directive late on one rank only delays it;
between step n and n + 1 layers' base weights, LoRA parameters and AdamW
state go from their old owner to their new one, and step n + 1 runs in the
new placement: no adapter loses or repeats a step. A peer dying during the
move (or a step) stops the trainer with MoveFailed / PipelineFailed naming
the step, the layer and the peer; it never hangs past the process group's
timeout.

Not thread-safe: one training loop per process calls it.
"""

import json
import logging
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pitstop.torch import lora_model as lm
from pitstop.torch.placement import (Placement,  # noqa: F401
                                     placement_from_directive,
                                     validate_placement)
from pitstop.torch.switch import SwitchAgreement
from pitstop.torch.profiling import StepProfiler

log = logging.getLogger("pitstop")


class PipelineFailed(RuntimeError):
    """A peer failed during a pipeline step; the trainer stopped."""


class MoveFailed(PipelineFailed):
    """A peer failed while layers moved; the trainer stopped."""


class MultiLoraTrainer:
    def __init__(self, cfg, adapters, placement, data, rank, world,
                 client=None, throttle=None, agreement_timeout_s=30.0,
                 move_hook=None, max_layers=0, probe_every=0):
        """adapters: the job's adapter indexes; placement: the starting
        Placement (one pipeline or several, adapters split between them);
        data: ShardedCorpus-like (batch(adapter, step, mb) -> (x, y));
        throttle(step, cost_units, compute_s) -> extra seconds of stage
        compute (emulated device time / a slowed rank); move_hook(layer,
        src, dst) runs before each layer move (tests inject faults);
        max_layers: most layers this rank can hold (reported, 0 = any);
        probe_every: an excluded rank times one block every this many
        steps (0: never) and reports it, so the controller sees it
        recover."""
        self.adapters = sorted(adapters)
        validate_placement(placement, cfg.n_layers, world, self.adapters)
        self.cfg = cfg
        self.rank, self.world = rank, world
        self.data, self.client, self.throttle = data, client, throttle
        self.move_hook = move_hook
        self.max_layers = max_layers
        self.probe_every = probe_every
        self.costs = lm.layer_costs(cfg)
        self.placement = placement
        self.agreement = SwitchAgreement(timeout_s=agreement_timeout_s)
        # The controller's torch.profiler windows (a slow-rank fault).
        self.profiler = StepProfiler(client) if client is not None else None
        self.step_no = 0          # completed steps (every adapter)
        self.moves = []           # (step, placement dict, reason, n, s)
        self.abandoned = []
        self.probes = []          # (step, units per second) when excluded
        # Seconds of stage compute and of step wall time while holding a
        # stage: 1 - busy / wall is the pipeline bubble (plus waiting).
        self.busy_s = self.stage_wall_s = 0.0
        self.losses = {}          # adapter -> {step: loss} (last stage)
        self.layers = {}          # index -> base module
        self.lora = {}            # (adapter, index) -> {name: Parameter}
        self.opts = {}            # (adapter, index) -> AdamW
        span = placement.layers_of(rank)
        for i in range(*(span or (0, 0))):
            self._build_layer(i)
            for k in self.my_adapters:
                self._new_lora(k, i, fresh=True)

    # -- layers and adapters ------------------------------------------------
    @property
    def pipeline(self):
        """Index of this rank's pipeline, None when excluded."""
        return self.placement.pipeline_of(self.rank)

    @property
    def my_adapters(self):
        """The adapters this rank's pipeline trains."""
        q = self.pipeline
        return [] if q is None else self.placement.adapters_of(
            q, self.adapters)

    def _new_opt(self, params):
        return torch.optim.AdamW(list(params.values()), lr=self.cfg.lr,
                                 weight_decay=0.0)

    def _build_layer(self, i):
        self.layers[i] = lm.build_layer(self.cfg, i)

    def _new_lora(self, k, i, fresh):
        if not lm.has_lora(self.cfg, i):
            return
        p = lm.init_lora(self.cfg, k, i) if fresh else {
            n: torch.nn.Parameter(torch.empty(s))
            for n, s in lm.lora_shapes(self.cfg)}
        self.lora[(k, i)] = p
        self.opts[(k, i)] = self._new_opt(p)

    @property
    def span(self):
        return self.placement.layers_of(self.rank)

    def adapter_steps(self, adapter):
        """AdamW steps of `adapter` in each layer this rank holds."""
        out = {}
        for (k, i), opt in self.opts.items():
            if k == adapter:
                st = opt.state.get(next(iter(self.lora[(k, i)].values())), {})
                out[i] = int(st.get("step", torch.tensor(0.0)).item())
        return out

    # -- one pipeline step ----------------------------------------------------
    def _micro_batches(self):
        return [(k, m) for m in range(self.cfg.micro_batches)
                for k in self.my_adapters]

    def _run_layers(self, h, adapter):
        b, e = self.span
        for i in range(b, e):
            h = self.layers[i](h, self.lora.get((adapter, i)))
        return h

    def _throttle(self, units, compute_s):
        if self.throttle is None:
            return 0.0
        extra = self.throttle(self.step_no + 1, units, compute_s)
        if extra > 0:
            time.sleep(extra)
        return max(extra, 0.0)

    def _forward(self, ranks, pos, mbs, shape, t):
        first, last = pos == 0, pos == len(ranks) - 1
        units = sum(self.costs[slice(*self.span)])
        saved, sends = [], []
        step = self.step_no + 1
        for k, m in mbs:
            if first:
                h = self.data.batch(k, step, m)[0]
            else:
                h = torch.empty(shape)
                c0 = time.perf_counter()
                dist.recv(h, ranks[pos - 1])
                t["communication"] += time.perf_counter() - c0
                h.requires_grad_(True)
            c0 = time.perf_counter()
            out = self._run_layers(h, k)
            loss = None
            if last:
                y = self.data.batch(k, step, m)[1]
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]),
                                       y.reshape(-1))
            dt = time.perf_counter() - c0
            t["forward"] += dt + self._throttle(units / 3, dt)
            if not last:
                sends.append(dist.isend(out.detach().contiguous(),
                                        ranks[pos + 1]))
            saved.append((k, h, out, loss))
        return saved, sends

    def _backward(self, ranks, pos, saved, shape, t):
        first, last = pos == 0, pos == len(ranks) - 1
        units = sum(self.costs[slice(*self.span)])
        sends, losses = [], {}
        scale = 1.0 / self.cfg.micro_batches
        for k, h, out, loss in reversed(saved):
            if last:
                g = None
                losses.setdefault(k, []).append(float(loss))
            else:
                g = torch.empty(shape)
                c0 = time.perf_counter()
                dist.recv(g, ranks[pos + 1])
                t["communication"] += time.perf_counter() - c0
            c0 = time.perf_counter()
            if last:
                (loss * scale).backward()
            elif out.requires_grad:
                out.backward(g)
            dt = time.perf_counter() - c0
            t["backward"] += dt + self._throttle(units * 2 / 3, dt)
            if not first:
                gin = h.grad if h.grad is not None else torch.zeros(shape)
                sends.append(dist.isend(gin.contiguous(), ranks[pos - 1]))
        return sends, losses

    def _pipeline_step(self, t):
        ranks = self.placement.ranks(self.pipeline)
        pos = ranks.index(self.rank)
        cfg = self.cfg
        shape = (cfg.micro_batch, cfg.seq, cfg.d_model)
        mbs = self._micro_batches()
        saved, s1 = self._forward(ranks, pos, mbs, shape, t)
        s2, losses = self._backward(ranks, pos, saved, shape, t)
        c0 = time.perf_counter()
        for opt in self.opts.values():
            opt.step()
            opt.zero_grad(set_to_none=True)
        t["optimizer"] += time.perf_counter() - c0
        c0 = time.perf_counter()
        for w in s1 + s2:
            w.wait()
        t["communication"] += time.perf_counter() - c0
        step = self.step_no + 1
        for k, ls in losses.items():
            self.losses.setdefault(k, {})[step] = sum(ls) / len(ls)
        return len(mbs)

    def probe(self):
        """Times one block's forward + backward on a fixed micro-batch
        (through the throttle, i.e. the emulated device): this rank's speed
        in cost units per second while it holds no stage."""
        cfg = self.cfg
        i = 1 if cfg.blocks >= 1 else 0
        layer = lm.build_layer(cfg, i)
        lora = lm.init_lora(cfg, 0, i) if lm.has_lora(cfg, i) else None
        g = torch.Generator().manual_seed(cfg.seed * 31 + 7)
        x = torch.randn((cfg.micro_batch, cfg.seq, cfg.d_model), generator=g)
        x.requires_grad_(True)
        c0 = time.perf_counter()
        layer(x, lora).sum().backward()
        dt = time.perf_counter() - c0
        dt += self._throttle(self.costs[i], dt)
        return self.costs[i] / max(dt, 1e-9), dt

    def train_step(self):
        """One step of every adapter, then the placement agreement (and a
        move when agreed). Returns {adapter: loss} on the last stages."""
        t = dict.fromkeys(("forward", "backward", "optimizer",
                           "communication"), 0.0)
        start_ns = time.time_ns()
        t0 = time.perf_counter()
        n_mb = 0
        span = self.span
        probe = None
        if self.profiler is not None:
            self.profiler.begin_step(self.step_no + 1)
        if span is not None:
            try:
                n_mb = self._pipeline_step(t)
            except RuntimeError as e:
                raise PipelineFailed(
                    "multi-lora rank %d: step %d failed in the pipeline %s: "
                    "%s; the trainer stops" %
                    (self.rank, self.step_no + 1,
                     self.placement.ranks(self.pipeline), e))
        elif self.probe_every and (self.step_no + 1) % self.probe_every == 0:
            probe = self.probe()
            self.probes.append((self.step_no + 1, probe[0]))
        self.step_no += 1
        wall = time.perf_counter() - t0
        if span is not None:
            self.busy_s += t["forward"] + t["backward"] + t["optimizer"]
            self.stage_wall_s += wall
        self._report(start_ns, wall, t, n_mb, span, probe)
        if self.profiler is not None:
            self.profiler.end_step()
        self._agree()
        return {k: v[self.step_no] for k, v in self.losses.items()
                if self.step_no in v}

    def _report(self, start_ns, wall, t, n_mb, span, probe=None):
        if self.client is None:
            return
        q = self.pipeline
        last = span is not None and self.placement.ranks(q)[-1] == self.rank
        b, e = span or (0, 0)
        compute = t["forward"] + t["backward"] + t["optimizer"]
        losses = [v[self.step_no] for v in self.losses.values()
                  if self.step_no in v]
        samples = n_mb * self.cfg.micro_batch if last else 0
        lora = {"stage": self.placement.ranks(q).index(self.rank)
                if span else 0, "layer_begin": b, "layer_end": e,
                "micro_batches": n_mb, "compute_ns": int(compute * 1e9),
                "layer_costs": self.costs, "samples": samples,
                "adapters": len(self.my_adapters), "excluded": span is None,
                "pipeline": q or 0, "adapter_ids": self.my_adapters,
                "max_layers": self.max_layers}
        if probe is not None:
            lora["probe_units_per_s"] = probe[0]
        self.client.report(
            self.step_no, start_ns, int(wall * 1e9), phases=t,
            tokens=samples * self.cfg.seq,
            loss=sum(losses) / len(losses) if losses else 0.0, lora=lora)

    # -- directives and the move ---------------------------------------------
    def offer(self, directive):
        """A placement directive (Directive with .placement); any order."""
        return self.agreement.offer(directive)

    def _agree(self):
        if self.client is not None:
            for d in self.client.take_directives():
                if getattr(d, "placement", None):
                    self.offer(d)
        ctl = torch.tensor(self.agreement.control(self.step_no),
                           dtype=torch.float64)
        out = [torch.zeros(3, dtype=torch.float64) for _ in range(self.world)]
        try:
            dist.all_gather(out, ctl)
        except RuntimeError as e:
            raise PipelineFailed(
                "multi-lora rank %d: placement agreement after step %d "
                "failed: %s; the trainer stops" % (self.rank, self.step_no, e))
        dec = self.agreement.decide([o.tolist() for o in out])
        if dec is None:
            return
        if dec.kind == "abandon":
            self.abandoned.append((self.step_no, dec.directive_id,
                                   dec.missing_ranks))
            log.warning("multi-lora rank %d: directive %d abandoned after "
                        "step %d: ranks %s never received it", self.rank,
                        dec.directive_id, self.step_no, dec.missing_ranks)
            return
        new, why = placement_from_directive(dec.directive, self.cfg.n_layers,
                                            self.world, self.adapters)
        if new is None:
            self.abandoned.append((self.step_no, dec.directive_id, why))
            log.warning("multi-lora rank %d: directive %d rejected: %s",
                        self.rank, dec.directive_id, why)
            return
        self.apply_placement(new, dec.directive.reason)

    def _transfers(self, old, new):
        """Every transfer of the move, in the order all ranks agree on:
        per layer, base weights to each rank that holds the layer now and
        did not (from its owner in the lowest old pipeline), then per
        adapter its LoRA parameters and AdamW state when the adapter's
        owner of the layer changes (another stage, or another pipeline).
        [(kind, layer, adapter, src, dst)]."""
        out = []
        for i in range(self.cfg.n_layers):
            was = old.owners(i)
            for dst in new.owners(i):
                if dst not in was:
                    out.append(("base", i, None, old.owner(i), dst))
            if not lm.has_lora(self.cfg, i):
                continue
            for k in self.adapters:
                src, dst = old.owner(i, k), new.owner(i, k)
                if src != dst:
                    out.append(("lora", i, k, src, dst))
        return out

    def apply_placement(self, new, reason=""):
        """Moves layers and adapters to `new` now (every rank calls it at
        the same step boundary; train_step does it on an agreed
        directive)."""
        validate_placement(new, self.cfg.n_layers, self.world, self.adapters)
        old = self.placement
        t0 = time.perf_counter()
        moves = self._transfers(old, new)
        pending, sent = [], []
        hooked = set()
        for kind, i, k, src, dst in moves:
            try:
                if self.move_hook is not None and (i, src, dst) not in hooked:
                    hooked.add((i, src, dst))
                    self.move_hook(i, src, dst)
                if self.rank == src:
                    tensors = (self._base_tensors(i) if kind == "base" else
                               self._lora_tensors(k, i))
                    pending += [dist.isend(x.contiguous(), dst)
                                for x in tensors]
                    sent.append((kind, i, k))
                elif self.rank == dst:
                    if kind == "base":
                        self._recv_base(i, src)
                    else:
                        self._recv_lora(k, i, src)
            except RuntimeError as e:
                what = ("layer %d" % i if kind == "base" else
                        "adapter %d of layer %d" % (k, i))
                raise MoveFailed(
                    "multi-lora rank %d: moving %s from rank %d to rank "
                    "%d after step %d failed: %s; the trainer stops (the "
                    "placement is half-moved; restart from the adapters' "
                    "checkpoints)" % (self.rank, what, src, dst,
                                      self.step_no, e))
        try:
            for w in pending:
                w.wait()
        except RuntimeError as e:
            raise MoveFailed("multi-lora rank %d: sending layers %s after "
                             "step %d failed: %s; the trainer stops" %
                             (self.rank, sorted({i for _, i, _ in sent}),
                              self.step_no, e))
        # Drop what this rank no longer holds.
        span = new.layers_of(self.rank)
        keep = set(range(*(span or (0, 0))))
        q = new.pipeline_of(self.rank)
        mine = set() if q is None else set(new.adapters_of(q, self.adapters))
        for i in list(self.layers):
            if i not in keep:
                del self.layers[i]
        for key in list(self.lora):
            if key[1] not in keep or key[0] not in mine:
                del self.lora[key]
                del self.opts[key]
        self.placement = new
        n_layers = len({(i, d) for kind, i, _, _, d in moves})
        self.moves.append((self.step_no, new.to_dict(), reason,
                           n_layers, time.perf_counter() - t0))
        log.info("multi-lora rank %d: placement %s applied after step %d "
                 "(%d transfers in %.3f s)%s", self.rank, new.pipelines,
                 self.step_no, len(moves), time.perf_counter() - t0,
                 ": " + reason if reason else "")

    def _base_tensors(self, i):
        return [p.data for p in self.layers[i].parameters()]

    def _lora_tensors(self, k, i):
        """Adapter k's LoRA parameters of layer i, a header [has AdamW
        state, AdamW step], and exp_avg / exp_avg_sq per parameter: the
        order both ends agree on."""
        params = list(self.lora[(k, i)].values())
        out = [p.data for p in params]
        st = [self.opts[(k, i)].state.get(p) for p in params]
        if all(st):
            out.append(torch.tensor([1.0, float(st[0]["step"])],
                                    dtype=torch.float64))
            for s in st:
                out += [s["exp_avg"], s["exp_avg_sq"]]
        else:
            out.append(torch.zeros(2, dtype=torch.float64))
        return out

    def _recv_base(self, i, src):
        self._build_layer(i)
        for p in self.layers[i].parameters():
            dist.recv(p.data, src)

    def _recv_lora(self, k, i, src):
        self._new_lora(k, i, fresh=False)
        params = list(self.lora[(k, i)].values())
        for p in params:
            dist.recv(p.data, src)
        head = torch.zeros(2, dtype=torch.float64)
        dist.recv(head, src)
        if head[0] == 0:
            return
        opt = self.opts[(k, i)]
        for p in params:
            a, b = torch.empty_like(p.data), torch.empty_like(p.data)
            dist.recv(a, src)
            dist.recv(b, src)
            opt.state[p] = {"step": torch.tensor(float(head[1])),
                            "exp_avg": a, "exp_avg_sq": b}

    # -- checkpoints (per adapter, per layer) ----------------------------------
    def save(self, directory):
        """Writes this rank's layers of every adapter under
        directory/adapter-<k>/; every rank calls it at the same step."""
        for (k, i), params in self.lora.items():
            d = os.path.join(directory, "adapter-%d" % k)
            os.makedirs(d, exist_ok=True)
            opt = self.opts[(k, i)]
            torch.save({"step": self.step_no,
                        "params": {n: p.data for n, p in params.items()},
                        "opt": opt.state_dict()},
                       os.path.join(d, "layer-%d.pt" % i))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, "step.json.%d" % self.rank)
        with open(tmp, "w") as f:
            json.dump({"step": self.step_no, "adapters": self.adapters}, f)
        os.replace(tmp, os.path.join(directory, "step.json"))
        for k, ls in self.losses.items():
            d = os.path.join(directory, "adapter-%d" % k)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "losses-rank%d.json" % self.rank),
                      "w") as f:
                json.dump({"step": self.step_no, "losses": ls}, f)

    def load(self, directory):
        """Loads this rank's layers of every adapter (placement-independent).
        Raises FileNotFoundError / ValueError naming the file."""
        meta = os.path.join(directory, "step.json")
        with open(meta) as f:
            step = int(json.load(f)["step"])
        steps = {step}
        for (k, i), params in self.lora.items():
            path = os.path.join(directory, "adapter-%d" % k,
                                "layer-%d.pt" % i)
            ck = torch.load(path)
            for n, p in params.items():
                if n not in ck["params"]:
                    raise ValueError("%s: no parameter %s" % (path, n))
                p.data.copy_(ck["params"][n])
            self.opts[(k, i)].load_state_dict(ck["opt"])
            steps.add(ck["step"])
        if len(steps) > 1:
            raise ValueError("%s: layers from different steps %s" %
                             (directory, sorted(steps)))
        self.step_no = step
        return step
