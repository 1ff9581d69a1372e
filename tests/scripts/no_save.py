"""A script that saves nothing at all: it trains a small network for --steps steps on
synthetic data, DDP over gloo, and ends. A restart starts it over."""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds of waiting per step")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    model = DDP(nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), nn.Linear(args.width, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, 64)
        loss = F.cross_entropy(model(x), x[:, :10].argmax(dim=1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.sleep:
            time.sleep(args.sleep)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
