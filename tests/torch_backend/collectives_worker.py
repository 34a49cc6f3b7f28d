#!/usr/bin/python3
"""One rank of the collectives check (test_collectives.py).

The default group is "pitstop_nccl"; a second group over the same ranks is
gloo. Every collective runs on the same random tensors through both, and
the results are compared bit for bit (see order_free: only bfloat16
reductions of 3+ ranks are compared within rounding tolerance). Where gloo
lacks the collective or the dtype (reduce_scatter, _allgather_base,
all_to_all, AVG, bfloat16) the reference is built from gloo's all_gather,
all_reduce or all_to_all_single of the same inputs. Prints "PASS name" or
"FAIL name: why" per check, then "SUMMARY passed failed exact inexact".
"""

import os
import sys
import tempfile
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import pitstop.torch.nccl_backend as nb

RANK = int(os.environ["RANK"])
N = int(os.environ["WORLD_SIZE"])
R = dist.ReduceOp
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8, torch.int32, torch.int64]
OPS = {"SUM": R.SUM, "PRODUCT": R.PRODUCT, "MIN": R.MIN, "MAX": R.MAX,
       "AVG": R.AVG}
# Relative tolerance of one rounding step, times the number of steps.
RTOL = {torch.float32: 2e-6, torch.float64: 1e-14, torch.float16: 2e-3,
        torch.bfloat16: 1.6e-2}
SIZES = [1, 1031]  # 1031: prime, not a multiple of any group size

stats = {"pass": 0, "fail": 0, "exact": 0, "inexact": 0}
GLOO = None
CURRENT = [""]  # the running check's name


def rand(seed, shape, dtype, op="SUM"):
    """The same tensor on every run; `seed` includes the rank."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        if op == "PRODUCT":
            x = 0.5 + torch.rand(shape, generator=g)  # no overflow, no zeros
        else:
            x = torch.randn(shape, generator=g) * 4
        return x.to(dtype)
    if op == "PRODUCT":
        lo, hi = (0, 4) if dtype == torch.uint8 else (-3, 4)
    elif dtype in (torch.int8, torch.uint8):
        lo, hi = (0, 30) if dtype == torch.uint8 else (-30, 30)
    else:
        lo, hi = -100000, 100000
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def order_free(dtype, op):
    """Whether the reference must match bit for bit. gloo's ring and the CPU
    NCCL backend's (gloo's ring too) add the ranks' values in the same
    order, so gloo's results match exactly; only bfloat16, which gloo lacks,
    is reduced here in rank order, and with 3+ ranks that order differs
    from the ring's (a+b is one rounding either way)."""
    return dtype != torch.bfloat16 or op in ("MIN", "MAX") or N == 2


def compare(ours, ref, dtype, exact):
    if ours.dtype != ref.dtype or ours.shape != ref.shape:
        raise AssertionError("shape/dtype %s %s vs reference %s %s" %
                             (ours.shape, ours.dtype, ref.shape, ref.dtype))
    if torch.equal(ours, ref):
        stats["exact"] += 1
        return
    if exact:
        diff = (ours != ref).nonzero()[:5].flatten().tolist()
        raise AssertionError("not bit-identical at %s: ours %s, reference %s"
                             % (diff, ours.flatten()[diff].tolist(),
                                ref.flatten()[diff].tolist()))
    stats["inexact"] += 1
    o, r = ours.double(), ref.double()
    print("INEXACT %s: max |diff| %.3g" % (CURRENT[0], (o - r).abs().max()))
    tol = RTOL[dtype] * N * (r.abs() + 1)
    bad = ((o - r).abs() > tol).nonzero()[:5].flatten().tolist()
    if bad:
        raise AssertionError("beyond rounding tolerance at %s: ours %s, "
                             "reference %s" % (bad, o.flatten()[bad].tolist(),
                                               r.flatten()[bad].tolist()))


