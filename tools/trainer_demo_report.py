"""The measurement arithmetic and the summary of tools/trainer_demo.py
(docs/policies.md): held-out loss at a token count and time to a target
loss, interpolated between snapshots; the per-run lines and the last line
of the local-sgd demo."""

import math


def loss_at_tokens(evals, tokens):
    """Held-out loss at `tokens`, linear between the evals around it."""
    prev = None
    for t, tok, loss, _ in evals:
        if tok >= tokens:
            if prev is None or tok == prev[1]:
                return loss
            f = (tokens - prev[1]) / (tok - prev[1])
            return prev[2] + f * (loss - prev[2])
        prev = (t, tok, loss)
    return evals[-1][2]


def time_to_loss(evals, target):
    """Training time at which the held-out loss first reaches `target`,
    linear between the snapshot above it and the one at or below it (the
    snapshots are seconds apart; taking the later one would round every
    run up by up to a period)."""
    prev = None
    for t, tok, loss, _ in evals:
        if loss <= target:
            if prev is None or prev[1] == loss:
                return t
            f = (prev[1] - target) / (prev[1] - loss)
            return prev[0] + f * (t - prev[0])
        prev = (t, loss)
    return float("nan")


def summary(name, res, job, quiet=False):
    r0 = res[0]
    steps = [r["steps"] for r in res]
    overhead = max(r["report_overhead_s"] / max(r["step_wall_s"], 1e-9)
                   for r in res)
    sync = job.get("sync", {})
    sent = [d for d in sync.get("decisions", []) if d.get("sent")]
    if quiet:
        return overhead, len(sent)
    print("%-10s wall %6.1f s, steps per rank %s, outer syncs %d, final loss "
          "%.4f at %d tokens, switches %s, controller decisions sent %d%s, "
          "report overhead %.3f%% of step time (%d reports sent, %d dropped)"
          "%s" %
          (name, r0["wall_s"], steps, r0["outer_syncs"], r0["evals"][-1][2],
           r0["evals"][-1][1], [(s[0], s[1], s[2]) for s in r0["switches"]],
           len(sent), trigger_text(sent), 100 * overhead,
           sum(r["reports_sent"] for r in res),
           sum(r["reports_dropped"] for r in res), host_bound_text(res)),
          flush=True)
    return overhead, len(sent)


def trigger_text(sent):
    """What made the controller switch: the faults its first sent
    decision names (a straggler confirmed from NCCL telemetry), or the
    step reports' stragglers."""
    if not sent:
        return ""
    faults = sent[0].get("fault_ids", [])
    if faults:
        return " (trigger: fault %s)" % ",".join(faults)
    return " (trigger: step-time stragglers)"


def host_bound_text(res):
    """With emulated device time: the share of each rank's steps whose
    real CPU work took longer than the device time (then the CPU, not the
    emulated accelerator, set that step's pace)."""
    if not any(r.get("device_steps") for r in res):
        return ""
    return ", host-bound steps %s" % " ".join(
        "%.0f%%" % (100.0 * r.get("host_bound", 0) / max(1, r["device_steps"]))
        for r in res)


def rate_after_switch(evals):
    """Tokens per second of training time from the first snapshot taken in
    a local mode to the last one (nan when the run never switched)."""
    local = [e for e in evals if e[3] != "sync"]
    if len(local) < 2 or local[-1][0] <= local[0][0]:
        return float("nan")
    return (local[-1][1] - local[0][1]) / (local[-1][0] - local[0][0])


def sync_rate(evals):
    """Tokens per second of a synchronous run (first to last snapshot)."""
    if len(evals) < 2 or evals[-1][0] <= evals[0][0]:
        return float("nan")
    return (evals[-1][1] - evals[0][1]) / (evals[-1][0] - evals[0][0])


def speedup_bound(warm_frac, r):
    """Time-to-target ratio when a fraction `warm_frac` of the tokens to
    the target is trained synchronously in both runs and the rest `r`
    times as fast (equal tokens to the target on both sides)."""
    return 1.0 / (warm_frac + (1.0 - warm_frac) / r)


def best(times):
    """The smallest time; nan only when no run reached the target."""
    ok = [t for t in times if not math.isnan(t)]
    return min(ok) if ok else float("nan")


