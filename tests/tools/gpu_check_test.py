#!/usr/bin/env python3
"""tools/gpu-check.sh where there is no GPU, and its checks failing.

Runs the real script: the library-alone build (every other package
disabled), the job script's dry run, the stats path over the CPU NCCL
backend, then the "no GPU" stop with exit code 4. Then shows that its
checks fail loudly on real runs where the library did not work (NCCL never
loads it, NCCL does not pick the preloaded one as its profiler), that the
library-alone configure guard bites on the full build, and that the
report's side-by-side arithmetic gives the known overhead.

Environment (ctest sets it): PITSTOP_SOURCE_DIR, PITSTOP_BINARY_DIR.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = os.environ.get("PITSTOP_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("PITSTOP_BINARY_DIR", os.path.join(SRC, "build"))
SCRIPT = os.path.join(SRC, "tools", "gpu-check.sh")
REPORT = os.path.join(SRC, "tools", "gpu_check", "report.py")
PY = "/usr/bin/python3"
RANK = os.path.join(BIN, "tests", "nccl", "cpu_nccl_rank")
CPU_NCCL = os.path.join(BIN, "src", "nccl", "cpu", "lib", "libnccl.so.2")


def has_gpu():
    r = subprocess.run([PY, "-c", "import torch; print(torch.cuda.is_available())"],
                       capture_output=True, text=True)
    return r.stdout.strip() == "True"


class GpuCheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="pst-gpucheck-")
        cls.out = os.path.join(cls.tmp, "out")
        args = [SCRIPT, "--out", cls.out, "--cpu-build", BIN]
        if has_gpu():
            args.append("--no-gpu")  # a test stops where the GPU part starts
        env = dict(os.environ, PYTHON=PY)
        cls.run_ = subprocess.run(args, capture_output=True, text=True,
                                  env=env, timeout=900)
        cls.text = cls.run_.stdout + cls.run_.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_reaches_the_no_gpu_point_with_exit_code_4(self):
        self.assertEqual(self.run_.returncode, 4, self.text)
        self.assertIn("NO GPU:", self.text)
        self.assertIn("Everything before the GPU part passed; exit 4.", self.text)
        with open(os.path.join(self.out, "result.md")) as f:
            self.assertIn("not run:", f.read())
        with open(os.path.join(self.out, "result.json")) as f:
            self.assertIsNone(json.load(f)["passed"])

    def test_library_alone_built_without_any_package(self):
        self.assertIn("building libnccl-profiler-pitstop.so alone", self.text)
        line = [l for l in self.text.splitlines() if "NEEDED:" in l]
        self.assertEqual(len(line), 1, self.text)
        needed = line[0].split("NEEDED:")[1].strip(" )").split()
        self.assertEqual(sorted(needed), sorted(
            ["libstdc++.so.6", "libgcc_s.so.1", "libc.so.6",
             "ld-linux-x86-64.so.2"]))
        with open(os.path.join(self.out, "build.log")) as f:
            log = f.read()
        # Configured with every package disabled, and looked for none of
        # them: CMake lists each switch as unused.
        self.assertIn("-DPITSTOP_PLUGIN_ONLY=ON", log)
        unused = log.split("Manually-specified variables were not used")[1]
        for p in ("absl", "Protobuf", "gRPC", "spdlog", "yaml-cpp"):
            self.assertIn(f"CMAKE_DISABLE_FIND_PACKAGE_{p}\n", unused)

    def test_library_alone_tree_sits_beside_the_default_tree(self):
        # ccache keys on paths relative to the build folder: only a tree at
        # the same place relative to the sources as the default tree reuses
        # its objects (from a folder under TMPDIR all 28 compiles missed).
        # The tree is removed on exit.
        with open(os.path.join(self.out, "build.log")) as f:
            cmd = f.readline().split()
        self.assertEqual(cmd[:2], ["+", "cmake"], cmd)
        tree = cmd[cmd.index("-B") + 1]
        self.assertEqual(os.path.dirname(tree),
                         os.path.dirname(os.path.abspath(BIN)), tree)
        self.assertTrue(os.path.basename(tree).startswith("build-gpu-check."),
                        tree)
        self.assertFalse(os.path.exists(tree), tree)

    def test_job_script_dry_run_trained(self):
        with open(os.path.join(self.out, "dry-run", "job.json")) as f:
            job = json.load(f)
        self.assertEqual(job["backend"], "gloo")
        self.assertEqual(len(job["step_ms"]), job["steps"])
        self.assertGreater(job["collectives_per_step"]["all_reduce (loss, 4 B)"], 0)
        self.assertLess(job["loss_last"], job["loss_first"])

    @unittest.skipUnless(os.access(RANK, os.X_OK),
                         f"SKIPPED: {RANK} not built (cpu_nccl_rank)")
    def test_stats_path_checked_over_the_cpu_backend_both_ways(self):
        for mode, load_mode in (("profiler", "profiler"), ("preload", "both")):
            files = glob.glob(os.path.join(self.out, "cpu-nccl", mode, "stats-*.json"))
            self.assertEqual(len(files), 2, self.text)  # two ranks
            for path in files:
                with open(path) as f:
                    s = json.load(f)
                self.assertEqual(s["load_mode"], load_mode)
                self.assertEqual(s["profiler"]["init_calls"], 1)
                self.assertEqual(s["ops_per_function"]["AllReduce"], 7)
        self.assertIn("cpu-nccl/preload: 2 stats file(s)", self.text)
        self.assertIn("AllReduce: 16 interposer call(s), 14 op event(s)", self.text)


def run_ranks(tmp, env_extra, stats_dir):
    """Two ranks of cpu_nccl_rank `collectives` with env_extra; returns rcs."""
    store = tempfile.mkdtemp(dir=tmp)
    env = dict(os.environ, PITSTOP_CPU_NCCL_STORE_DIR=store)
    code = ("import ctypes,sys\nb=ctypes.create_string_buffer(128)\n"
            "rc=ctypes.CDLL(sys.argv[1]).ncclGetUniqueId(b)\n"
            "sys.exit(rc) if rc else print(b.raw.hex())")
    uid = subprocess.run([PY, "-c", code, CPU_NCCL], env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    env.update(env_extra)
    env.update(PITSTOP_STATS_FILE=os.path.join(stats_dir, "stats-%p.json"),
               PITSTOP_AGENT_SOCKET=os.path.join(tmp, "no-agent.sock"))
    for k in [k for k, v in env.items() if v is None]:
        del env[k]
    procs = []
    for r in (0, 1):
        with open(os.path.join(tmp, f"rank{r}.log"), "w") as log:
            procs.append(subprocess.Popen([RANK, "collectives", str(r), "2", uid],
                                          env=env, stdout=log, stderr=log))
    return [p.wait(timeout=120) for p in procs]


def report_stats(mode, d):
    return subprocess.run([PY, REPORT, "stats", "--mode", mode, d],
                          capture_output=True, text=True)


@unittest.skipUnless(os.access(RANK, os.X_OK),
                     f"SKIPPED: {RANK} not built (cpu_nccl_rank)")
class ChecksFailLoudlyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pst-gpucheck-fail-")
        self.lib = os.path.join(BIN, "plugin", "libnccl-profiler-pitstop.so")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_plugin_that_nccl_never_loads_fails_the_check(self):
        d = os.path.join(self.tmp, "profiler")
        os.makedirs(d)
        wrong = os.path.join(self.tmp, "libnccl-profiler-missing.so")
        self.assertEqual(run_ranks(self.tmp, {"NCCL_PROFILER_PLUGIN": wrong,
                                              "LD_PRELOAD": None}, d), [0, 0])
        r = report_stats("profiler", d)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("NCCL did not load the library as its profiler plugin",
                      r.stderr)

    def test_preloaded_library_nccl_does_not_profile_with_fails_the_check(self):
        # The user's NCCL_PROFILER_PLUGIN=none wins over the preload's own
        # setting: the interposer sees every call, NCCL never calls init.
        d = os.path.join(self.tmp, "preload")
        os.makedirs(d)
        self.assertEqual(run_ranks(self.tmp, {"NCCL_PROFILER_PLUGIN": "none",
                                              "LD_PRELOAD": self.lib}, d), [0, 0])
        files = glob.glob(os.path.join(d, "stats-*.json"))
        self.assertEqual(len(files), 2)
        with open(files[0]) as f:
            s = json.load(f)
        self.assertEqual(s["profiler"]["init_calls"], 0)
        self.assertGreater(s["interposer"]["calls_total"], 0)
        r = report_stats("preload", d)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no profiler init call", r.stderr)
        self.assertIn("zero profiler events", r.stderr)
        # Read as a profiler-mode run, the interposer calls are wrong too.
        self.assertIn("interposer calls without LD_PRELOAD",
                      report_stats("profiler", d).stderr)

    def test_report_compares_the_ways_side_by_side(self):
        # Real stats of both ways, step times chosen so the ratios are known.
        runs = os.path.join(self.tmp, "runs")
        stats = {}
        for mode, env in (("profiler", {"NCCL_PROFILER_PLUGIN": self.lib,
                                         "LD_PRELOAD": None}),
                          ("preload", {"NCCL_PROFILER_PLUGIN": None,
                                       "LD_PRELOAD": self.lib})):
            stats[mode] = os.path.join(self.tmp, "stats-" + mode)
            os.makedirs(stats[mode])
            self.assertEqual(run_ranks(self.tmp, env, stats[mode]), [0, 0])
        steps = {"baseline": [10.0, 10.2, 10.1], "profiler": [10.02, 10.2, 10.12],
                 "preload": [10.05, 10.3, 10.15]}
        for mode, per_rep in steps.items():
            for rep, ms in enumerate(per_rep, 1):
                d = os.path.join(runs, f"rep{rep}-{mode}")
                os.makedirs(d)
                mapped = ["/x/libnccl.so.2"] + ([self.lib] if mode != "baseline" else [])
                job = {"median_step_ms": ms, "step_ms": [ms], "total_steps": 1,
                       "steps": 1, "warmup": 0, "nccl_libraries_mapped": mapped}
                with open(os.path.join(d, "job.json"), "w") as f:
                    json.dump(job, f)
                if mode != "baseline":
                    src = sorted(glob.glob(os.path.join(stats[mode], "stats-*.json")))[0]
                    shutil.copy(src, d)
        out = os.path.join(self.tmp, "result")
        r = subprocess.run([PY, REPORT, "final", "--runs", runs, "--out", out],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(out, "result.json")) as f:
            res = json.load(f)
        self.assertTrue(res["passed"])
        o = res["overhead_vs_baseline"]
        # Ratios per repetition: profiler 1.002, 1.0, 1.00198; preload
        # 1.005, 1.0098, 1.00495 (medians 0.198% and 0.5%).
        self.assertAlmostEqual(o["profiler"]["median_pct"],
                               (10.12 / 10.1 - 1) * 100, places=9)
        self.assertAlmostEqual(o["profiler"]["min_pct"], 0.0, places=6)
        self.assertTrue(o["profiler"]["target_met"])
        self.assertAlmostEqual(o["preload"]["median_pct"],
                               (10.05 / 10.0 - 1) * 100, places=9)
        self.assertAlmostEqual(o["preload"]["max_pct"],
                               (10.3 / 10.2 - 1) * 100, places=9)
        self.assertFalse(o["preload"]["target_met"])
        self.assertEqual(o["preload"]["repetitions"], 3)
        with open(os.path.join(out, "result.md")) as f:
            md = f.read()
        self.assertIn("NOT met", md)
        self.assertIn("Result: PASS", md)
        # A repetition whose job died fails the whole check.
        os.remove(os.path.join(runs, "rep2-preload", "job.json"))
        r = subprocess.run([PY, REPORT, "final", "--runs", runs, "--out", out],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("rep2-preload: the job failed or timed out", r.stderr)


class ConfigureGuardTest(unittest.TestCase):
    def test_full_build_with_packages_disabled_fails_to_configure(self):
        # The guard gpu-check.sh relies on: with the packages disabled, a
        # configure that looks for one of them is an error.
        tmp = tempfile.mkdtemp(prefix="pst-gpucheck-cfg-")
        try:
            r = subprocess.run(
                ["cmake", "-S", SRC, "-B", tmp, "-DPITSTOP_PLUGIN_ONLY=OFF",
                 "-DCMAKE_DISABLE_FIND_PACKAGE_absl=ON",
                 "-DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=ON",
                 "-DCMAKE_DISABLE_FIND_PACKAGE_gRPC=ON"],
                capture_output=True, text=True, timeout=300)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("CMAKE_DISABLE_FIND_PACKAGE_absl is enabled", r.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
