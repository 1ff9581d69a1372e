"""Why ZeroMQ: round trips of training-sized tensors, against torch.distributed, and wire overhead.

The parameter-server runtime moves tensors between processes on every step
(workers pull parameters and push gradients). This measures, between two
processes on this machine, for the tensor sizes the zoo's models push:

- ``zmq``: the runtime's own transport (:mod:`rightsize.runtime.transport`, a
  JSON header plus raw frames, large frames zero-copy): the client sends a
  tensor, the server decodes it and answers with a tensor of the same size
  (what a pull or push-and-pull costs);
- ``gloo``: ``torch.distributed`` point-to-point ``send`` then ``recv`` on the
  gloo backend, the same exchange.

For each size: the median round-trip time over the repeats and the implied
bytes per second (both directions). It also encodes each model's full dense
gradient push and reports the bytes on the wire against the model's tensor
bytes (the framing overhead).

Usage:
    python benchmarks/run/runtime_transport.py --out benchmarks/results/runtime_transport.json
    python benchmarks/run/runtime_transport.py --quick     # a few seconds, to check it works
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from rightsize.core.ports import free_port
from rightsize.runtime.model_io import layout_of
from rightsize.runtime.transport import Client, Counters, Server, encode
from rightsize.workloads import WorkloadRegistry

#: Tensor sizes (bytes): a bias, a small layer, a wide layer, a large embedding block.
SIZES = (4 * 1024, 64 * 1024, 1024 * 1024, 16 * 1024 * 1024)
MODELS = (("mlp3", "digits", {}), ("small-cnn", "synthetic-cifar", {}),
          ("wide-deep", "synthetic-criteo", {"embed_dim": 8}))  # fmt: skip

#: Milliseconds a server waits for its last reply to be sent when it ends.
REPLY_LINGER_MS = 30_000


def _rounds(nbytes: int, budget_bytes: int) -> int:
    return max(20, min(2000, budget_bytes // max(nbytes, 1)))


# -- zmq ---------------------------------------------------------------------------------
def _zmq_echo(address_queue, count: int) -> None:
    context = zmq.Context()
    server = Server(context, Counters())
    address_queue.put(server.address)
    for _ in range(count):
        identity, header, tensors = server.receive()
        server.reply(identity, {"rid": header["rid"]}, [t.clone() for t in tensors])
    server.socket.close(linger=REPLY_LINGER_MS)  # the last reply must leave before we exit
    context.term()


def zmq_round_trips(sizes: list[int], budget_bytes: int) -> dict[int, list[float]]:
    rounds = {n: _rounds(n, budget_bytes) for n in sizes}
    ctx = mp.get_context("spawn")  # a forked child of a torch process can hang in its thread pool
    queue = ctx.Queue()
    server = ctx.Process(target=_zmq_echo, args=(queue, sum(rounds.values())), daemon=True)
    server.start()
    context = zmq.Context()
    client, times = Client(context, queue.get(timeout=60), Counters()), {}
    try:
        for n in sizes:
            tensor = torch.ones(n // 4, dtype=torch.float32)
            times[n] = []
            for _ in range(rounds[n]):
                start = time.perf_counter()
                client.call({"op": "echo"}, [tensor])
                times[n].append(time.perf_counter() - start)
    finally:
        context.destroy(linger=0)
        server.join(timeout=60)
        if server.is_alive():
            server.kill()
    return times


# -- torch.distributed (gloo) --------------------------------------------------------------
def _gloo_rank(rank: int, port: int, rounds: dict[int, int], out_queue) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=120))  # fmt: skip
    times = {}
    for n, count in rounds.items():
        tensor = torch.ones(n // 4, dtype=torch.float32)
        times[n] = []
        for _ in range(count):
            start = time.perf_counter()
            if rank == 0:
                dist.send(tensor, 1)
                dist.recv(tensor, 1)
            else:
                dist.recv(tensor, 0)
                dist.send(tensor.clone(), 0)
            times[n].append(time.perf_counter() - start)
    if rank == 0:
        out_queue.put(times)
    dist.destroy_process_group()


def gloo_round_trips(sizes: list[int], budget_bytes: int) -> dict[int, list[float]]:
    rounds = {n: _rounds(n, budget_bytes) for n in sizes}
    ctx = mp.get_context("spawn")  # torch.distributed does not like being forked into
    queue, port = ctx.Queue(), free_port()
    ranks = [ctx.Process(target=_gloo_rank, args=(r, port, rounds, queue)) for r in (0, 1)]
    for p in ranks:
        p.start()
    try:
        return queue.get(timeout=600)
    finally:
        for p in ranks:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


# -- framing overhead --------------------------------------------------------------------------
def push_overhead(name: str, dataset: str, options: dict) -> dict:
    """A full dense-gradient push of ``name``: bytes on the wire vs the tensors' bytes."""
    model = WorkloadRegistry().get(name, dataset, options).make_model(seed=0)
    layout = layout_of(model)
    tensors = [layout.params[n].detach() for n in layout.dense]
    payload = sum(t.numel() * t.element_size() for t in tensors)
    header = {"op": "push", "key": [0, 0, 0], "names": layout.dense, "generation": 0}
    frames = encode(header, tensors)
    wire = sum(len(f) if isinstance(f, bytes) else f.nbytes for f in frames)
    return {"model": name, "dense_tensors": len(tensors), "dense_bytes": payload,
            "model_bytes": sum(layout.sizes.values()), "wire_bytes": wire, "frames": len(frames),
            "overhead": wire / payload - 1}  # fmt: skip


def summarize(times: dict[int, list[float]]) -> list[dict]:
    rows = []
    for n, values in sorted(times.items()):
        median = statistics.median(values)
        rows.append({"bytes": n, "rounds": len(values), "median_rtt_us": median * 1e6,
                     "bytes_per_s": 2 * n / median})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget-mb", type=int, default=512, help="bytes sent per size and mode")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved zmq/gloo repeats")
    parser.add_argument("--quick", action="store_true", help="small sizes only: checks it works")
    parser.add_argument("--out", default="benchmarks/results/runtime_transport.json")
    args = parser.parse_args(argv)
    sizes = list(SIZES[:2] if args.quick else SIZES)
    budget = (8 if args.quick else args.budget_mb) * 2**20
    repeats = 1 if args.quick else args.repeats
    samples = {"zmq": {n: [] for n in sizes}, "gloo": {n: [] for n in sizes}}
    for _ in range(repeats):  # interleaved, so drift in the machine's load hits both
        for mode, measure in (("zmq", zmq_round_trips), ("gloo", gloo_round_trips)):
            for n, values in measure(sizes, budget).items():
                samples[mode][n].extend(values)
    results = {mode: summarize(times) for mode, times in samples.items()}
    ratios = [
        {"bytes": z["bytes"], "zmq_over_gloo_rtt": z["median_rtt_us"] / g["median_rtt_us"]}
        for z, g in zip(results["zmq"], results["gloo"], strict=True)
    ]
    for z, r in zip(results["zmq"], ratios, strict=True):
        print(f"{z['bytes']:>10} B  zmq {z['median_rtt_us']:9.1f} us  "
              f"zmq/gloo {r['zmq_over_gloo_rtt']:.2f}", file=sys.stderr)  # fmt: skip
    report = {
        "benchmark": "runtime_transport",
        "simulated": False,
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "zmq": zmq.zmq_version(),
        "round_trips": results,
        "ratios": ratios,
        "push_overhead": [push_overhead(*m) for m in MODELS],
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
