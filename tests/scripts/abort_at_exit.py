"""Trains a little, then rank 1 aborts on its way out after rank 0 has exited 0 — as gloo's
teardown sometimes does ("terminate called without an active exception", SIGABRT)."""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(20):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.barrier()
if dist.get_rank() == 1:
    time.sleep(2.0)  # rank 0 has exited by now
    os.abort()
