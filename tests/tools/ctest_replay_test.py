"""tools/ctest-replay.py (issue #30): replays a run's test times through
ctest's scheduling. The cases are the 14-test project of `sleep`s that
ctest 3.25 ran with -j2 (docs/contributing.md, "CI"): twelve 1 s tests, a
3 s RUN_SERIAL test declared seventh and a 4 s test declared last took
13.05 s; with COST 4 on the long one, 11.07 s; with COST 10 on the serial
one too, 11.05 s. Run by ctest with Debian's python3."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get(
    "PITSTOP_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
REPLAY = os.path.join(SOURCE, "tools", "ctest-replay.py")


class CtestReplayTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def run_replay(self, tests, times, *args):
        """tests: [(name, {property: value})] in declaration order."""
        show = {"tests": [{"name": n, "properties": [
            {"name": k, "value": v} for k, v in p.items()]}
            for n, p in tests]}
        tests_file = os.path.join(self.dir.name, "tests.json")
        with open(tests_file, "w") as f:
            json.dump(show, f)
        junit = os.path.join(self.dir.name, "junit.xml")
        with open(junit, "w") as f:
            f.write("<testsuite>%s</testsuite>" % "".join(
                '<testcase name="%s" time="%s"/>' % (n, t)
                for n, t in times.items()))
        r = subprocess.run([sys.executable, REPLAY, junit, "--tests",
                            tests_file, *args],
                           capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        clean = [l for l in lines if l.startswith("clean clone")]
        timed = [l for l in lines if l.startswith("with ctest")]
        self.assertEqual((len(clean), len(timed)), (1, 1), r.stdout)
        return (float(clean[0].split()[-2]), float(timed[0].split()[-2]),
                lines[0])

    def sleeps(self, serial_props, long_props):
        tests = [("a%d" % i, {}) for i in range(1, 7)]
        tests.append(("ser", dict(serial_props, RUN_SERIAL=True)))
        tests += [("a%d" % i, {}) for i in range(7, 13)]
        tests.append(("long", long_props))
        times = {n: 1.0 for n, _ in tests}
        times.update(ser=3.0, long=4.0)
        return tests, times

    def test_serial_waits_for_the_end_and_a_late_long_test_leaves_a_tail(self):
        clean, timed, head = self.run_replay(*self.sleeps({}, {}))
        self.assertEqual(clean, 13)
        self.assertEqual(timed, 11)
        self.assertIn("14 tests (0 not in", head)
        self.assertIn("3 s RUN_SERIAL", head)

    def test_declared_cost_starts_the_long_test_first(self):
        clean, _, _ = self.run_replay(*self.sleeps({}, {"COST": 4}))
        self.assertEqual(clean, 11)

    def test_costliest_serial_test_runs_first_and_alone(self):
        clean, _, _ = self.run_replay(*self.sleeps({"COST": 10},
                                                   {"COST": 4}))
        self.assertEqual(clean, 11)

    def test_tests_sharing_a_lock_never_overlap(self):
        tests = [("x", {"RESOURCE_LOCK": ["db"]}),
                 ("y", {"RESOURCE_LOCK": ["db", "net"]}), ("z", {})]
        times = {"x": 5, "y": 5, "z": 5}
        clean, _, _ = self.run_replay(tests, times)
        self.assertEqual(clean, 10)
        tests[1] = ("y", {"RESOURCE_LOCK": ["net"]})
        clean, _, _ = self.run_replay(tests, times)
        self.assertEqual(clean, 10)  # x and y, then z: 2 slots, 3 tests
        clean, _, _ = self.run_replay(tests, times, "-j", "3")
        self.assertEqual(clean, 5)

    def test_test_missing_from_the_junit_file_is_counted(self):
        tests = [("x", {}), ("gone", {})]
        _, _, head = self.run_replay(tests, {"x": 2})
        self.assertIn("2 tests (1 not in", head)

    def test_bad_slot_count_is_refused_naming_the_flag(self):
        junit = os.path.join(self.dir.name, "j.xml")
        with open(junit, "w") as f:
            f.write("<testsuite/>")
        r = subprocess.run([sys.executable, REPLAY, junit, "-j", "0"],
                           capture_output=True, text=True, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("-j must be at least 1", r.stderr)


if __name__ == "__main__":
    unittest.main()