def check(name, fn):
    CURRENT[0] = name
    try:
        fn()
        stats["pass"] += 1
        print("PASS", name, flush=True)
    except Exception:
        stats["fail"] += 1
        print("FAIL %s: %s" % (name, traceback.format_exc()), flush=True)


def gathered(t):
    """Every rank's `t` through gloo (bfloat16 travels as bytes)."""
    if t.dtype == torch.bfloat16:
        return [x.view(torch.bfloat16)
                for x in gathered(t.view(torch.uint8))]
    parts = [torch.empty_like(t) for _ in range(N)]
    dist.all_gather(parts, t, group=GLOO)
    return parts


def local_reduce(parts, op):
    """Rank order, rounding to the dtype after each step (as NCCL does)."""
    acc = parts[0].clone()
    for p in parts[1:]:
        wide = acc.dtype in (torch.float16, torch.bfloat16)
        a, b = (acc.float(), p.float()) if wide else (acc, p)
        if op in ("SUM", "AVG"):
            c = a + b
        elif op == "PRODUCT":
            c = a * b
        elif op == "MIN":
            c = torch.minimum(a, b)
        else:
            c = torch.maximum(a, b)
        acc = c.to(acc.dtype)
    return acc


def gloo_reduce(t, op):
    """gloo's all_reduce of `t` under `op` (AVG: SUM divided as NCCL does;
    bfloat16: gathered and reduced here)."""
    if t.dtype == torch.bfloat16:
        ref = local_reduce(gathered(t), op)
    else:
        ref = t.clone()
        dist.all_reduce(ref, op=R.SUM if op == "AVG" else OPS[op], group=GLOO)
    if op != "AVG":
        return ref
    if ref.dtype.is_floating_point:
        return (ref.float() / N).to(ref.dtype) if ref.element_size() == 2 \
            else ref / N
    return torch.div(ref, N, rounding_mode="trunc")


def check_allreduce():
    seed = 0
    for dtype in DTYPES:
        for op in OPS:
            for size in SIZES:
                seed += 1

                def run(dtype=dtype, op=op, size=size, seed=seed):
                    x = rand(seed * 100 + RANK, (size,), dtype, op)
                    ours = x.clone()
                    dist.all_reduce(ours, op=OPS[op])
                    compare(ours, gloo_reduce(x, op), dtype,
                            order_free(dtype, op))
                check("allreduce %s %s n=%d" % (op, str(dtype)[6:], size), run)


def check_broadcast_reduce():
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.float16):
        for root in sorted({0, N - 1}):
            def bcast(dtype=dtype, root=root):
                x = rand(7000 + RANK, (3, 37), dtype)
                ours = x.clone()
                dist.broadcast(ours, src=root)
                compare(ours, gathered(x)[root], dtype, True)
            check("broadcast %s root=%d" % (str(dtype)[6:], root), bcast)

            def reduce(dtype=dtype, root=root):
                x = rand(7100 + RANK, (1031,), dtype)
                ours = x.clone()
                dist.reduce(ours, dst=root, op=R.SUM)
                ref = gloo_reduce(x, "SUM")  # on every rank: gloo's too
                if RANK == root:  # only the root's result is defined
                    compare(ours, ref, dtype, order_free(dtype, "SUM"))
            check("reduce SUM %s root=%d" % (str(dtype)[6:], root), reduce)

    def reduce_max():
        x = rand(7200 + RANK, (513,), torch.int32)
        ours = x.clone()
        dist.reduce(ours, dst=0, op=R.MAX)
        ref = gloo_reduce(x, "MAX")
        if RANK == 0:
            compare(ours, ref, torch.int32, True)
    check("reduce MAX int32 root=0", reduce_max)


