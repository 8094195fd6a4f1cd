"""Data-parallel training on torch.distributed (gloo, CPU): DDP or FSDP2, or one process for comparison.

    torchrun --nproc_per_node 2 distributed.py --ddp|--fsdp [--nan-rank R --nan-at K] [--spike-rank R --spike-at K]
    python distributed.py   # the same global batches in one process
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--ddp", action="store_true")
ap.add_argument("--fsdp", action="store_true")
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--nan-rank", type=int, default=-1)
ap.add_argument("--nan-at", type=int, default=-1)
ap.add_argument("--spike-rank", type=int, default=-1)
ap.add_argument("--spike-at", type=int, default=-1)
args = ap.parse_args()

world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("gloo")
rank = dist.get_rank() if world > 1 else 0

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
if args.fsdp:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
elif args.ddp:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
for step in range(args.steps):
    x = torch.randn(32, 8, generator=g)  # the global batch; each rank takes its share
    x = x.chunk(world)[rank].clone()
    y = x.sum(1, keepdim=True)
    if rank == args.nan_rank and step == args.nan_at:
        x[0, 0] = float("nan")
    if rank == args.spike_rank and step >= args.spike_at >= 0:
        y = y * 100.0
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if world > 1:
    dist.destroy_process_group()
print("done", rank)
