#!/usr/bin/python3
"""One rank of the error checks (test_errors.py). Mode (argv[1]):

  args     bad arguments raise RuntimeError naming the backend, the op and
           the argument, on the calling thread, and leave the group usable.
  killed   TIMEOUT_S (argv[2]): the last rank SIGKILLs itself in the middle
           of a run of all-reduces; the others must raise, not hang.
  hung     the same with SIGSTOP: the last rank stays alive but silent.
  norank0  only rank 1 of 2 is started: it must give up waiting for rank
           0's unique id at the timeout with a clear error.
  teardown rank 0 destroys the group while its all-reduce still waits for
           rank 1, having dropped its own references to the tensor: the
           worker then frees the tensor's Python object (it needs the
           interpreter lock) while the destructor waits for the worker.

Prints "PASS name", "FAIL name: why", "RAISED <seconds> <message>".
"""

import os
import signal
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import pitstop.torch.nccl_backend as nb

RANK = int(os.environ["RANK"])
N = int(os.environ["WORLD_SIZE"])
failed = []


def init(timeout_s):
    dist.init_process_group(nb.BACKEND, init_method="file://" +
                            os.environ["PITSTOP_TEST_STORE"], rank=RANK,
                            world_size=N, timeout=timedelta(seconds=timeout_s))


def expect_error(name, fn, *fragments):
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        missing = [f for f in fragments if f not in msg]
        if missing:
            failed.append(name)
            print("FAIL %s: message lacks %s: %s" % (name, missing, msg))
        else:
            print("PASS %s: %s" % (name, msg.splitlines()[0]))
        return
    except Exception:
        failed.append(name)
        print("FAIL %s: not a RuntimeError: %s" % (name, traceback.format_exc()))
        return
    failed.append(name)
    print("FAIL %s: no error raised" % name)


def args_mode():
    init(60)
    t = torch.ones(3)
    R = dist.ReduceOp
    for dtype in (torch.bool, torch.int16):
        expect_error("dtype %s" % dtype,
                     lambda: dist.all_reduce(torch.ones(3, dtype=dtype)),
                     "pitstop_nccl allreduce", "tensors[0] has dtype",
                     "which NCCL does not carry")
    for name, op in (("BAND", R.BAND), ("BOR", R.BOR), ("BXOR", R.BXOR)):
        expect_error("op %s" % name,
                     lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32),
                                             op=op),
                     "pitstop_nccl allreduce", "bitwise ReduceOp")
    expect_error("op PREMUL_SUM",
                 lambda: dist.all_reduce(
                     t, op=dist._make_nccl_premul_sum(2.0)),
                 "pitstop_nccl allreduce", "PREMUL_SUM is not supported")
    expect_error("bitwise reduce_scatter",
                 lambda: dist.reduce_scatter_tensor(
                     torch.zeros(3, dtype=torch.int64),
                     torch.ones(3 * N, dtype=torch.int64), op=R.BXOR),
                 "pitstop_nccl _reduce_scatter_base", "bitwise")
    expect_error("non-contiguous",
                 lambda: dist.all_reduce(torch.ones(4, 6).t()),
                 "pitstop_nccl allreduce", "tensors[0] is not contiguous")
    expect_error("allgather list length",
                 lambda: dist.all_gather([torch.zeros(3)], t),
                 "pitstop_nccl allgather", "output_tensors[0] must hold one "
                 "tensor per rank (%d), got 1" % N)
    expect_error("allgather element count",
                 lambda: dist.all_gather(
                     [torch.zeros(3)] * (N - 1) + [torch.zeros(4)], t),
                 "pitstop_nccl allgather", "output_tensors[0][%d] has 4 "
                 "elements, expected 3 (input_tensors[0]'s)" % (N - 1))
    expect_error("_allgather_base size",
                 lambda: dist.all_gather_into_tensor(torch.zeros(5), t),
                 "pitstop_nccl _allgather_base",
                 "output has 5 elements, expected %d x 3" % N)
    expect_error("alltoall_base splits",
                 lambda: dist.all_to_all_single(
                     torch.zeros(4), torch.ones(4), [1] * N, [2] * N),
                 "pitstop_nccl alltoall_base", "split sizes add up to")
    expect_error("broadcast root",
                 lambda: dist.broadcast(t, src=N + 3),
                 "pitstop_nccl broadcast", "root rank %d is not a rank" %
                 (N + 3))
    expect_error("send to itself", lambda: dist.send(t, dst=RANK),
                 "pitstop_nccl send", "cannot send to itself")
    expect_error("recv from any source", lambda: dist.recv(t),
                 "pitstop_nccl recv", "a source rank is required")
    # None of that reached NCCL: the group still works.
    x = torch.arange(5, dtype=torch.float64) + RANK
    dist.all_reduce(x)
    want = torch.arange(5, dtype=torch.float64) * N + N * (N - 1) / 2
    if torch.equal(x, want):
        print("PASS group usable after argument errors")
    else:
        failed.append("usable")
        print("FAIL group usable after argument errors: %s" % x)
    dist.destroy_process_group()


def peer_fault_mode(fault, timeout_s):
    init(timeout_s)
    x = torch.ones(1000)
    last_ok = time.monotonic()
    i = 0
    try:
        while True:
            if RANK == N - 1 and i == 5:
                print("SIG%s myself" % fault.upper(), flush=True)
                os.kill(os.getpid(), signal.SIGKILL if fault == "killed"
                        else signal.SIGSTOP)
            dist.all_reduce(x)
            last_ok = time.monotonic()
            i += 1
    except RuntimeError as e:
        print("RAISED %.2f %s" % (time.monotonic() - last_ok, e), flush=True)
    # The NCCL call under the failed op returns too: at once for a dead
    # peer; for a hung one at the CPU NCCL backend's own timeout, which the
    # backend set to the group's (its default is 300 s).
    pg = dist.distributed_c10d._get_default_group()
    raised = time.monotonic()
    while pg.nccl_call_in_flight and time.monotonic() - raised < 60:
        time.sleep(0.05)
    print("RETURNED %.2f in_flight=%s" % (time.monotonic() - raised,
                                         pg.nccl_call_in_flight), flush=True)
    # Later ops fail at once (the group is in error), even barrier.
    start = time.monotonic()
    expect_error("after the fault", lambda: dist.barrier(),
                 "pitstop_nccl barrier failed on rank %d of %d" % (RANK, N),
                 "not run")
    print("FAST %.3f" % (time.monotonic() - start), flush=True)
    dist.destroy_process_group()  # must not hang either


def norank0_mode(timeout_s):
    start = time.monotonic()
    try:
        init(timeout_s)
    except RuntimeError as e:
        print("RAISED %.2f %s" % (time.monotonic() - start, e), flush=True)
        return
    failed.append("norank0")
    print("FAIL init returned without rank 0")


def teardown_mode():
    init(60)
    if RANK == 0:
        t = torch.ones(1000)
        w = dist.all_reduce(t, async_op=True)
        del t, w  # the queued op holds the last references
        dist.destroy_process_group()
        print("PASS destroyed with an op in flight", flush=True)
    else:
        time.sleep(2)
        t = torch.ones(1000)
        dist.all_reduce(t)
        assert t[0].item() == N, t
        dist.destroy_process_group()
        print("PASS peer done", flush=True)


def main():
    mode = sys.argv[1]
    if mode == "args":
        args_mode()
    elif mode in ("killed", "hung"):
        peer_fault_mode(mode, float(sys.argv[2]))
    elif mode == "norank0":
        norank0_mode(float(sys.argv[2]))
    elif mode == "teardown":
        teardown_mode()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
