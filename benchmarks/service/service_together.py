"""Several real jobs submitted together against the same jobs one after another (issue 38 item 3).

The service's claim (NEARCHUS §IV, DLRover's Brain): a scheduler that launches each job
small and grows it into what is free finishes a batch of jobs sooner than running them
in turn, each alone on the machine. Four small Wide & Deep parameter-server jobs (each
with its own model size, so that none launches from another's history), each with the
whole machine as its budget, go through the real allocator and runner processes on a
fresh SQLite store twice per policy:

- **one after another**: submit a job, wait for it to end, submit the next;
- **together**: submit all four at once; the allocator admits what fits and grows jobs
  into what the others leave.

Both batches start at t0 with all four jobs wanting to run, so a job's JCT is its end
less t0 in both (one after another, a job's wait for the ones before it is its
queueing). Reported per batch: makespan, mean JCT, mean queueing (t0 to its launch),
the CPU core-seconds the jobs held (their quotas, from the store) and the machine's busy
CPU seconds over the batch (``/proc/stat``: what the jobs, their masters and the service
really used, read beside the books rather than from them), and each job's exactly-once
check. The goal: together finish >= 1.3x sooner (makespan) under every policy.

The together batches run twice: with the allocator's CPU books at the machine's cores
(quotas never sum past it: NEARCHUS's Resource Allocator) and at twice them, as
``rightsize serve --cpu-overcommit 2`` sets them (a quota is a cap; jobs that use less
than they hold leave the rest to the others).

FA-BF's nodes are 5 vCPU in NEARCHUS (a 10-CPU minimum); on this 2-CPU machine it runs
with ``cores_per_node: 0.5`` (the same exhaustive search over (p, w), smaller nodes).
The order of the two batches alternates per round so that drift in the shared host's
load does not favour one.

    python benchmarks/service/service_together.py --out benchmarks/results/service_together.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from rightsize.cli.args import parse_options
from rightsize.cli.serve_cmd import capacity
from rightsize.core.spec import parse_job_spec
from rightsize.runtime.backends.local import machine_resources
from rightsize.service.allocator import Allocator, LaunchShare
from rightsize.service.models import JobPhase
from rightsize.service.store import Store

#: The policies compared, with what each needs to run on a 2-CPU machine.
POLICIES = {"nearchus+": {}, "dlrover": {}, "fa-bf": {"cores_per_node": 0.5}}
#: (name, rows, epochs, model options): four jobs of different sizes and models.
JOBS = (
    ("wd-a", 200_000, 2, {"embed_dim": 8, "hidden": [64, 32]}),
    ("wd-b", 100_000, 3, {"embed_dim": 8, "hidden": [128, 64]}),
    ("wd-c", 150_000, 2, {"embed_dim": 16, "hidden": [64, 32]}),
    ("wd-d", 100_000, 2, {"embed_dim": 8, "hidden": [32, 16]}),
)


def policy_of(label: str) -> dict:
    """``dlrover`` or ``nearchus+:launch_min_cores=1`` (a policy with parameters, measured
    beside its defaults) as a job file's ``policy:``."""
    name, *pairs = label.split(":")
    if name not in POLICIES:
        raise SystemExit(f"error: --policies: unknown {name!r} (of {', '.join(POLICIES)})")
    return {"name": name, "params": {**POLICIES[name], **parse_options(pairs, "--policies")}}


def job(name: str, rows: int, epochs: int, options: dict, policy: str, cpu: float) -> dict:
    return {"name": name, "workload": "wide-deep", "dataset": "synthetic-criteo",
            "options": options, "dataset_size": rows, "batch_size": 512, "epochs": epochs,
            "strategy": "ps", "budget": {"cpu": cpu, "memory": "4Gi"},
            "policy": policy_of(policy),
            "checkpoint": {"interval": "60s"}, "training": {"optimizer": "adagrad", "lr": 0.05},
            "runtime": {"metric_interval": "2s", "startup_timeout": "300s"}}  # fmt: skip


