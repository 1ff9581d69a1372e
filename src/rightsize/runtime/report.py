"""The JSON report of a finished job: shapes and why, throughput, usage, restarts, accounting.

Everything comes from the state file (timeline, samples, events, checkpoints)
except the accounting, which is read from the final checkpoint's update logs:
per parameter-server group (or the allreduce model), how often each sample
index was applied in each epoch. The headline — steps, samples, epochs — is
that accounting too: what the parameter servers applied, not what the shard
queues handed out (those are kept beside it as ``leased``).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from rightsize.runtime import checkpoint
from rightsize.runtime.accounting import count_log

if TYPE_CHECKING:
    from rightsize.runtime.master import Master

#: Problems named in an exactly-once failure's one-line message before the rest are counted.
PROBLEMS_NAMED = 4


def build_report(master: Master) -> dict[str, Any]:
    job = master.store.job()
    samples = master.store.samples()
    timeline = master.store.timeline()
    shards = master.job.shards
    accounting = account(master)
    applied = accounting.get("applied", {})
    return {
        "job": master.spec.name,
        "workload": master.spec.workload,
        "dataset": master.workload.dataset.name,
        "strategy": str(master.spec.strategy),
        "policy": master.policy.name,
        "isolation": master.backend.mode,
        "wall_time_s": master.time_s(),
        "steps": applied.get("steps"),
        "samples": applied.get("samples"),
        "epochs": applied.get("epochs"),
        "leased": {"steps": shards.batches_done, "samples": shards.samples_done,
                   "epochs": shards.epoch + 1},  # fmt: skip
        "final_shape": master.job.shape.to_dict(),
        "timeline": timeline,
        "transitions": [
            {"action": t["action"], "transition_s": t["transition_s"], "details": t["details"]}
            for t in timeline if t["applied"] and t["transition_s"] is not None
        ],
        "throughput": [
            {k: s[k] for k in ("time_s", "steps_per_s", "samples_per_s", "loss", "e_job")}
            for s in samples
        ],
        "nodes": node_usage(samples),
        "restarts": {
            "masters": job["masters"] - 1,
            "nodes": dict(master.job.restarts),
            "events": master.store.events(),
        },
        "accounting": accounting,
    }  # fmt: skip


def node_usage(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per node: mean CPU used and allocated, peak memory, mean network rates."""
    per_node: dict[str, list[dict]] = {}
    for sample in samples:
        for node in sample["nodes"]:
            per_node.setdefault(node["name"], []).append(node)
    return {
        name: {
            "role": rows[-1]["role"],
            "cpu_used_mean": statistics.fmean(r["cpu_used"] for r in rows),
            "cpu_allocated_mean": statistics.fmean(r["cpu_allocated"] for r in rows),
            "memory_peak": max(r["memory_used"] for r in rows),
            "memory_allocated": rows[-1]["memory_allocated"],
            "net_in_mean": statistics.fmean(r["net_in"] for r in rows),
            "net_out_mean": statistics.fmean(r["net_out"] for r in rows),
            "intervals": len(rows),
        }
        for name, rows in per_node.items()
    }


def read_logs(files: dict[str, str]) -> dict[str, list]:
    """Update logs of a checkpoint: ``{holder/group: [(key, indices), ...]}``."""
    logs = {}
    for holder, path in sorted(files.items()):
        state = checkpoint.load(path)
        if "groups" in state:
            for i, group in enumerate(state["groups"]):
                logs[f"{holder}/group{i}"] = group["log"]
        else:
            logs[holder] = state["log"]
    return logs


def account(master: Master) -> dict[str, Any]:
    """Exactly-once per epoch, checked on the final checkpoint's logs."""
    row = master.store.latest_checkpoint()
    if row is None:
        return {"checked": False}
    plan, shards = master.plan, master.job.shards
    whole = plan.steps is None and shards.finished
    # epochs before the checkpoint's own were complete when it was taken; a last, partial
    # epoch (a job of ``steps``): at most once
    complete = plan.epochs if whole else int(row.shards["epoch"])
    holders, tallies = {}, []
    for name, log in read_logs(row.files).items():
        tally = count_log(log, plan.dataset_size, complete)
        tallies.append(tally)
        holders[name] = {
            "exactly_once": tally.exactly_once(complete),
            "problems": [e.epoch for e in tally.problems(complete)],
            **tally.to_dict(),
        }
    return {
        "checked": True,
        "checkpoint": row.version,
        "complete_epochs": complete,
        "exactly_once": bool(holders) and all(h["exactly_once"] for h in holders.values()),
        "applied": {  # what every holder applied (the least of them)
            "steps": min((t.steps for t in tallies), default=0),
            "samples": min((t.samples for t in tallies), default=0),
            "epochs": min((t.complete_epochs() for t in tallies), default=0),
        },
        "holders": holders,
    }


def violations(report: dict[str, Any]) -> list[str]:
    """Where a report's accounting breaks exactly-once, in words (empty if it holds)."""
    accounting = report["accounting"]
    if not accounting.get("checked"):
        return ["no checkpoint holds the update logs to check"]
    problems = []
    for holder, tally in accounting["holders"].items():
        bad = set(tally["problems"])
        for e in tally["epochs"]:
            if e["epoch"] not in bad:
                continue
            parts = []
            if e["epoch"] < accounting["complete_epochs"] and e["missing"]:
                parts.append(f"{e['missing']} of {tally['dataset_size']} samples never applied")
            if e["duplicated"]:
                parts.append(f"{e['duplicated']} extra applications")
            problems.append(f"{holder} epoch {e['epoch']}: {', '.join(parts)}")
    if len(problems) > PROBLEMS_NAMED:
        problems = problems[:PROBLEMS_NAMED] + [f"and {len(problems) - PROBLEMS_NAMED} more"]
    return problems
