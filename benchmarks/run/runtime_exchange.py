"""One step's exchange between a worker and a server process, through sockets and shared memory.

What the data plane costs, apart from training: a worker process pushes one
batch's gradients (the model's dense gradients, and for a click model the rows
its batch touched) and pulls the values back (dense tensors and rows) from a
server process, through the runtime's own transport (``runtime.transport``), as
a worker step does — the pulled values copied into the worker's model, the
pushed ones read in place by the server (here: summed, not applied). Per round
trip (push + pull), medians over ``--rounds``: wall time, the worker's CPU
(its whole process: ZeroMQ's I/O thread included) and the server's CPU.
Carriers alternate in blocks, so a change of the machine's load hits both.

    python benchmarks/run/runtime_exchange.py --out benchmarks/results/runtime_exchange.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from benchmarks.run.runtime_throughput import case_spec
from rightsize.runtime.model_io import EmbeddingLookups, layout_of, write_pulled
from rightsize.runtime.node import build_workload
from rightsize.runtime.protocol import ClusterView
from rightsize.runtime.ps import rows_fill, value_fill
from rightsize.runtime.psclient import PSCluster
from rightsize.runtime.sharedmem import SharedMemory, host_identity
from rightsize.runtime.transport import Counters, Server, route

#: Round trips per block, and blocks per carrier (alternating).
ROUNDS, BLOCKS, WARMUP = 60, 4, 10


def _model(case: str):
    spec = case_spec(Path(tempfile.mkdtemp()), case, 10, 0.5)
    workload = build_workload(spec)
    layout = layout_of(workload.make_model(seed=0))
    return spec, workload, layout


def _serve(case: str, shared: bool, address_queue, result_queue) -> None:
    """The server: answers pushes (reading every gradient) and pulls (values copied once)."""
    torch.set_num_threads(1)
    _, _, layout = _model(case)
    context = zmq.Context()
    host = host_identity() if shared else None
    server = Server(context, Counters(), shared=SharedMemory(host) if host else None)
    address_queue.put(server.address)
    params = {n: p.detach() for n, p in layout.params.items()}
    dense = sorted(layout.dense)
    cpu0, served = None, 0
    while True:
        identity, header, tensors = server.receive()
        if header["op"] == "stop":
            break
        if cpu0 is None and served == WARMUP * 2:
            cpu0 = time.process_time()
        back = {"rid": header["rid"], **route(header)}
        if header["op"] == "push":
            float(sum(t.float().sum() for t in tensors))  # read in place, as an optimizer does
            server.reply(identity, {**back, "applied": True})
        else:
            out = [value_fill(params[n]) for n in dense]
            out += [rows_fill(params[t], ids) for t, ids in zip(header["tables"], tensors,
                                                                 strict=True)]  # fmt: skip
            server.reply(identity, {**back, "dense": dense}, out)
        served += 1
    result_queue.put((time.process_time() - (cpu0 or 0.0), served - WARMUP * 2))
    server.close()
    context.destroy(linger=0)


def measure(case: str, shared: bool, rounds: int) -> dict:
    """``rounds`` push + pull round trips against a fresh server process."""
    torch.set_num_threads(1)
    spec, workload, layout = _model(case)
    ctx = mp.get_context("spawn")
    addresses, results = ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=_serve, args=(case, shared, addresses, results), daemon=True)
    server.start()
    context = zmq.Context()
    mine = SharedMemory.for_node("exchange", "worker-0") if shared else None
    view = ClusterView(1, {"ps-0": addresses.get(timeout=120)}, {n: "ps-0" for n in layout.params})
    cluster = PSCluster(context, Counters(), view, layout.params, layout.sparse, mine)
    inputs, _ = workload.example_batch(spec.batch_size)
    ids = EmbeddingLookups(layout).discover(inputs)
    grads = {n: torch.randn_like(layout.params[n]) for n in layout.dense}
    rows = {t: (i, torch.randn(len(i), layout.params[t].shape[1])) for t, i in ids.items()}
    indices = torch.arange(spec.batch_size)
    walls, cpus = [], []
    try:
        for step in range(rounds + WARMUP):
            wall, cpu = time.perf_counter(), time.process_time()
            cluster.wait(cluster.send_push((0, 0, step), indices, grads, rows), _stall)
            pull = cluster.send_pull(ids)
            dense, pulled = cluster.pulled(pull, _stall)
            write_pulled(layout, dense, pulled)
            cluster.release(pull)
            if step >= WARMUP:
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
        carrier = cluster.carriers()["ps-0"]
        cluster.clients["ps-0"].send({"op": "stop", "gen": 1})
        server_cpu, served = results.get(timeout=120)
    finally:
        cluster.close()
        context.destroy(linger=0)
        server.join(timeout=60)
    return {"carrier": carrier, "wall_ms": [1e3 * w for w in walls],
            "worker_cpu_ms": [1e3 * c for c in cpus],
            "server_cpu_ms_per_round": 1e3 * server_cpu / max(1, served // 2)}  # fmt: skip


def _stall() -> None:
    raise TimeoutError("the server did not answer within a second")


def summarize(case: str, blocks: dict[str, list[dict]], layout) -> dict:
    out = {"case": case, "dense_bytes": sum(layout.sizes[n] for n in layout.dense)}
    for carrier, runs in blocks.items():
        out[carrier] = {
            "wall_ms": statistics.median(w for r in runs for w in r["wall_ms"]),
            "worker_cpu_ms": statistics.median(c for r in runs for c in r["worker_cpu_ms"]),
            "server_cpu_ms": statistics.median(r["server_cpu_ms_per_round"] for r in runs),
            "carried_by": sorted({r["carrier"] for r in runs}),
        }
    on, off = out["on"], out["off"]
    print(f"{case:>10}: round trip {off['wall_ms']:.2f} -> {on['wall_ms']:.2f} ms wall, worker "
          f"CPU {off['worker_cpu_ms']:.2f} -> {on['worker_cpu_ms']:.2f} ms, server CPU "
          f"{off['server_cpu_ms']:.2f} -> {on['server_cpu_ms']:.2f} ms (sockets -> shared "
          "memory)", file=sys.stderr)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default="mlp3,wide-deep")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="round trips per block")
    parser.add_argument("--blocks", type=int, default=BLOCKS, help="blocks per carrier")
    parser.add_argument("--out", default="benchmarks/results/runtime_exchange.json")
    args = parser.parse_args(argv)
    before, cases = load_note(), []
    for case in args.cases.split(","):
        blocks = {"on": [], "off": []}
        for block in range(args.blocks):
            for carrier in ("on", "off") if block % 2 == 0 else ("off", "on"):
                blocks[carrier].append(measure(case, carrier == "on", args.rounds))
        cases.append(summarize(case, blocks, _model(case)[2]))
    write_report(args.out, {
        "benchmark": "runtime_exchange",
        "simulated": False, "load_before": before, "load_after": load_note(), "cases": cases,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