def check_allgather():
    for dtype in (torch.float32, torch.int64, torch.float16, torch.uint8):
        def listed(dtype=dtype):
            x = rand(8000 + RANK, (5, 7), dtype)
            outs = [torch.full_like(x, 0) for _ in range(N)]
            dist.all_gather(outs, x)
            for o, r in zip(outs, gathered(x)):
                compare(o, r, dtype, True)
        check("allgather %s" % str(dtype)[6:], listed)

        def base(dtype=dtype):
            x = rand(8100 + RANK, (13,), dtype)
            out = torch.zeros(N * 13, dtype=dtype)
            dist.all_gather_into_tensor(out, x)  # _allgather_base
            compare(out, torch.cat(gathered(x)), dtype, True)
        check("_allgather_base %s" % str(dtype)[6:], base)

    def coalesced():
        xs = [rand(8200 + RANK, (4,), torch.int32),
              rand(8300 + RANK, (2, 3), torch.int32)]
        outs = [[torch.zeros_like(x) for _ in range(N)] for x in xs]
        dist.all_gather_coalesced(outs, xs)
        for x, out in zip(xs, outs):
            for o, r in zip(out, gathered(x)):
                compare(o, r, x.dtype, True)
    check("allgather_coalesced int32 x2", coalesced)

    def objects():
        objs = [None] * N
        dist.all_gather_object(objs, {"rank": RANK, "s": "x" * RANK})
        assert objs == [{"rank": r, "s": "x" * r} for r in range(N)], objs
    check("all_gather_object (uint8+int64)", objects)

    def broadcast_objects():
        objs = [{"from": RANK}, "x" * (RANK + 1)]
        dist.broadcast_object_list(objs, src=N - 1)
        assert objs == [{"from": N - 1}, "x" * N], objs
    check("broadcast_object_list", broadcast_objects)


def check_reduce_scatter():
    for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
        for op in ("SUM", "MAX", "AVG"):
            def listed(dtype=dtype, op=op):
                ins = [rand(9000 + 10 * RANK + j, (257,), dtype, op)
                       for j in range(N)]
                out = torch.zeros(257, dtype=dtype)
                dist.reduce_scatter(out, ins, op=OPS[op])
                ref = gloo_reduce(torch.cat(ins), op).chunk(N)[RANK]
                compare(out, ref, dtype, order_free(dtype, op))
            check("reduce_scatter %s %s" % (op, str(dtype)[6:]), listed)

            def base(dtype=dtype, op=op):
                x = rand(9100 + RANK, (N * 129,), dtype, op)
                out = torch.zeros(129, dtype=dtype)
                dist.reduce_scatter_tensor(out, x, op=OPS[op])
                ref = gloo_reduce(x, op).chunk(N)[RANK]
                compare(out, ref, dtype, order_free(dtype, op))
            check("_reduce_scatter_base %s %s" % (op, str(dtype)[6:]), base)


def check_alltoall():
    for dtype in (torch.float32, torch.int32):
        def equal_split(dtype=dtype):
            x = rand(10000 + RANK, (N * 3, 5), dtype)
            ours, ref = torch.zeros_like(x), torch.zeros_like(x)
            dist.all_to_all_single(ours, x)
            dist.all_to_all_single(ref, x, group=GLOO)
            compare(ours, ref, dtype, True)
        check("alltoall_base equal splits %s" % str(dtype)[6:], equal_split)

        def uneven(dtype=dtype):
            # rank i sends (i + j) % 3 rows to rank j (0 rows included)
            ins = [(RANK + j) % 3 for j in range(N)]
            outs = [(j + RANK) % 3 for j in range(N)]
            x = rand(10100 + RANK, (sum(ins), 4), dtype)
            ours = torch.zeros(sum(outs), 4, dtype=dtype)
            ref = torch.zeros_like(ours)
            dist.all_to_all_single(ours, x, outs, ins)
            dist.all_to_all_single(ref, x, outs, ins, group=GLOO)
            compare(ours, ref, dtype, True)
        check("alltoall_base uneven splits %s" % str(dtype)[6:], uneven)

    def listed():
        ins = [rand(10200 + 10 * RANK + j, (j + 1, 3), torch.float64)
               for j in range(N)]  # to rank j: j+1 rows
        outs = [torch.zeros(RANK + 1, 3, dtype=torch.float64)
                for _ in range(N)]
        dist.all_to_all(outs, ins)
        # reference: every rank's inputs through gloo, picked here
        for src in range(N):
            theirs = [rand(10200 + 10 * src + j, (j + 1, 3), torch.float64)
                      for j in range(N)]
            flat = gathered(torch.cat([t.flatten() for t in ins]))[src]
            assert torch.equal(flat, torch.cat([t.flatten() for t in theirs]))
            compare(outs[src], theirs[RANK], torch.float64, True)
    check("alltoall list (unequal sizes) float64", listed)


