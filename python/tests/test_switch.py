import itertools

from pitstop.client import Directive
from pitstop.torch.switch import SwitchAgreement


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def run(world, arrivals, directive, steps=40, timeout_s=5.0, step_s=0.1,
        clock=None):
    """Simulates `world` ranks that meet at a sync point every step.
    arrivals[r] = step at which rank r receives the directive (None: never).
    Returns per-rank list of (step, decision)."""
    clock = clock or FakeClock()
    ranks = [SwitchAgreement(timeout_s, clock) for _ in range(world)]
    log = [[] for _ in range(world)]
    for step in range(1, steps + 1):
        clock.t += step_s
        for r in range(world):
            if arrivals[r] is not None and arrivals[r] == step:
                ranks[r].offer(directive)
        gathered = [a.control(step) for a in ranks]
        for r in range(world):
            d = ranks[r].decide(gathered)
            if d is not None:
                log[r].append((step, d))
    return ranks, log


def test_every_ordering_of_arrival_switches_at_one_agreed_step():
    d = Directive(7, "timed", period_ms=1000, apply_at_step=10, reason="test")
    arrival_steps = [2, 9, 15]
    for perm in itertools.permutations(arrival_steps):
        ranks, log = run(3, list(perm), d)
        decisions = [[(s, x.kind, x.agreed_step) for s, x in l] for l in log]
        assert all(len(l) == 1 for l in decisions), (perm, decisions)
        assert decisions[0] == decisions[1] == decisions[2], (perm, decisions)
        step, kind, agreed = decisions[0][0]
        assert kind == "apply"
        # Applied at the first sync point where everyone has it, not before
        # apply_at_step.
        assert step == max(max(perm), d.apply_at_step)
        assert agreed == step


def test_all_arrive_before_apply_step():
    d = Directive(3, "local_sgd", period_steps=4, apply_at_step=20)
    for perm in itertools.permutations([1, 5, 12, 12]):
        _, log = run(4, list(perm), d)
        steps = {l[0][0] for l in log}
        assert steps == {20}


def test_rank_that_never_receives_times_out_safely():
    d = Directive(9, "timed", period_ms=1000, apply_at_step=0)
    clock = FakeClock()
    # Rank 2 never gets it; the others get it at step 3; 0.1 s per step,
    # 5 s timeout: abandoned at the sync point after 5 s of age.
    ranks, log = run(3, [3, 3, None], d, steps=100, clock=clock)
    for r in range(3):
        assert len(log[r]) == 1
        step, dec = log[r][0]
        assert dec.kind == "abandon"
        assert dec.missing_ranks == [2]
        assert step == log[0][0][0]
    assert 3 + 49 <= log[0][0][0] <= 3 + 51
    # Delivered late to rank 2: ignored, nothing applies.
    assert not ranks[2].offer(d)
    gathered = [a.control(101) for a in ranks]
    assert all(a.decide(gathered) is None for a in ranks)
    # A newer directive still works afterwards.
    d2 = Directive(10, "timed", period_ms=1000)
    for a in ranks:
        a.offer(d2)
    gathered = [a.control(102) for a in ranks]
    out = [a.decide(gathered) for a in ranks]
    assert all(o.kind == "apply" and o.directive_id == 10 for o in out)


def test_newer_directive_supersedes_pending_one():
    clock = FakeClock()
    a, b = SwitchAgreement(30, clock), SwitchAgreement(30, clock)
    d1 = Directive(1, "timed", period_ms=500)
    d2 = Directive(2, "sync")
    a.offer(d1)
    a.offer(d2)
    b.offer(d1)
    g = [a.control(5), b.control(5)]
    assert a.decide(g) is None and b.decide(g) is None  # b lacks 2
    b.offer(d2)
    b.offer(d1)  # an old duplicate arriving late changes nothing
    g = [a.control(6), b.control(6)]
    da, db = a.decide(g), b.decide(g)
    assert da.kind == db.kind == "apply"
    assert da.directive.mode == db.directive.mode == "sync"
    # Applied once: the same directive again decides nothing.
    a.offer(d2)
    assert a.decide([a.control(7), b.control(7)]) is None


def test_local_mode_waits_for_min_local_step_sync_does_not():
    clock = FakeClock()
    d = Directive(4, "timed", period_ms=500, apply_at_step=3)
    ranks = [SwitchAgreement(1.0, clock, min_local_step=25) for _ in range(3)]
    applied = []
    for step in range(1, 41):
        clock.t += 0.5  # 20 s in all: far past the 1 s timeout
        if step == 2:
            for a in ranks:
                a.offer(d)
        gathered = [a.control(step) for a in ranks]
        out = [a.decide(gathered) for a in ranks]
        assert len({repr(x) for x in out}) == 1  # identical on every rank
        if out[0] is not None:
            applied.append((step, out[0].kind))
    # Every rank has it: no abandonment however long it waits.
    assert applied == [(25, "apply")]
    # Back to sync is never held back.
    back = Directive(5, "sync", apply_at_step=0)
    ranks = [SwitchAgreement(1.0, clock, min_local_step=25) for _ in range(2)]
    for a in ranks:
        a.offer(back)
    gathered = [a.control(3) for a in ranks]
    assert ranks[0].decide(gathered).kind == "apply"
