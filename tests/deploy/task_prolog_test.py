"""deploy/slurm/pitstop-task-prolog.sh run as Slurm runs it (sh, the task's
environment in, "export" lines out), without Slurm: which variables a task
gets with the profiler and the tuner installed side by side, with a user's
own choices, with the opt-out, and with neither library installed.
(slurm_test.py runs it under a real slurmd, where Slurm is installed.)
"""
import os
import shutil
import subprocess
import sys
import tempfile


def prolog_exports(script, env):
    base = {"PATH": "/usr/bin:/bin"}
    base.update(env)
    r = subprocess.run(["sh", script], capture_output=True, text=True,
                       env=base, timeout=30)
    assert r.returncode == 0, (r.returncode, r.stderr)
    out = {}
    for line in r.stdout.splitlines():
        assert line.startswith("export "), line
        k, v = line[len("export "):].split("=", 1)
        out[k] = v
    return out


def main():
    src = os.environ.get("PITSTOP_SOURCE_DIR") or os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(src, "deploy/slurm/pitstop-task-prolog.sh")
    tmp = tempfile.mkdtemp(prefix="pitstop-prolog-")
    try:
        lib = os.path.join(tmp, "lib")
        os.makedirs(lib)
        prof = os.path.join(lib, "libnccl-profiler-pitstop.so")
        tuner = os.path.join(lib, "libnccl-tuner-pitstop.so")
        for f in (prof, tuner):
            open(f, "w").close()
        both = {"PITSTOP_PROFILER_LIB": prof, "SLURM_JOB_ID": "42"}

        got = prolog_exports(script, both)
        assert got == {"NCCL_PROFILER_PLUGIN": prof, "NCCL_TUNER_PLUGIN": tuner,
                       "PITSTOP_JOB_ID": "42"}, got

        # A tuner the user chose wins; so does the opt-out.
        got = prolog_exports(script, dict(both, NCCL_TUNER_PLUGIN="mine"))
        assert "NCCL_TUNER_PLUGIN" not in got, got
        got = prolog_exports(script, dict(both, PITSTOP_TUNER="0"))
        assert "NCCL_TUNER_PLUGIN" not in got, got
        assert got["NCCL_PROFILER_PLUGIN"] == prof, got

        # PITSTOP_TUNER_LIB names a tuner elsewhere.
        other = os.path.join(tmp, "elsewhere.so")
        open(other, "w").close()
        got = prolog_exports(script, dict(both, PITSTOP_TUNER_LIB=other))
        assert got["NCCL_TUNER_PLUGIN"] == other, got

        # Profiler without the tuner beside it: no tuner variable.
        os.unlink(tuner)
        got = prolog_exports(script, both)
        assert "NCCL_TUNER_PLUGIN" not in got, got
        assert got["NCCL_PROFILER_PLUGIN"] == prof, got

        # Nothing installed (the default paths do not exist in this test
        # unless the Debian package is installed): no NCCL variables.
        got = prolog_exports(script, {"PITSTOP_PROFILER_LIB": "/nonexistent.so"})
        installed = any(os.path.exists(p) for p in (
            "/usr/lib/x86_64-linux-gnu/libnccl-profiler-pitstop.so",
            "/usr/lib/aarch64-linux-gnu/libnccl-profiler-pitstop.so",
            "/usr/local/lib/x86_64-linux-gnu/libnccl-profiler-pitstop.so",
            "/usr/lib/libnccl-profiler-pitstop.so"))
        if not installed:
            assert got == {}, got
        print("task prolog: profiler, tuner, user's choice, opt-out: ok",
              flush=True)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
