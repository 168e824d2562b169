# The same cases as bench/dtensor_overhead.cpp through PyTorch's own Python DTensor, same
# libtorch, same machine. Launched by vescale-run (RANK/WORLD_SIZE/MASTER_* are set).
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor


def mean_call_us(f, iters):
    t0 = time.perf_counter()
    for _ in range(iters):
        f()
    return (time.perf_counter() - t0) / iters * 1e6


def paired_us(plain, dt, iters, reps):
    """Plain and DTensor calls in alternating blocks; medians of plain, dtensor, and their difference."""
    for _ in range(50):
        plain()
        dt()
    p, d, o = [], [], []
    for _ in range(reps):
        p.append(mean_call_us(plain, iters))
        d.append(mean_call_us(dt, iters))
        o.append(d[-1] - p[-1])
    return statistics.median(p), statistics.median(d), statistics.median(o)


def main():
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    mesh = DeviceMesh("cpu", list(range(world)))
    R, S = Replicate(), Shard
    cases = [
        ("add 64x64 (Replicate)", lambda x: x[0] + x[1], [(64, 64), (64, 64)], [[R], [R]]),
        ("add 64x64 (Shard(0))", lambda x: x[0] + x[1], [(64, 64), (64, 64)], [[S(0)], [S(0)]]),
        ("mm 256x256 (Replicate)", lambda x: torch.mm(x[0], x[1]), [(256, 256), (256, 256)], [[R], [R]]),
        ("mm 256x256 (Shard(0) x Replicate)", lambda x: torch.mm(x[0], x[1]), [(256, 256), (256, 256)], [[S(0)], [R]]),
        ("linear 64x256 -> 256 (column-parallel)", lambda x: torch.nn.functional.linear(x[0], x[1], x[2]),
         [(64, 256), (256, 256), (256,)], [[R], [S(0)], [S(0)]]),
    ]
    iters, reps = 500, 15
    for name, op, shapes, placements in cases:
        dts = [distribute_tensor(torch.randn(s), mesh, p) for s, p in zip(shapes, placements)]
        locals_ = [d.to_local() for d in dts]
        n = iters if name.startswith("add") else iters // 5
        plain, hit, overhead = paired_us(lambda: op(locals_), lambda: op(dts), n, reps)
        if dist.get_rank() == 0:
            print(json.dumps({"impl": "pytorch", "case": name, "world": world, "plain_us": round(plain, 2),
                              "hit_us": round(hit, 2), "overhead_us": round(overhead, 2)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
