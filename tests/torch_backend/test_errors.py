"""Errors and teardown of the pitstop_nccl backend, in real processes
(errors_worker.py): bad arguments, a killed peer, a hung peer and a
missing rank 0 each raise RuntimeError naming the op, the rank and the
reason; destroying a group with an op in flight completes. None of them
hangs (ranks.run kills everything and fails at its own deadline if a rank
is still running)."""

import os
import re
import signal

import ranks

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "errors_worker.py")


def returned(log):
    """Seconds from the error until the NCCL call under it returned."""
    m = re.search(r"^RETURNED (\S+) in_flight=(\S+)$", log, re.M)
    assert m and m.group(2) == "False", "NCCL call never returned:\n" + log
    return float(m.group(1))


def raised(log):
    m = re.search(r"^RAISED (\S+) (.*)$", log, re.M)
    assert m, "no error raised:\n" + log[-4000:]
    return float(m.group(1)), m.group(2)


def test_argument_errors_name_op_and_argument(tmp_path):
    for rank, (code, log) in enumerate(ranks.run(WORKER, 2, str(tmp_path),
                                                 args=["args"], timeout=240)):
        assert code == 0 and "FAIL" not in log, "rank %d:\n%s" % (rank, log)
        assert log.count("PASS") == 16, log


def test_killed_peer_raises_in_the_survivors(tmp_path):
    timeout_s = 60
    results = ranks.run(WORKER, 3, str(tmp_path), args=["killed", timeout_s],
                        timeout=timeout_s + 120)
    assert results[2][0] == -signal.SIGKILL, results[2][1]
    for rank in (0, 1):
        code, log = results[rank]
        assert code == 0 and "FAIL" not in log, "rank %d:\n%s" % (rank, log)
        seconds, msg = raised(log)
        assert ("pitstop_nccl allreduce failed on rank %d of 3" % rank) in msg
        # A dead peer closed its connections: NCCL's remote error, found
        # long before the group's timeout.
        assert "ncclRemoteError" in msg or "ncclSystemError" in msg \
            or "not run" in msg, msg
        assert seconds < timeout_s, (seconds, msg)
        back = returned(log)
        print("rank %d raised after %.2f s (NCCL call returned %.2f s later): "
              "%s" % (rank, seconds, back, msg))


def test_hung_peer_times_out_in_the_survivors(tmp_path):
    timeout_s = 5
    procs, logs = ranks.start(WORKER, 3, str(tmp_path),
                              args=["hung", timeout_s])
    try:
        codes = ranks.wait(procs[:2], logs[:2], timeout=120)
    finally:
        procs[2].kill()  # stopped: SIGKILL still ends it
        procs[2].wait()
    timed_out = 0
    for rank in (0, 1):
        with open(logs[rank]) as f:
            log = f.read()
        assert codes[rank] == 0 and "FAIL" not in log, log
        seconds, msg = raised(log)
        assert ("pitstop_nccl allreduce failed on rank %d of 3" % rank) in msg
        # Whichever fires first: the backend's watchdog or the CPU NCCL
        # backend's own timeout (the same 5 s, started a moment later).
        # A survivor whose timer starts a moment after the other's may
        # instead see that survivor leave: also a prompt, named error. At
        # least one of the two must have timed out on the hung rank.
        if "did not finish within 5s" in msg or \
                "timed out waiting 5000ms" in msg.lower() or "not run" in msg:
            timed_out += 1
        else:
            other = 1 - rank
            assert ("connection closed by rank %d" % other) in msg, msg
        # The group's timeout reached the CPU backend: its blocked call
        # returns about when the watchdog fired, not 300 s later.
        back = returned(log)
        assert back < 3 * timeout_s, back
        print("rank %d raised after %.2f s, NCCL call returned %.2f s later: "
              "%s" % (rank, seconds, back, msg))
    assert timed_out >= 1, "neither survivor timed out on the hung rank"


def test_missing_rank0_fails_at_the_timeout(tmp_path):
    procs, logs = ranks.start(WORKER, 2, str(tmp_path), args=["norank0", 3],
                              only=[1])
    (code,) = ranks.wait(procs, logs, timeout=120)
    with open(logs[0]) as f:
        log = f.read()
    assert code == 0, log
    seconds, msg = raised(log)
    assert "pitstop_nccl: rank 1 of 2 waited 3000 ms for rank 0's NCCL " \
        "unique id" in msg, msg
    print("raised after %.2f s: %s" % (seconds, msg))


def test_destroy_with_an_op_in_flight(tmp_path):
    # Deadlocked before the destructor released the interpreter lock while
    # waiting for the worker (which frees the op's tensor).
    for rank, (code, log) in enumerate(ranks.run(WORKER, 2, str(tmp_path),
                                                 args=["teardown"],
                                                 timeout=120)):
        assert code == 0 and "PASS" in log, "rank %d:\n%s" % (rank, log)