def median_step(res):
    """Median wall time of rank 0's steps (the first 5 left out)."""
    walls = sorted(res[0]["step_walls"][5:])
    return walls[len(walls) // 2] if walls else float("nan")


def pair_ratios(sync_t, auto_t):
    """sync / auto time to target of each pair (run k of each side)."""
    return [s / a if a > 0 else float("nan")
            for s, a in zip(sync_t, auto_t)]


def report(args, results):
    def of(kind):
        return [(n, r, j) for n, (k, r, j) in results.items() if k == kind]
    _, healthy_switches = summary("healthy", *of("healthy")[0][1:],
                                  quiet=True)
    budget = args.budget_steps * args.world * args.batch * args.block
    syncs, autos = of("slow-sync"), of("slow-auto")
    # The target: slow-sync's held-out loss at 90 % of the budget
    # (synchronous training is deterministic: every slow-sync run has the
    # same curve over tokens; the mean guards against a machine where not).
    target = sum(loss_at_tokens(r[0]["evals"], 0.9 * budget)
                 for _, r, _ in syncs) / len(syncs)
    s_final = sum(loss_at_tokens(r[0]["evals"], budget)
                  for _, r, _ in syncs) / len(syncs)
    h_final = loss_at_tokens(of("healthy")[0][1][0]["evals"], budget)
    print("target loss %.4f (slow-sync at 90%% of the budget); held-out loss "
          "at %d tokens: healthy %.4f, slow-sync %.4f" %
          (target, budget, h_final, s_final))
    sync_t = [time_to_loss(r[0]["evals"], target) for _, r, _ in syncs]
    auto_t = [time_to_loss(r[0]["evals"], target) for _, r, _ in autos]
    gaps = []
    for (name, r, _), t in zip(autos, auto_t):
        a_final = loss_at_tokens(r[0]["evals"], budget)
        gaps.append((a_final - s_final) / s_final)
        print("%s: loss at %d tokens %.4f (%+.2f%% vs slow-sync), target "
              "reached after %.1f s" % (name, budget, a_final,
                                        100 * gaps[-1], t))
    healthy_res = of("healthy")[0][1]
    healthy_t = time_to_loss(healthy_res[0]["evals"], target)
    healthy_step = median_step(healthy_res)
    for (name, r, _), t in zip(syncs, sync_t):
        # What the half-speed rank costs synchronous training: the same
        # curve over tokens, so the time ratio to the healthy run is the
        # slowdown (both also as median step times).
        print("%s: target reached after %.1f s; the half-speed rank costs "
              "synchronous training %.2fx (time to target vs healthy %.1f s; "
              "median step %.1f ms vs %.1f ms)" %
              (name, t, t / healthy_t, healthy_t, 1000 * median_step(r),
               1000 * healthy_step))
    overheads = [summary(n, r, j, quiet=True)[0]
                 for n, (_, r, j) in results.items()]
    print("final loss at equal tokens: slow-auto %+.2f%% vs slow-sync (mean "
          "of %d); step-report overhead max %.3f%% of step time" %
          (100 * sum(gaps) / len(gaps), len(gaps), 100 * max(overheads)))
    first = autos[0]
    for d in first[2].get("sync", {}).get("decisions", []):
        print("%s decision: %s -> %s: %s [%s]" %
              (first[0], d.get("fromMode", d.get("from_mode")),
               d.get("toMode", d.get("to_mode")), d.get("reason"),
               d.get("evidence", {}).get("text")))
    switches = first[1][0]["switches"]
    switch_step = switches[0][0] if switches else -1
    # Throughput after the switch against synchronous training with the
    # slow rank, and what it allows with the synchronous warm-up (equal
    # tokens to the target): the cap on the speedup of this setting.
    s_rate = sum(sync_rate(r[0]["evals"]) for _, r, _ in syncs) / len(syncs)
    caps = []
    for name, r, _ in autos:
        x = rate_after_switch(r[0]["evals"]) / s_rate
        sw = r[0]["switches"][0][0] if r[0]["switches"] else -1
        warm = (min(1.0, sw * args.world * args.batch * args.block /
                    (0.9 * budget)) if sw > 0 else float("nan"))
        caps.append("%s r=%.2f, switch at step %d (%.0f%% of the tokens to "
                    "the target synchronous) -> at most %.2fx" %
                    (name, x, sw, 100 * warm, speedup_bound(warm, x)))
    print("throughput after the switch vs slow-sync (r) and the speedup it "
          "allows: %s" % "; ".join(caps))
    # The fastest of the repeats on each side, as timeit does: other
    # processes on a shared machine only ever add time (one slow-auto run
    # here took 113 s for the work another did in 34 s), and the ABBA
    # order gives both sides the same chances.
    print("time to target: slow-sync %s (mean %.1f), slow-auto %s (mean "
          "%.1f); sync_s / switched_s below are the fastest of each" %
          (" ".join("%.1f" % t for t in sync_t), sum(sync_t) / len(sync_t),
           " ".join("%.1f" % t for t in auto_t), sum(auto_t) / len(auto_t)))
    # Per ABBA pair (slow-sync-k, slow-auto-k ran next to each other):
    # the ratio of one pair is what a drifting load disturbs least.
    pairs = pair_ratios(sync_t, auto_t)
    print("speedup per pair: %s" % " ".join("%.2f" % x for x in pairs))
    sync_s = best(sync_t)
    switched_s = best(auto_t)
    print("local-sgd: sync_s=%.1f switched_s=%.1f speedup=%.2f switch_step=%d "
          "healthy_switches=%d" % (sync_s, switched_s, sync_s / switched_s,
                                   switch_step, healthy_switches))
