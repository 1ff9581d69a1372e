"""An allreduce rank: data-parallel training with torch DDP over gloo, fed by dynamic shards.

Every rank leases shards from the master like a PS worker. Ranks must take
every step together, but they run out of shards at different times (at an
epoch's end, or after a straggler's short lease), so each step starts with one
small ``all_gather`` of a control row per rank — whether it has a batch, the
batch's key and sample indices, and the master's checkpoint/stop requests it
has seen. From it every rank knows the step's total sample count ``N``: a rank
with ``n`` samples scales its mean loss by ``n * world / N`` and an idle rank
runs a one-sample batch scaled by zero, so DDP's average is exactly the mean
gradient over the step's real samples. The same row makes the ranks agree on
when to checkpoint (rank 0 writes model, optimizer and the log of every
applied key with its indices) and when to stop.

A change in the number of ranks, or a rank's death, restarts the group from the
latest checkpoint, as torchrun's elastic agent does; a restarted rank skips
batches whose key the checkpoint's log already holds.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from rightsize.runtime import checkpoint
from rightsize.runtime.node_link import NodeContext
from rightsize.runtime.paramstore import OptimSettings, make_optimizer
from rightsize.runtime.protocol import (
    Ack,
    AckKind,
    Checkpoint,
    Heartbeat,
    LeaseRequest,
    Progress,
    Reply,
    Reset,
    Stop,
)
from rightsize.runtime.shards import Task

# Control row layout: has_batch, epoch, shard, batch, n, checkpoint version, stop; then indices.
_HAS, _EPOCH, _SHARD, _BATCH, _N, _CKPT, _STOP = range(7)
_CONTROL = 7
#: Seconds idle ranks wait between steps when no rank has a batch.
IDLE_WAIT_S = 0.2


class Rank:
    """One rank's training loop."""

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx, spec = ctx, ctx.spec
        self.config = ctx.config.rank
        self.rank, self.world = self.config.rank, self.config.world
        self.batch_size = spec.batch_size
        self.workload = ctx.workload()
        model = self.workload.make_model(seed=spec.training.seed)
        t = spec.training
        self.optimizer = make_optimizer(
            OptimSettings(t.optimizer, t.lr, t.momentum), list(model.parameters()), sparse=False
        )
        self.log: list[tuple[tuple[int, int, int], np.ndarray]] = []
        self.saved_version = 0
        if self.config.checkpoint:
            self._restore(model, Path(self.config.checkpoint))
        self.applied = {key for key, _ in self.log}
        self.ddp = DistributedDataParallel(model)
        # gloo's traffic is not visible to us; count what a ring allreduce moves per step:
        # each rank sends and receives 2 (world - 1) / world of the gradient bytes.
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self.ring_bytes = int(2 * (self.world - 1) / self.world * grad_bytes)
        self.task: Task | None = None
        self.next_batch = 0
        self.shard_indices: torch.Tensor | None = None
        self.requests = {"checkpoint": 0, "stop": 0}

    def _restore(self, model: torch.nn.Module, path: Path) -> None:
        state = checkpoint.load(path)
        model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.log = [(tuple(k), idx) for k, idx in state["log"]]
        self.saved_version = state["version"]

    def run(self) -> int:
        while True:
            key, indices = self.next_key()
            rows = self.gather(key, indices)
            total = int(rows[:, _N].sum())
            if total:
                self.train(indices, len(indices) * self.world / total if key else 0.0)
                self.record(rows)
                if key is not None:
                    self.report(key)
            version = int(rows[:, _CKPT].max())
            if version > self.saved_version:
                self.save(version)
            if rows[:, _STOP].max() > 0:
                return 0
            if not total:
                time.sleep(IDLE_WAIT_S)

    # -- shards ---------------------------------------------------------------------
    def next_key(self) -> tuple[tuple[int, int, int] | None, torch.Tensor]:
        """This rank's next batch not yet in the log, leasing when its task is used up."""
        while True:
            if self.task is None:
                if not self.lease():
                    return None, torch.zeros(0, dtype=torch.long)
            if self.next_batch >= self.task.end:
                self.task = None
                continue
            key = (self.task.epoch, self.task.shard, self.next_batch)
            if key in self.applied:  # in the checkpoint already: skip, and say so
                self.next_batch += 1
                self.progress()
                continue
            b = self.next_batch
            return key, self.shard_indices[b * self.batch_size : (b + 1) * self.batch_size]

    def lease(self) -> bool:
        reply, tensors = self.ctx.call(LeaseRequest())
        self.follow(reply)
        if reply.lease is None:
            return False
        self.task = reply.lease.task
        self.next_batch = reply.lease.next_batch
        self.shard_indices = tensors[0]
        return True

    def report(self, key: tuple[int, int, int]) -> None:
        self.next_batch = key[2] + 1
        self.progress()

    def progress(self) -> None:
        report = Progress(self.task, self.next_batch)
        reply, _ = self.ctx.call(report)
        self.follow(reply)
        if report.done or not reply.accepted:
            self.task = None

    def follow(self, reply: Reply) -> None:
        for command in reply.commands:
            if isinstance(command, Checkpoint):
                self.requests["checkpoint"] = max(self.requests["checkpoint"], command.version)
            elif isinstance(command, Stop):
                self.requests["stop"] = 1
            elif isinstance(command, Reset):
                self.task = None

    # -- the step -------------------------------------------------------------------
    def gather(self, key, indices: torch.Tensor) -> torch.Tensor:
        row = torch.full((_CONTROL + self.batch_size,), -1, dtype=torch.long)
        row[:_CONTROL] = 0
        if key is not None:
            row[_HAS], row[_N] = 1, len(indices)
            row[_EPOCH], row[_SHARD], row[_BATCH] = key
            row[_CONTROL : _CONTROL + len(indices)] = indices
        row[_CKPT], row[_STOP] = self.requests["checkpoint"], self.requests["stop"]
        rows = [torch.empty_like(row) for _ in range(self.world)]
        dist.all_gather(rows, row)
        return torch.stack(rows)

    def train(self, indices: torch.Tensor, weight: float) -> None:
        started = time.monotonic()
        batch = indices if len(indices) else torch.zeros(1, dtype=torch.long)
        inputs, target = self.workload.batch(batch)
        loss = self.workload.loss_fn(self.ddp(*inputs), target)
        (loss * weight).backward()
        self.ctx.counters.bytes_out += self.ring_bytes
        self.ctx.counters.bytes_in += self.ring_bytes
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if len(indices):
            self.ctx.steps += 1
            self.ctx.counted_at = time.monotonic()
            self.ctx.samples += len(indices)
            self.ctx.loss_sum += float(loss.detach())
            self.ctx.loss_n += 1
            self.ctx.busy_s += time.monotonic() - started

    def record(self, rows: torch.Tensor) -> None:
        for row in rows:
            if row[_HAS]:
                key = (int(row[_EPOCH]), int(row[_SHARD]), int(row[_BATCH]))
                indices = row[_CONTROL : _CONTROL + int(row[_N])].numpy().astype(np.int32)
                self.log.append((key, indices))
                self.applied.add(key)

    def save(self, version: int) -> None:
        """Rank 0 writes the checkpoint all ranks agreed on, then tells the master."""
        self.saved_version = version
        if self.rank != 0:
            return
        state = {
            "model": self.ddp.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "log": self.log,
            "version": version,
        }
        path = checkpoint.CheckpointDir(self.config.checkpoint_root).model_file(version)
        checkpoint.save_atomic(state, path)
        self.ctx.call(Heartbeat((Ack(AckKind.CHECKPOINTED, version=version),)))


def run_rank(ctx: NodeContext) -> int:
    config = ctx.register().config.rank
    ctx.generation = config.generation
    host, port = config.rendezvous.removeprefix("tcp://").rsplit(":", 1)
    timeout = timedelta(seconds=config.timeout_s)
    # the master serves the group's store (Master.open_rendezvous): every rank is a client
    store = dist.TCPStore(host, int(port), config.world + 1, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=config.rank, world_size=config.world,
                            timeout=timeout)  # fmt: skip
    try:
        return Rank(ctx).run()
    finally:
        dist.destroy_process_group()
