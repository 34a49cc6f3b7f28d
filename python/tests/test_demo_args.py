"""The demos (tools/lora_demo.py, tools/trainer_demo.py) refuse arguments
that cannot run before they start any daemon or rank (a bad --slow-rank
once ran all four runs and then blamed pitstop for not moving; --world 0
ended in a traceback)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
import lora_demo  # noqa: E402
import trainer_demo  # noqa: E402


def start(monkeypatch, module, entry, command, *argv):
    """Runs module.main() on `command argv` with the demo's entry point
    replaced; returns the arguments it would have started with."""
    started = []
    monkeypatch.setattr(module, entry, started.append)
    monkeypatch.setattr(sys, "argv", ["demo.py", command, *argv])
    module.main()
    return started


def run_main(monkeypatch, *argv):
    return start(monkeypatch, lora_demo, "multi_lora", "multi-lora", *argv)


@pytest.mark.parametrize("argv,message", [
    (["--slow-rank", "9"], "--slow-rank 9: not a rank of --world 4"),
    (["--adapters", "0"], "--adapters must be >= 1"),
    (["--persist-s", "0"], "--persist-s must be >= 1"),
    (["--world", "1", "--slow-rank", "0"], "--world must be >= 2"),
    (["--world", "13"], "more stages than the 12 layers"),
    (["--slow-from", "60"], "--slow-from 60: not a step of --steps 60"),
])
def test_bad_arguments_stop_before_anything_starts(monkeypatch, capsys, argv,
                                                   message):
    with pytest.raises(SystemExit) as e:
        run_main(monkeypatch, *argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_defaults_and_a_valid_choice_start_the_runs(monkeypatch):
    assert len(run_main(monkeypatch)) == 1
    started = run_main(monkeypatch, "--world", "3", "--slow-rank", "2",
                       "--adapters", "3")
    assert started[0].world == 3 and started[0].slow_rank == 2


def run_local_sgd(monkeypatch, *argv):
    return start(monkeypatch, trainer_demo, "local_sgd", "local-sgd", *argv)


@pytest.mark.parametrize("argv,message", [
    (["--world", "0"], "--world 0: at least 2 ranks"),
    (["--calibrate-steps", "3"], "--calibrate-steps 3: at least 10"),
    (["--runs", "bogus"], "a comma-separated subset of"),
    (["--runs", ""], "a comma-separated subset of"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--heads", "3"], "--embd 64 is not a multiple of --heads 3"),
])
def test_local_sgd_bad_arguments_stop_first(monkeypatch, capsys, argv,
                                            message):
    with pytest.raises(SystemExit) as e:
        run_local_sgd(monkeypatch, *argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_local_sgd_defaults_start_the_runs(monkeypatch):
    assert len(run_local_sgd(monkeypatch)) == 1
    assert len(run_local_sgd(monkeypatch, "--runs", "healthy,slow-sync")) == 1
