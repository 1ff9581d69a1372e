"""A DDP script whose data is slow to read (each sample waits --delay-ms, as a remote or
compressed store would): its ranks wait more than they compute. DistributedSampler shares
the data between ranks, so more ranks finish an epoch sooner. It snapshots every epoch and
resumes from its snapshot, as PyTorch's DDP tutorial does."""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SlowData(Dataset):
    def __init__(self, samples: int, delay_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(samples, 32, generator=g)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(self.delay_s)
        return self.x[i], self.x[i, :4].argmax()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--snapshot", default="slow.pt")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    data = SlowData(args.samples, args.delay_ms / 1000)
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=32, sampler=sampler, num_workers=args.workers)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    first = 0
    if os.path.exists(args.snapshot):
        state = torch.load(args.snapshot)
        model.load_state_dict(state["model"])
        first = state["epochs_run"]
    ddp = DDP(model)
    for epoch in range(first, args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(ddp(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:
            torch.save({"model": model.state_dict(), "epochs_run": epoch + 1}, args.snapshot)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