def check_gather_scatter():
    for root in sorted({0, N - 1}):
        def gather(root=root):
            x = rand(11000 + RANK, (6,), torch.float32)
            outs = [torch.zeros(6) for _ in range(N)] if RANK == root else None
            dist.gather(x, outs, dst=root)
            if RANK == root:
                for o, r in zip(outs, gathered(x)):
                    compare(o, r, torch.float32, True)
            else:
                gathered(x)  # keep gloo's collectives matched
        check("gather root=%d" % root, gather)

        def scatter(root=root):
            ins = ([rand(11100 + j, (4, 2), torch.int64) for j in range(N)]
                   if RANK == root else None)
            ours = torch.zeros(4, 2, dtype=torch.int64)
            ref = torch.zeros_like(ours)
            dist.scatter(ours, ins, src=root)
            dist.scatter(ref, [t.clone() for t in ins] if ins else None,
                         src=root, group=GLOO)
            compare(ours, ref, torch.int64, True)
            compare(ours, rand(11100 + RANK, (4, 2), torch.int64),
                    torch.int64, True)
        check("scatter root=%d" % root, scatter)


def check_p2p():
    right, left = (RANK + 1) % N, (RANK - 1) % N

    def batched():  # batch_isend_irecv: one NCCL group (coalescing)
        x = rand(12000 + RANK, (100,), torch.float32)
        got = torch.zeros(100)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, right),
                                       dist.P2POp(dist.irecv, got, left)])
        for r in reqs:
            r.wait()
        compare(got, rand(12000 + left, (100,), torch.float32),
                torch.float32, True)
    check("batch_isend_irecv ring", batched)

    def ordered():  # plain send/recv: even ranks send first
        x = rand(12100 + RANK, (7, 3), torch.int32)
        got = torch.zeros(7, 3, dtype=torch.int32)
        if RANK % 2 == 0:
            dist.send(x, dst=right)
            dist.recv(got, src=left)
        else:
            dist.recv(got, src=left)
            dist.send(x, dst=right)
        compare(got, rand(12100 + left, (7, 3), torch.int32), torch.int32,
                True)
    if N % 2 == 0:
        check("send/recv ring", ordered)

    def pair():
        x = rand(12200, (50,), torch.bfloat16)
        if RANK == 0:
            dist.isend(x, dst=N - 1).wait()
        elif RANK == N - 1:
            got = torch.zeros(50, dtype=torch.bfloat16)
            dist.irecv(got, src=0).wait()
            compare(got, x, torch.bfloat16, True)
    check("isend/irecv 0 -> last bfloat16", pair)


