"""tools/lora_demo.py refuses arguments that cannot run before it starts
any daemon or rank (a bad --slow-rank once ran all four runs and then
blamed pitstop for not moving)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools"))
import lora_demo  # noqa: E402


def run_main(monkeypatch, *argv):
    started = []
    monkeypatch.setattr(lora_demo, "multi_lora", started.append)
    monkeypatch.setattr(sys, "argv", ["lora_demo.py", "multi-lora", *argv])
    lora_demo.main()
    return started


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
