"""What memory a node must hold, from the model — never from its share of the CPU.

A policy sizes CPU; a node's memory limit must cover what the node holds, or the
kernel kills it (issue 17: NEARCHUS launched at R0 = 15% of the budget for memory as
well as CPU gave a wide-deep PS 307 Mi, and it was OOM-killed at every first
checkpoint). Every node process holds the interpreter with torch, the job's dataset
and a full copy of the model (servers and workers both build it, then a server keeps
its share). On top of that:

- a **parameter server** holds its tensors' optimizer state (Adagrad's sums, Adam's two
  moments, SGD's momentum buffer) and, while a checkpoint or an export is written, one
  more copy of its tensors and state;
- a **worker** holds the gradients of the dense tensors and its step's peak: the
  activations saved for backward and the batch, measured once by running the forward
  pass of one batch (:func:`profiling.memory.saved_activation_bytes`); with
  ``runtime.shared_memory: auto`` also its shared-memory slots (:mod:`slots`: the
  pages are charged to the worker, which allocates them, not to the server that maps
  them) — :data:`SHARED_SLOTS` of them, each up to :data:`slots.SLOT_GROWTH` times a
  step's exchange (the dense tensors and the batch's embedding rows).

The sum, times :data:`HEADROOM`, is the node's floor. The runtime raises any planned
node below its floor to it (:func:`with_floor`, by :mod:`scaling.floors`, the rule the
simulator applies with its own model's floors) before launching or resizing it, and the
floor is in the report; where the floor does not fit the budget, the job is refused
before anything starts. ``benchmarks/runtime_memory.py`` checks the floors against the
peaks real runs measure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.core.spec import JobSpec, Optimizer, SharedMemoryMode, Strategy
from rightsize.core.units import format_bytes
from rightsize.profiling.memory import saved_activation_bytes, tensor_bytes
from rightsize.runtime.model_io import EmbeddingLookups, ModelLayout
from rightsize.runtime.partition import bytes_per_ps, partition_by_bytes
from rightsize.runtime.slots import SLOT_GROWTH
from rightsize.scaling import floors as floor_rule
from rightsize.scaling.api import Plan
from rightsize.workloads.workload import Workload

#: Resident memory of a node process before it builds anything: the interpreter, torch and
#: rightsize. Measured 231 MiB (VmRSS after the imports, torch 2.13 CPU build); the cgroup
#: also charges the libraries' file pages the process touches, hence the round-up.
PROCESS_BYTES = 256 * 2**20
#: Floors are this much above the estimate: allocator slack and fragmentation (glibc keeps
#: freed arenas), which the sum of tensor sizes does not show.
HEADROOM = 1.25
#: Optimizer state per parameter, in copies of the parameter (SGD: its momentum buffer, if any).
OPTIMIZER_SLOTS = {Optimizer.ADAGRAD: 1, Optimizer.ADAM: 2}
#: Shared-memory slots a worker holds at most, each the size of a step's exchange: with
#: overlap, the next batch's pull (its ids, and the slot lent for its reply) and two pushes
#: are out at once (runtime/worker.py); a pool keeps no more slots than were busy at once.
SHARED_SLOTS = 4


@dataclass(frozen=True)
class MemoryNeed:
    """The bytes a job's nodes must hold, by role.

    Attributes:
        sizes: bytes of each model tensor, by name (a server's share is a subset).
        model_bytes: bytes of the whole model (every node builds it).
        dense_bytes: bytes of the tensors a worker pulls whole and takes gradients of.
        dataset_bytes: bytes of the dataset a node keeps resident.
        step_bytes: a worker's step peak beyond its model: saved activations and the batch.
        optimizer_slots: optimizer state per parameter, in copies of the parameter.
        shared_bytes: a worker's shared-memory slots (0 with sockets only).
    """

    sizes: Mapping[str, int]
    model_bytes: int
    dense_bytes: int
    dataset_bytes: int
    step_bytes: int
    optimizer_slots: int
    shared_bytes: int = 0

    @property
    def process_bytes(self) -> int:
        """What any node of this job holds before its role's own share."""
        return PROCESS_BYTES + self.dataset_bytes + self.model_bytes

    def worker_bytes(self) -> int:
        held = self.dense_bytes + self.step_bytes + self.shared_bytes
        return _with_headroom(self.process_bytes + held)

    def ps_bytes(self, held_bytes: int) -> int:
        """A server holding ``held_bytes`` of tensors: their state, and one copy of both
        while it writes a checkpoint."""
        state = held_bytes * (1 + self.optimizer_slots)
        return _with_headroom(self.process_bytes + 2 * state)  # state_dict() clones it all

    def floors(self, shape: ClusterShape) -> dict[str, int]:
        """Each node's floor in ``shape``; servers by their share of a byte-balanced
        placement over the shape's servers (a replacement keeps shares, so this holds)."""
        held: dict[str, int] = {}
        if shape.ps:
            names = [n.name for n in shape.ps]
            held = bytes_per_ps(partition_by_bytes(self.sizes, names), self.sizes)
        return {
            n.name: self.ps_bytes(held.get(n.name, 0)) if n.role == NodeRole.PS
            else self.worker_bytes()
            for n in shape.nodes
        }  # fmt: skip

    def with_floor(self, shape: ClusterShape) -> ClusterShape:
        """``shape`` with every node's memory raised to at least its floor."""
        return floor_rule.raised_to_floors(shape, self.floors(shape))


def floored_plan(plan: Plan, need: MemoryNeed) -> Plan:
    """``plan`` raised to ``need``'s floors by the rule the simulator applies too
    (:func:`scaling.floors.floored_plan`; the same plan if nothing was below)."""
    return floor_rule.floored_plan(plan, need.floors(plan.shape))


def warn_below_floors(shape: ClusterShape, need: MemoryNeed, warn: Callable[[str], None]) -> None:
    """Say which nodes of a shape the user wrote have less memory than their floor."""
    for name, floor in need.floors(shape).items():
        has = shape.node(name).resources.memory_bytes
        if has < floor:
            warn(f"warning: {name} has {format_bytes(has)} of memory, below the "
                 f"{format_bytes(floor)} it is estimated to need; if it is OOM-killed it is "
                 "relaunched with twice as much")  # fmt: skip


def _with_headroom(nbytes: int) -> int:
    return int(nbytes * HEADROOM)


def memory_need(spec: JobSpec, workload: Workload, layout: ModelLayout) -> MemoryNeed:
    """Measure what ``spec``'s nodes hold: tensor sizes from ``layout`` (the master's model),
    the step peak by running one batch's forward pass."""
    model_bytes = sum(layout.sizes.values())
    dense_bytes = sum(layout.sizes[name] for name in layout.dense)
    batch = workload.example_batch(spec.batch_size)
    keep = {p.untyped_storage().data_ptr() for p in layout.params.values()}
    activations = saved_activation_bytes(lambda: workload.loss(layout.model, batch), keep)
    layout.model.zero_grad(set_to_none=True)  # the forward pass leaves nothing behind
    shared = spec.strategy == Strategy.PS and spec.runtime.shared_memory == SharedMemoryMode.AUTO
    return MemoryNeed(
        sizes=dict(layout.sizes),
        model_bytes=model_bytes,
        dense_bytes=dense_bytes,
        dataset_bytes=workload.dataset.resident_bytes(),
        step_bytes=activations + tensor_bytes(_tensors(batch)),
        optimizer_slots=_slots(spec),
        shared_bytes=shared_slot_bytes(layout, batch[0]) if shared else 0,
    )


def script_need() -> MemoryNeed:
    """A script's ranks: only the process with torch is known before it runs; what the script
    builds shows in its memory readings, and an OOM kill doubles its limit (DLRover §4.2)."""
    return MemoryNeed(sizes={}, model_bytes=0, dense_bytes=0, dataset_bytes=0, step_bytes=0,
                      optimizer_slots=0)  # fmt: skip


def shared_slot_bytes(layout: ModelLayout, inputs: tuple[torch.Tensor, ...]) -> int:
    """What a worker's shared-memory slots hold at most: :data:`SHARED_SLOTS` times
    :data:`slots.SLOT_GROWTH` times a step's exchange — the dense tensors, and the rows
    (with their ids) of the embedding rows a batch touches (found as a worker finds them)."""
    dense = sum(layout.sizes[name] for name in layout.dense)
    rows = 0
    for name, ids in EmbeddingLookups(layout).discover(inputs).items():
        table = layout.params[name]
        rows += len(ids) * (table[0].numel() * table.element_size() + ids.element_size())
    return int(SHARED_SLOTS * SLOT_GROWTH * (dense + rows))


def _slots(spec: JobSpec) -> int:
    kind = spec.training.optimizer
    if kind == Optimizer.SGD:
        return 1 if spec.training.momentum else 0
    return OPTIMIZER_SLOTS[kind]


def _tensors(batch) -> list[torch.Tensor]:
    inputs, target = batch
    return [*inputs, target]
