"""A plain torchrun training script, written the way PyTorch's DDP tutorial writes one.

DistributedDataParallel over gloo (NCCL on GPUs), a DistributedSampler, its own optimizer,
and a snapshot it saves every few epochs and resumes from, so that it survives torchrun
restarts. Nothing in it knows rightsize: it runs the same under

    torchrun --standalone --nproc-per-node 2 examples/torchrun/train_ddp.py
    rightsize torchrun --nproc-per-node 2 examples/torchrun/train_ddp.py

The data is synthetic (a fixed random teacher labels random inputs), so it needs no download.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def synthetic_data(samples: int, features: int, classes: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    return TensorDataset(x, (x @ teacher).argmax(dim=1))


class Trainer:
    def __init__(self, model, data, optimizer, save_every, snapshot_path, device):
        self.device = device
        self.model = model.to(device)
        self.data, self.optimizer = data, optimizer
        self.save_every, self.snapshot_path = save_every, snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            self._load_snapshot()
        self.model = DDP(self.model, device_ids=[device] if device.type == "cuda" else None)

    def _load_snapshot(self):
        snapshot = torch.load(self.snapshot_path, map_location=self.device)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at epoch {self.epochs_run}", flush=True)

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(),
                    "OPTIMIZER_STATE": self.optimizer.state_dict(), "EPOCHS_RUN": epoch + 1}
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | snapshot saved at {self.snapshot_path}", flush=True)

    def _run_epoch(self, epoch):
        self.data.sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for source, targets in self.data:
            source, targets = source.to(self.device), targets.to(self.device)
            self.optimizer.zero_grad()
            loss = F.cross_entropy(self.model(source), targets)
            loss.backward()
            self.optimizer.step()
            total, batches = total + loss.item(), batches + 1
        return total / max(1, batches)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            started = time.time()
            loss = self._run_epoch(epoch)
            if dist.get_rank() == 0:
                print(f"Epoch {epoch} | loss {loss:.4f} | {time.time() - started:.3f}s", flush=True)
                if (epoch + 1) % self.save_every == 0:
                    self._save_snapshot(epoch)


def main():
    parser = argparse.ArgumentParser(description="DDP training with snapshots")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--save-every", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--snapshot", default="snapshot.pt")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if cuda else "cpu")
    data = synthetic_data(args.samples, 64, 10)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=False,
                        sampler=DistributedSampler(data))
    model = nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, args.width),
                          nn.ReLU(), nn.Linear(args.width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    Trainer(model, loader, optimizer, args.save_every, args.snapshot, device).train(args.epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
