"""Agreement on when to switch synchronisation mode.

Directives reach the ranks at different times (each rank polls its agent),
or not at all. At every synchronisation point (every step in synchronous
mode, every outer sync in local SGD) the ranks all-gather a small control
vector; every rank then runs ``decide`` on the same gathered values, so
every rank takes the same decision at the same collective:

* the newest directive D is applied when every rank has it and the agreed
  step (the highest step of any rank) has reached ``apply_at_step``;
* a directive some rank still lacks after ``timeout_s`` (measured by the
  ranks that have it; the largest age counts) is abandoned by all ranks;
  a rank that receives it later ignores it, and training goes on in the
  current mode;
* a newer directive supersedes an older one that was not applied yet;
* a directive to a local mode waits until the agreed step reaches
  ``min_local_step`` (post-local SGD: the first steps of training, where
  the loss falls fastest and the learning rate peaks, stay synchronous;
  local SGD started there costs loss that later steps do not recover).
  Waiting is not a timeout: every rank has the directive.

Pure Python; the clock is injectable for tests.
"""

import time

CONTROL_LEN = 3  # [directive id, age of it in s, step]


class Decision:
    __slots__ = ("kind", "directive", "directive_id", "agreed_step",
                 "missing_ranks")

    def __init__(self, kind, directive=None, directive_id=0, agreed_step=0,
                 missing_ranks=()):
        self.kind = kind  # "apply" | "abandon"
        self.directive = directive
        self.directive_id = directive_id
        self.agreed_step = agreed_step
        self.missing_ranks = list(missing_ranks)

    def __repr__(self):
        return "Decision(%s, id=%d, step=%d, missing=%s)" % (
            self.kind, self.directive_id, self.agreed_step, self.missing_ranks)


class SwitchAgreement:
    def __init__(self, timeout_s=30.0, clock=time.monotonic,
                 min_local_step=0):
        self.timeout_s = timeout_s
        self.min_local_step = min_local_step
        self.clock = clock
        self.latest = None
        self.received_at = 0.0
        self.applied_id = 0
        self.abandoned_upto = 0

    def _done_upto(self):
        return max(self.applied_id, self.abandoned_upto)

    def offer(self, directive):
        """A directive from the agent (any order, duplicates allowed)."""
        if directive.directive_id <= self._done_upto():
            return False
        if self.latest is None or directive.directive_id > self.latest.directive_id:
            self.latest = directive
            self.received_at = self.clock()
            return True
        return False

    def control(self, step):
        """This rank's control vector for the next all-gather."""
        if self.latest is None or self.latest.directive_id <= self._done_upto():
            return [0.0, 0.0, float(step)]
        return [float(self.latest.directive_id),
                max(0.0, self.clock() - self.received_at), float(step)]

    def decide(self, gathered):
        """gathered: one control vector per rank, in rank order. Returns a
        Decision or None; identical on every rank for identical input."""
        ids = [int(g[0]) for g in gathered]
        ages = [float(g[1]) for g in gathered]
        agreed_step = int(max(g[2] for g in gathered))
        top = max(ids)
        if top <= self._done_upto():
            return None
        if min(ids) >= top:
            d = self.latest
            if d is None or d.directive_id != top:  # cannot happen: ids agree
                return None
            if agreed_step < d.apply_at_step:
                return None
            if d.mode != "sync" and agreed_step < self.min_local_step:
                return None
            self.applied_id = top
            return Decision("apply", d, top, agreed_step)
        if max(ages) >= self.timeout_s:
            self.abandoned_upto = top
            missing = [r for r, i in enumerate(ids) if i < top]
            return Decision("abandon", None, top, agreed_step, missing)
        return None
