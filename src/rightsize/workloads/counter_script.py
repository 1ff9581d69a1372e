"""A torchrun script whose trained weights count how often each sample was trained.

Run it as a user's script would be: ``torchrun -m rightsize.workloads.counter_script`` or
``rightsize torchrun -m rightsize.workloads.counter_script`` (the chaos harness does,
``runtime/chaos.py``).

rightsize's counting workload (rightsize.workloads.counter) written as a user's DDP script
with ElasticSampler in place of DistributedSampler: one weight per sample, SGD at learning
rate 1 on the sum of the batch's weights (times the world size, so that DDP's mean over ranks
gives each sample's gradient exactly 1), so minus each final weight is how many times its
sample was applied. It checkpoints every --save-every steps and at every epoch's end, and
resumes from its checkpoint, as a script that survives torchrun restarts does. Rank 0 writes
the final counts to --out.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from rightsize.torch import ElasticSampler
from rightsize.workloads.counter import SampleCounter, SampleIndices


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step")
    parser.add_argument("--checkpoint", default="counter.pt")
    parser.add_argument("--out", default="counts.pt")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    model = SampleCounter(args.samples)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    epoch0 = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        epoch0 = state["epoch"]
    ddp = DDP(model)
    data = SampleIndices(args.samples)
    sampler = ElasticSampler(data, shuffle=True, seed=7)
    loader = DataLoader(range(args.samples), batch_size=args.batch_size, sampler=sampler)
    step = 0

    def save(epoch):
        if rank == 0:
            torch.save({"model": model.state_dict(), "epoch": epoch}, args.checkpoint)

    for epoch in range(epoch0, args.epochs):
        sampler.set_epoch(epoch)
        for index in loader:
            loss = ddp(index).sum() * world
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if step % args.save_every == 0:
                save(epoch)
        save(epoch + 1)
    if rank == 0:
        torch.save({"dense": model.dense.detach(), "table": model.table.weight.detach()},
                   args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
