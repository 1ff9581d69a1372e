"""Where a PS step's CPU time goes: each part of one worker step and one server step, timed alone.

One process, one torch thread, no sockets: the batch is read, its embedding ids
discovered, the server's pull reply built, encoded and decoded, written into the
worker's model, forward, backward, the gradients gathered, the push encoded and
decoded, and the server's optimizer applied. Medians over 100 steps after 20 of
warm-up. The parts the plain loop also pays are ``batch``, ``forward``,
``backward`` and ``ps_apply`` (its optimizer); the rest is the runtime's cost.

Each message's carrying is timed both ways: over a socket (``pull_reply``: the
server's copies for the socket, ``pull_socket``/``push_socket``: framing as a
socket carries it, copied into bytes) and through shared memory (``pull_shm``: the
server's values copied into a slot and viewed by the worker; ``push_shm``: the
gradients copied into a slot and viewed by the server). ``total_socket`` and
``total_shm`` add each carrier's parts to the rest.

    python benchmarks/run/runtime_step_parts.py wide-deep mlp3 \
        --out benchmarks/results/runtime_step_parts.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from benchmarks.run.runtime_throughput import case_spec
from rightsize.runtime.model_io import EmbeddingLookups, gradients, layout_of, write_pulled
from rightsize.runtime.node import build_workload
from rightsize.runtime.paramstore import OptimSettings, ParamStore
from rightsize.runtime.ps import rows_fill, value_fill
from rightsize.runtime.sharedmem import SharedMemory, host_identity
from rightsize.runtime.slots import Fill, SlotPool, slot_layout
from rightsize.runtime.transport import decode, encode

#: Parts only one carrier pays.
SOCKET_PARTS = ("pull_reply", "pull_socket", "push_socket")
SHM_PARTS = ("pull_shm", "push_shm")

STEPS, WARMUP = 120, 20


def wire(header: dict, tensors: list) -> tuple[dict, list]:
    """Encode and decode as a socket would carry the frames (copied into bytes)."""
    frames = encode(header, tensors)
    return decode([f.tobytes() if isinstance(f, np.ndarray) else bytes(f) for f in frames])


def through_slot(slots: SlotPool, parts: list) -> list[torch.Tensor]:
    """``parts`` written into a slot as a sender does, and viewed as its reader does."""
    layout = slot_layout(parts)
    slot = slots.acquire(layout.nbytes, "t")
    for out, part in zip(slot.tensors(layout), parts, strict=True):
        part.fill(out) if isinstance(part, Fill) else out.copy_(part)
    views = slot.tensors(layout)
    slots.release("t")
    return views


def parts(case: str, slots: SlotPool) -> dict[str, float]:
    spec = case_spec(Path(tempfile.mkdtemp()), case, STEPS, 0.5)
    workload = build_workload(spec)
    layout = layout_of(workload.make_model(seed=0))
    lookups = EmbeddingLookups(layout)
    t = spec.training
    store = ParamStore({n: p.detach() for n, p in layout.params.items()}, layout.sparse,
                       OptimSettings(t.optimizer, t.lr, t.momentum))  # fmt: skip
    order = torch.randperm(len(workload.dataset), generator=torch.Generator().manual_seed(0))
    size, times = spec.batch_size, {}
    clock = [0.0]  # when the last part ended

    def tick(name: str) -> None:
        now = time.perf_counter()
        times.setdefault(name, []).append(now - clock[0])
        clock[0] = now

    for step in range(STEPS):
        clock[0] = time.perf_counter()
        indices = order[(step * size) % (len(order) - size) :][:size]
        inputs, target = workload.batch(indices)
        tick("batch")
        ids = lookups.discover(inputs)
        tick("discover")
        tables = sorted(ids)
        out = [v.clone() for v in store.dense_values()] + [store.rows(n, ids[n]) for n in tables]
        tick("pull_reply")
        _, pulled = wire({"op": "pull"}, out)
        tick("pull_socket")
        fills = [value_fill(v) for v in store.dense_values()]
        fills += [rows_fill(store.params[n].detach(), ids[n]) for n in tables]
        pulled = through_slot(slots, fills)
        tick("pull_shm")
        count = len(store.dense_names)
        write_pulled(layout, dict(zip(store.dense_names, pulled[:count], strict=True)),
                     {n: (ids[n], v) for n, v in zip(tables, pulled[count:], strict=True)})  # fmt: skip
        tick("write_pulled")
        loss = workload.loss_fn(layout.model(*inputs), target)
        tick("forward")
        loss.backward()
        tick("backward")
        dense, sparse = gradients(layout, lookups)
        tick("gradients")
        pushed = [indices] + [dense[n] for n in store.dense_names]
        pushed += [x for n in sorted(store.sparse) for x in sparse[n]]
        _, got = wire({"op": "push"}, pushed)
        tick("push_socket")
        got = through_slot(slots, pushed)
        tick("push_shm")
        it = iter(got)
        keys = next(it).numpy().astype(np.int32)
        store.apply((0, step, 0), keys, {n: next(it) for n in store.dense_names},
                    {n: (next(it), next(it)) for n in sorted(store.sparse)})  # fmt: skip
        tick("ps_apply")
    ms = {k: 1e3 * statistics.median(v[WARMUP:]) for k, v in times.items()}
    common = sum(v for k, v in ms.items() if k not in SOCKET_PARTS + SHM_PARTS)
    ms["total_socket"] = common + sum(ms[k] for k in SOCKET_PARTS)
    ms["total_shm"] = common + sum(ms[k] for k in SHM_PARTS)
    return ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("cases", nargs="*", default=["wide-deep", "mlp3"])
    parser.add_argument("--out", default="benchmarks/results/runtime_step_parts.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.sparse.check_sparse_tensor_invariants.disable()  # as the servers run
    shared = SharedMemory(host_identity() or "here", owner="step-parts.worker")
    slots = SlotPool(shared.create)
    before, cases = load_note(), {}
    try:
        for case in args.cases:
            cases[case] = ms = parts(case, slots)
            print(f"{case}: " + ", ".join(f"{k} {v:.2f}" for k, v in ms.items()) + " ms")
    finally:
        slots.close()
    write_report(args.out, {
        "benchmark": "runtime_step_parts",
        "simulated": False, "unit": "ms per step, median", "load_before": before,
        "load_after": load_note(), "cases": cases,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
