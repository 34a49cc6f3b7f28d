"""Every collective of the pitstop_nccl backend against gloo on the same
random tensors, in 2, 3 and 4 real processes (collectives_worker.py)."""

import os
import re

import pytest

import ranks

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "collectives_worker.py")
# Checks each rank must report (a silently skipped one fails the test).
EXPECTED_PREFIXES = [
    "allreduce SUM", "allreduce PRODUCT", "allreduce MIN", "allreduce MAX",
    "allreduce AVG", "broadcast", "reduce SUM", "reduce MAX", "allgather ",
    "_allgather_base", "allgather_coalesced", "all_gather_object", "broadcast_object_list",
    "reduce_scatter ", "_reduce_scatter_base", "alltoall_base equal",
    "alltoall_base uneven", "alltoall list", "gather root", "scatter root",
    "batch_isend_irecv", "isend/irecv", "allreduce_coalesced",
    "coalescing manager",
    "_broadcast_coalesced", "async allreduce", "barrier",
    "allreduce of an empty tensor"]


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_collectives_match_gloo(world_size, tmp_path):
    results = ranks.run(WORKER, world_size, str(tmp_path), timeout=400)
    for rank, (code, log) in enumerate(results):
        fails = [l for l in log.splitlines() if l.startswith("FAIL")]
        assert code == 0 and not fails, "rank %d exit %s:\n%s" % (
            rank, code, log[-8000:])
        passed = [l[5:] for l in log.splitlines() if l.startswith("PASS ")]
        for prefix in EXPECTED_PREFIXES:
            assert any(p.startswith(prefix) for p in passed), (
                "rank %d never ran %r:\n%s" % (rank, prefix, log[-3000:]))
        if world_size % 2 == 0:
            assert "send/recv ring" in passed
        # 8 dtypes x 5 ops x 2 sizes of all-reduce alone
        assert sum(p.startswith("allreduce ") for p in passed) >= 80
        summary = re.search(r"SUMMARY .*", log).group(0)
        print("world %d rank %d: %d checks, %s" % (world_size, rank,
                                                   len(passed), summary))
