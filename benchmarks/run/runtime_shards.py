"""How many shard-service operations per second does the master's Data Shard Manager sustain?

DLRover §5.2 asks for "many much smaller shards" than one per worker, so the
shard service is on the training path: every lease, progress report and finish
is a call to the master. This measures, for a dataset cut into many shards:

- ``in_process``: the queues alone (:class:`rightsize.runtime.shards.ShardManager`):
  a lease, one progress report per batch, a finish, with a snapshot (what a
  checkpoint stores) every ``snapshot_every`` leases;
- ``round_trip``: the same protocol as a worker sees it, one request per
  operation over the runtime's own ZeroMQ transport, to a server process that
  answers from a ShardManager (the master's message loop without the rest of
  the job).

Each mode is repeated ``--repeats`` times; the JSON has every repeat and the
median. Usage:

    python benchmarks/run/runtime_shards.py --out benchmarks/results/runtime_shards.json
    python benchmarks/run/runtime_shards.py --quick      # a few seconds, to check it works
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from rightsize.runtime.shards import ShardManager, ShardPlan, Task
from rightsize.runtime.transport import Client, Counters, Server

#: Milliseconds a server waits for its last reply to be sent when it ends.
REPLY_LINGER_MS = 30_000


def make_plan(dataset_size: int, shard_size: int, batch_size: int) -> ShardPlan:
    return ShardPlan(dataset_size, shard_size, batch_size, epochs=1_000_000)


def in_process(plan: ShardPlan, ops: int, snapshot_every: int) -> dict:
    """Lease / progress per batch / finish cycles by one worker, timed in this process."""
    manager, done, leases = ShardManager(plan), 0, 0
    start = time.perf_counter()
    while done < ops:
        lease = manager.lease("w")
        task = lease.task
        for batch in range(task.begin + 1, task.end):
            manager.progress("w", task, batch)
        manager.finish("w", task)
        leases += 1
        done += 1 + (task.end - task.begin)
        if leases % snapshot_every == 0:
            manager.snapshot()
    elapsed = time.perf_counter() - start
    return {"ops": done, "seconds": elapsed, "ops_per_s": done / elapsed}


def _serve(address_queue, plan: ShardPlan, stop_after: int) -> None:
    """A ShardManager behind a ROUTER socket: the master's message loop, shard ops only."""
    context = zmq.Context()
    server, manager = Server(context, Counters()), ShardManager(plan)
    address_queue.put(server.address)
    for _ in range(stop_after):
        identity, header, _ = server.receive()
        op = header["op"]
        if op == "lease":
            lease = manager.lease(header["name"])
            reply = {"task": lease.task.to_list()}
        elif op == "progress":
            reply = {"ok": manager.progress(header["name"], Task.from_list(header["task"]),
                                            header["next"])}  # fmt: skip
        else:
            reply = {"ok": manager.finish(header["name"], Task.from_list(header["task"]))}
        server.reply(identity, {**reply, "rid": header["rid"]})
    server.socket.close(linger=REPLY_LINGER_MS)  # the last reply must leave before we exit
    context.term()


def round_trip(plan: ShardPlan, ops: int) -> dict:
    """The same cycles as :func:`in_process`, each operation one request to a server process."""
    queue = mp.get_context("fork").Queue()
    server = mp.get_context("fork").Process(target=_serve, args=(queue, plan, ops), daemon=True)
    server.start()
    context = zmq.Context()
    client = Client(context, queue.get(timeout=60), Counters())
    done, start = 0, time.perf_counter()
    try:
        while done < ops:
            task = client.call({"op": "lease", "name": "w"})[0]["task"]
            done += 1
            for batch in range(task[2] + 1, task[3]):
                if done >= ops:
                    break
                client.call({"op": "progress", "name": "w", "task": task, "next": batch})
                done += 1
            if done < ops:
                client.call({"op": "finish", "name": "w", "task": task})
                done += 1
        elapsed = time.perf_counter() - start
    finally:
        context.destroy(linger=0)
        server.join(timeout=30)
        if server.is_alive():
            server.kill()
    return {"ops": done, "seconds": elapsed, "ops_per_s": done / elapsed,
            "round_trip_us": elapsed / done * 1e6}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset-size", type=int, default=1_000_000)
    parser.add_argument("--shard-size", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--ops", type=int, default=200_000, help="operations per in-process repeat")
    parser.add_argument("--rpc-ops", type=int, default=20_000, help="operations per RPC repeat")
    parser.add_argument("--snapshot-every", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="few operations: checks it works")
    parser.add_argument("--out", default="benchmarks/results/runtime_shards.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.ops, args.rpc_ops, args.repeats = 5_000, 1_000, 2
    plan = make_plan(args.dataset_size, args.shard_size, args.batch_size)
    runs = {"in_process": [], "round_trip": []}
    for _ in range(args.repeats):  # interleaved, so drift in the machine's load hits both
        runs["in_process"].append(in_process(plan, args.ops, args.snapshot_every))
        runs["round_trip"].append(round_trip(plan, args.rpc_ops))
    medians = {mode: statistics.median(r["ops_per_s"] for r in rs) for mode, rs in runs.items()}
    for mode, value in medians.items():
        print(f"{mode:>10}: {value:12,.0f} ops/s (median of {args.repeats})", file=sys.stderr)
    report = {
        "benchmark": "runtime_shards",
        "simulated": False,
        "cpus": os.cpu_count(),
        "plan": plan.to_dict(),
        "num_shards": plan.num_shards,
        "snapshot_every": args.snapshot_every,
        "runs": runs,
        "median_ops_per_s": medians,
        "round_trip_over_in_process": medians["round_trip"] / medians["in_process"],
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