def check_coalesced_and_async(tmp):
    def allreduce_coalesced():
        xs = [rand(13000 + RANK, (33,), torch.float32),
              rand(13100 + RANK, (4, 4), torch.float32),
              rand(13200 + RANK, (9,), torch.float32)]
        ours = [x.clone() for x in xs]
        dist.all_reduce_coalesced(ours, op=R.MAX)
        for o, x in zip(ours, xs):
            compare(o, gloo_reduce(x, "MAX"), x.dtype, True)
    check("allreduce_coalesced float32 x3", allreduce_coalesced)

    def coalescing_manager():  # ops of mixed dtypes in one NCCL group
        a = rand(13250 + RANK, (17,), torch.float64)
        b = rand(13260 + RANK, (5,), torch.int64)
        c = rand(13270 + RANK, (8,), torch.bfloat16)
        oa, ob, oc = a.clone(), b.clone(), c.clone()
        reqs = []
        with dist.distributed_c10d._coalescing_manager(None, reqs):
            reqs.append(dist.all_reduce(oa, async_op=True))
            reqs.append(dist.all_reduce(ob, op=R.MIN, async_op=True))
            reqs.append(dist.broadcast(oc, src=N - 1, async_op=True))
        for r in reqs:
            r.wait()
        compare(oa, gloo_reduce(a, "SUM"), a.dtype, order_free(a.dtype, "SUM"))
        compare(ob, gloo_reduce(b, "MIN"), b.dtype, True)
        compare(oc, gathered(c)[N - 1], c.dtype, True)
    check("coalescing manager: allreduce f64 + MIN i64 + broadcast bf16",
          coalescing_manager)

    def broadcast_coalesced():  # what DDP uses to sync parameters
        xs = [rand(13300 + RANK, (s,), torch.float32) for s in (10, 300, 7)]
        ours = [x.clone() for x in xs]
        dist._broadcast_coalesced(dist.group.WORLD, ours, 256, 0)
        for o, x in zip(ours, xs):
            compare(o, gathered(x)[0], torch.float32, True)
    check("_broadcast_coalesced (DDP parameter sync)", broadcast_coalesced)

    def async_in_order():
        xs = [rand(13400 + 10 * RANK + i, (64,), torch.float32)
              for i in range(8)]
        ours = [x.clone() for x in xs]
        works = [dist.all_reduce(o, async_op=True) for o in ours]
        futs = [w.get_future().then(lambda f: f.value()[0] * 2) for w in works]
        for w, f, o, x in zip(works, futs, ours, xs):
            w.wait()
            assert w.is_completed()
            ref = gloo_reduce(x, "SUM")
            compare(o, ref, torch.float32, order_free(torch.float32, "SUM"))
            compare(f.wait(), ref * 2, torch.float32,
                    order_free(torch.float32, "SUM"))
    check("async allreduce x8, futures", async_in_order)

    def barrier():
        # Rank 0 writes a file only just before entering the barrier; no
        # rank may leave it before that file exists.
        flag = os.path.join(tmp, "barrier-flag")
        if RANK == 0:
            import time
            time.sleep(0.3)
            open(flag, "w").close()
        dist.barrier()
        assert os.path.exists(flag), "left the barrier before rank 0 came"
    check("barrier", barrier)

    def empty():
        x = torch.zeros(0)
        dist.all_reduce(x)
        assert x.numel() == 0
    check("allreduce of an empty tensor", empty)


def main():
    global GLOO
    dist.init_process_group(nb.BACKEND,
                            init_method="file://" +
                            os.environ["PITSTOP_TEST_STORE"],
                            rank=RANK, world_size=N,
                            timeout=timedelta(seconds=120))
    GLOO = dist.new_group(backend="gloo")
    assert dist.get_backend() == "pitstop_nccl", dist.get_backend()
    tmp = os.path.dirname(os.environ["PITSTOP_TEST_STORE"])
    check_allreduce()
    check_broadcast_reduce()
    check_allgather()
    check_reduce_scatter()
    check_alltoall()
    check_gather_scatter()
    check_p2p()
    check_coalesced_and_async(tmp)
    dist.barrier(group=GLOO)
    dist.destroy_process_group()
    print("SUMMARY passed=%(pass)d failed=%(fail)d exact=%(exact)d "
          "inexact=%(inexact)d" % stats, flush=True)
    sys.exit(1 if stats["fail"] else 0)


if __name__ == "__main__":
    main()