def busy_cpu_s() -> float:
    """The machine's CPU seconds spent not idle since boot (``/proc/stat``'s cpu line)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields[:8]) - idle) / 100.0  # USER_HZ ticks


def wait_done(store: Store, job_ids: list[int], deadline: float, allocator: Allocator) -> None:
    while not all(JobPhase(store.job_by_id(i).phase).done for i in job_ids):
        if time.monotonic() > deadline:
            for i in job_ids:
                allocator.cancel(store.job_by_id(i).name)
            raise SystemExit("error: the batch did not finish within --timeout")
        time.sleep(0.5)


def run_batch(policy: str, together: bool, timeout_s: float, overcommit: float,
              share: LaunchShare = LaunchShare.FAIR) -> dict[str, Any]:  # fmt: skip
    machine, books = machine_resources(), capacity(None, None, overcommit)  # as serve sets it
    specs = [parse_job_spec(job(*j, policy=policy, cpu=machine.cpu_cores)) for j in JOBS]
    with tempfile.TemporaryDirectory(prefix="rightsize-together-") as tmp:
        store = Store(str(Path(tmp) / "store.db"))
        allocator = Allocator(store, books, Path(tmp) / "work", poll_s=0.5, launch_share=share)
        allocator.start()
        deadline = time.monotonic() + timeout_s
        try:
            t0, busy0 = time.time(), busy_cpu_s()
            if together:
                ids = [allocator.submit(spec, owner_id=None).id for spec in specs]
                wait_done(store, ids, deadline, allocator)
            else:
                ids = []
                for spec in specs:
                    ids.append(allocator.submit(spec, owner_id=None).id)
                    wait_done(store, ids[-1:], deadline, allocator)
            wall_s, busy_s = time.time() - t0, busy_cpu_s() - busy0
            rows = [_job_row(store, i, t0) for i in ids]
        finally:
            allocator.stop()
            store.close()
    held = sum(r["held_core_s"] or 0.0 for r in rows)
    batch = {
        "policy": policy, "mode": "together" if together else "one after another",
        "overcommit": overcommit, "books_cpu": books.cpu_cores, "launch_share": str(share),
        "makespan_s": max(r["end_s"] for r in rows), "wall_s": wall_s,
        "mean_jct_s": statistics.mean(r["end_s"] for r in rows),
        "mean_queueing_s": statistics.mean(r["queued_s"] for r in rows),
        "held_core_s": held, "machine_busy_cpu_s": busy_s,
        "mean_held_cores": held / wall_s, "mean_busy_cores": busy_s / wall_s,
        "all_exactly_once": all(r["exactly_once"] for r in rows),
        "all_finished": all(r["phase"] == "finished" for r in rows), "jobs": rows,
    }  # fmt: skip
    print(f"{policy:10s} {batch['mode']:18s} x{overcommit:g} {share:4s} makespan {batch['makespan_s']:6.1f} s, mean JCT "
          f"{batch['mean_jct_s']:6.1f} s, queueing {batch['mean_queueing_s']:5.1f} s, held "
          f"{batch['mean_held_cores']:.2f} cores, busy {batch['mean_busy_cores']:.2f} cores, "
          f"exactly once: {batch['all_exactly_once']}", file=sys.stderr)  # fmt: skip
    return batch


def _job_row(store: Store, job_id: int, t0: float) -> dict[str, Any]:
    done = store.job_by_id(job_id)
    applied = [s for s in store.shapes(job_id) if s.applied]
    return {"job": done.name, "phase": done.phase, "error": done.error,
            "queued_s": (done.started_at or done.finished_at) - t0,
            "end_s": done.finished_at - t0, "run_s": done.measured_time_s,
            "held_core_s": None if done.measured_core_h is None else done.measured_core_h * 3600,
            "exactly_once": bool((done.accounting or {}).get("exactly_once")),
            "launch_source": done.launch_source, "launch_note": done.launch_note,
            "moves": len(applied) - 1,
            "shapes": [{"time_s": s.time_s, "action": s.action, "shape": s.shape}
                       for s in applied]}  # fmt: skip


def summary(batches: list[dict]) -> dict[str, Any]:
    """Per policy and books: together's speed-up over one after another, round by round."""
    out: dict[str, Any] = {}
    for policy in dict.fromkeys(b["policy"] for b in batches):
        alone = [b for b in batches if b["policy"] == policy and b["mode"] != "together"]
        for books, share in dict.fromkeys((b["overcommit"], b["launch_share"])
                                          for b in batches if b["mode"] == "together"):  # fmt: skip
            together = [b for b in batches if b["policy"] == policy and b["mode"] == "together"
                        and b["overcommit"] == books
                        and b["launch_share"] == share]  # fmt: skip
            pairs = list(zip(alone, together, strict=True))
            makespan = [a["makespan_s"] / t["makespan_s"] for a, t in pairs]
            jct = [a["mean_jct_s"] / t["mean_jct_s"] for a, t in pairs]
            key = f"{policy} x{books:g} {share}"
            out[key] = {
                "policy": policy, "overcommit": books, "launch_share": share,
                "makespan_speedup_median": statistics.median(makespan),
                "makespan_speedup": makespan, "mean_jct_speedup_median": statistics.median(jct),
                "mean_jct_speedup": jct,
                "goal_met": statistics.median(makespan) >= 1.3
                and all(b["all_exactly_once"] and b["all_finished"] for p in pairs for b in p),
            }  # fmt: skip
            print(f"{key:19s} together finish {out[key]['makespan_speedup_median']:.2f}x "
                  f"sooner ({min(makespan):.2f}-{max(makespan):.2f}), mean JCT "
                  f"{out[key]['mean_jct_speedup_median']:.2f}x", file=sys.stderr)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated, of " + ", ".join(POLICIES) + "; NAME:KEY=VALUE "
                        "sets a parameter")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="pairs of batches per policy")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per batch, seconds")
    parser.add_argument("--overcommit", default="1,2", help="the together batches' CPU books "
                        "as multiples of the machine's cores, as `serve --cpu-overcommit` sets "
                        "them (default 1,2: the machine, and twice it)")  # fmt: skip
    parser.add_argument("--launch-share", default="fair", help="the together batches' "
                        "launch shares, as `serve --launch-share` sets them (comma-separated: "
                        "fair, free; default fair)")  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/service_together.json")
    args = parser.parse_args(argv)
    policies = args.policies.split(",")
    for label in policies:
        policy_of(label)  # an unknown name or a bad parameter, before anything runs
    result = {"benchmark": "service_together",
              "load_before": load_note(), "capacity_cpu": machine_resources().cpu_cores,
              "jobs": [{"name": n, "rows": r, "epochs": e, "options": o} for n, r, e, o in JOBS]}  # fmt: skip
    shares = [LaunchShare(s) for s in args.launch_share.split(",")]
    modes = [(False, 1.0, LaunchShare.FAIR)] + [
        (True, float(f), share) for f in args.overcommit.split(",") for share in shares
    ]
    batches = []
    for round_ in range(args.rounds):
        for policy in policies:
            order = modes if round_ % 2 == 0 else modes[::-1]
            batches.extend(run_batch(policy, together, args.timeout, books, share)
                           for together, books, share in order)  # fmt: skip
    result.update(batches=batches, summary=summary(batches), load_after=load_note())
    write_report(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
