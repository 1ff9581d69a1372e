"""A Hugging Face-style training loop: gradient accumulation, AdamW, a linear warm-up and decay
schedule stepped per optimizer step, and a checkpoint every --save-every optimizer steps with
the step count, resumed from. Rank 0 writes what it counted itself (optimizer steps, batches,
samples) to --out, so a test can compare the launcher's measurements with the script's own.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--accumulation", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--save-every", type=int, default=20)
    parser.add_argument("--checkpoint", default="accum.pt")
    parser.add_argument("--out", default="accum-counts.json")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 32, generator=g)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    sampler = DistributedSampler(data, shuffle=True, seed=1)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = nn.Sequential(nn.Linear(32, 256), nn.GELU(), nn.Linear(256, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = max(1, args.max_steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.max_steps - s) / args.max_steps)))
    step = 0
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step = state["step"]
    model = DDP(model)
    counted = {"optimizer_steps": 0, "batches": 0, "samples": 0}
    epoch = 0
    while step < args.max_steps:
        sampler.set_epoch(epoch)
        for i, (inputs, targets) in enumerate(loader):
            sync = (i + 1) % args.accumulation == 0
            context = model.no_sync() if not sync else torch.enable_grad()
            with context:
                loss = F.mse_loss(model(inputs), targets) / args.accumulation
                loss.backward()
            counted["batches"] += 1
            counted["samples"] += len(inputs)
            if sync:
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
                step += 1
                counted["optimizer_steps"] += 1
                if step % args.save_every == 0 and dist.get_rank() == 0:
                    torch.save({"model": model.module.state_dict(), "step": step,
                                "optimizer": optimizer.state_dict(),
                                "schedule": schedule.state_dict()}, args.checkpoint)
                if step >= args.max_steps:
                    break
        epoch += 1
    if dist.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump(counted, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
