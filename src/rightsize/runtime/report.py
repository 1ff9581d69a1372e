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
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rightsize.runtime import checkpoint
from rightsize.runtime.accounting import count_log
from rightsize.runtime.records import (
    NodeReading,
    ProgressStatus,
    Report,
    TimelineAction,
    TimelineRow,
)

if TYPE_CHECKING:  # the values a report is built from
    from rightsize.runtime.nodes import NodeState
    from rightsize.runtime.script_state import ScriptState
    from rightsize.runtime.shards import ShardManager, ShardPlan
    from rightsize.runtime.state import CheckpointRow

#: Problems named in an exactly-once failure's one-line message before the rest are counted.
PROBLEMS_NAMED = 4


def build_report(*, job: str, workload: str, strategy: str, policy: str, isolation: str,
                 wall_time_s: float, headline: dict[str, Any], final_shape: dict[str, Any],
                 timeline: list[dict[str, Any]], samples: list[dict[str, Any]], masters: int,
                 node_restarts: dict[str, int],
                 events: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """The report of a job that ended, as JSON: its names, its ``headline`` (steps, samples,
    epochs and their accounting: :func:`workload_headline`, :func:`script_headline`), and
    what the state file holds (``timeline``, ``samples``, ``events``; ``masters`` that ran
    it)."""
    rows = [TimelineRow.from_json(r) for r in timeline]
    readings = [ProgressStatus.from_json(s) for s in samples]
    return Report(
        job, workload, strategy, policy, isolation, wall_time_s, headline, final_shape,
        timeline=tuple(rows),
        moves=tuple(moves(rows, readings)),
        transitions=tuple(
            {"action": str(t.action), "transition_s": t.transition_s, "details": t.details}
            for t in rows if t.applied and t.transition_s is not None
        ),
        throughput=tuple(
            {"time_s": s.time_s, "steps_per_s": s.steps_per_s, "samples_per_s": s.samples_per_s,
             "loss": s.loss, "e_job": s.e_job}
            for s in readings
        ),
        nodes=node_usage(readings),
        masters_restarted=masters - 1,
        node_restarts=dict(node_restarts),
        events=tuple(events),
    ).to_json()  # fmt: skip


def workload_headline(dataset: str, shards: ShardManager,
                      accounting: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """What every parameter holder applied (the ``accounting``), beside what was handed out."""
    applied = accounting.get("applied", {})
    return {
        "dataset": dataset,
        "steps": applied.get("steps"),
        "samples": applied.get("samples"),
        "epochs": applied.get("epochs"),
        "leased": {"steps": shards.batches_done, "samples": shards.samples_done,
                   "epochs": shards.epoch + 1},  # fmt: skip
        "accounting": accounting,
    }


def script_headline(script: ScriptState, nodes: Iterable[NodeState], steps: int,
                    epoch: int | None, path: str,
                    args: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """A script's optimizer ``steps`` and samples (what its ranks took, groups restarted
    included), its groups' starts, and its data's accounting."""
    return {
        "dataset": None,
        "steps": steps,
        "samples": sum(n.stats.samples for n in nodes) + script.samples_before,
        "epochs": epoch + 1 if epoch is not None else None,
        "script": {
            "path": path,
            "args": list(args),
            "groups": [start.details() | {"generation": start.generation}
                       for start in script.starts],  # fmt: skip
            "failed_restarts": script.failed_restarts,
            "saves": len(script.saves_at),
            "ended_after_the_script": dict(script.ended_late),
        },
        "accounting": script_accounting(script),
    }


def script_accounting(script) -> dict[str, Any]:
    """Which guarantee held for the script's data: with an ElasticSampler, the ledger's
    (every epoch's samples handed out once from the script's checkpoints); without, the
    script's own (its checkpoint decides what a restart trains again)."""
    if not script.sampler_used:
        return {"checked": False, "data": "the script's own sampler: after a restart its "
                "checkpoint decides which samples are trained again"}  # fmt: skip
    summary = script.ledger.summary(script.ledger.applied)
    return {
        "checked": True,
        "data": "rightsize.torch.ElasticSampler: every sample at most once per epoch "
                "across restarts, counted from the script's own checkpoints",
        "exactly_once": not summary["padded"] and not summary["unverified_files"],
        **summary,
    }  # fmt: skip


def script_violations(accounting: dict[str, Any]) -> list[str]:
    """Where the ElasticSampler's guarantee did not hold (an epoch the script stopped in the
    middle of is the script's choice, not a violation)."""
    if not accounting.get("checked"):
        return []
    problems = []
    if accounting["padded"]:
        problems.append(f"{accounting['padded']} samples repeated: a group started with fewer "
                        "samples left in an epoch than it had ranks")  # fmt: skip
    for path in accounting["unverified_files"]:
        problems.append(f"the script loaded {path}, which it was not seen writing: what it "
                        "holds is unknown")  # fmt: skip
    return problems


def moves(timeline: Sequence[TimelineRow],
          samples: Sequence[ProgressStatus]) -> list[dict[str, Any]]:  # fmt: skip
    """Every plan after the launch: what it did and why, whether it was taken, what it cost,
    and the job's median samples/s between the move before it and it, and between it and
    the next move (or the end)."""
    rows = [t for t in timeline[1:] if t.action != TimelineAction.INTERRUPT]
    taken = [t.time_s for t in rows if t.applied]
    out = []
    for row in rows:
        begin = max([t for t in taken if t < row.time_s], default=0.0)
        end = min([t for t in taken if t > row.time_s], default=float("inf"))
        before = [s.samples_per_s for s in samples if begin < s.time_s <= row.time_s]
        after = [s.samples_per_s for s in samples if row.time_s < s.time_s <= end]
        details = row.details or {}
        out.append({
            "time_s": row.time_s, "action": str(row.action), "taken": row.applied,
            "reason": row.reason, "transition_s": row.transition_s,
            "restart_s": details.get("restart_s"), "lost_s": details.get("lost_s"),
            "samples_per_s_before": statistics.median(before) if before else None,
            "samples_per_s_after": statistics.median(after) if after else None,
        })  # fmt: skip
    return out


def node_usage(samples: Sequence[ProgressStatus]) -> dict[str, dict[str, float]]:
    """Per node: mean CPU used and allocated, peak memory, mean network rates."""
    per_node: dict[str, list[NodeReading]] = {}
    for sample in samples:
        for node in sample.nodes:
            per_node.setdefault(node.name, []).append(node)
    return {
        name: {
            "role": rows[-1].role,
            "cpu_used_mean": statistics.fmean(r.cpu_used_cores for r in rows),
            "cpu_allocated_mean": statistics.fmean(r.cpu_allocated_cores for r in rows),
            "memory_peak": max(r.memory_used_bytes for r in rows),
            "memory_allocated": rows[-1].memory_allocated_bytes,
            "net_in_mean": statistics.fmean(r.net_in_bytes_per_s for r in rows),
            "net_out_mean": statistics.fmean(r.net_out_bytes_per_s for r in rows),
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


def account(row: CheckpointRow | None, plan: ShardPlan, shards: ShardManager) -> dict[str, Any]:
    """Exactly-once per epoch, checked on the logs of the final checkpoint (``row``)."""
    if row is None:
        return {"checked": False}
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
    if "script" in report:  # a script's data: the ledger's guarantee, when it had one
        return script_violations(accounting)
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
