"""Every move a policy can ask for, on real jobs run as a user runs them (issue 17, item 3).

Each scenario is a job file under ``examples/`` (its header says which move it shows and
why the policy makes it) run with ``rightsize run FILE --policy NAME --fresh --report
...`` in a subprocess, the command a user types. The script then reads what the report's
timeline *applied* — not what a policy was expected to ask for — and names the moves each
applied row made, from the shapes before and after it and the mechanism's own timings
(:func:`moves_of`): a PS or worker added or removed, a PS replaced, a node's CPU or memory
resized in place, CPU moved between nodes (a rebalance), a node relaunched with more
memory after an OOM kill. A scenario passes when its expected moves are among them, the
command exited 0 and the report's accounting says every sample was applied exactly once
per epoch. Usage (real processes in cgroups; on a shared machine under the CPU lock):

    flock /tmp/rightsize-cpu.lock python benchmarks/run/runtime_moves.py \\
        --out benchmarks/results/runtime_moves.json
    python benchmarks/run/runtime_moves.py --scenarios add-ps,oom   # some of them

Each report is kept under ``runtime_moves_reports/`` beside the output. Exits 1 if a
scenario's expected move did not happen (or its run failed), so it doubles as a check.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note

ROOT = Path(__file__).resolve().parents[2]
#: Longest one scenario may run (the jobs take about a minute here).
TIMEOUT_S = 900


@dataclass(frozen=True)
class Scenario:
    """One real run: a job file under a policy, and the moves it must show."""

    name: str
    job: str
    policy: str
    expect: tuple[str, ...]


SCENARIOS = (
    Scenario("add-ps", "examples/mlp-link-bound.yaml", "nearchus", ("add_ps",)),
    Scenario("hot-ps", "examples/wide-deep-hot-ps.yaml", "dlrover", ("replace_ps",)),
    Scenario("too-big-ps-dlrover", "examples/wide-deep-too-big-ps.yaml", "dlrover",
             ("remove_ps", "resize_cpu", "resize_memory", "add_worker")),
    Scenario("too-big-ps-nearchus", "examples/wide-deep-too-big-ps.yaml", "nearchus",
             ("rebalance",)),
    Scenario("remove-worker", "examples/mlp-one-shard.yaml", "nearchus+", ("remove_worker",)),
    Scenario("oom", "examples/wide-deep-oom.yaml", "nearchus", ("relaunch_oom",)),
)  # fmt: skip

#: Every move a plan can make on a running job (docs/runtime.md, "Elastic operations").
MOVES = ("add_ps", "remove_ps", "replace_ps", "add_worker", "remove_worker", "resize_cpu",
         "resize_memory", "rebalance", "relaunch_oom")  # fmt: skip


def moves_of(timeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The moves each applied row after the launch made, read from the timeline alone.

    Nodes present after a row and not before were added, the reverse removed; a PS added and
    another removed by a ``replace_ps`` row is one replacement. A node in both shapes with
    other CPU or memory was resized in place if the row's details time its resize
    (``resize NODE_s``), or relaunched with more memory after an OOM kill (``relaunch``).
    A ``rebalance`` row moved CPU between nodes.
    """
    applied = [row for row in timeline if row["applied"]]
    found = []
    for before, row in pairwise(applied):
        old = {n["name"]: n for n in before["shape"]["nodes"]}
        new = {n["name"]: n for n in row["shape"]["nodes"]}
        changes: dict[str, list[str]] = {}
        for name in new.keys() - old.keys():
            changes.setdefault(f"add_{new[name]['role']}", []).append(name)
        for name in old.keys() - new.keys():
            changes.setdefault(f"remove_{old[name]['role']}", []).append(name)
        if row["action"] == "replace_ps" and "add_ps" in changes and "remove_ps" in changes:
            changes["replace_ps"] = changes.pop("remove_ps") + changes.pop("add_ps")
        for name in sorted(new.keys() & old.keys()):
            for key in ("cpu", "memory"):
                if new[name][key] == old[name][key]:
                    continue
                in_place = f"resize {name}_s" in row["details"]
                move = f"resize_{key}" if in_place else "relaunch"  # a dead node brought back
                if move == "relaunch" and row["action"] == "relaunch_oom":
                    move = "relaunch_oom"
                if name not in changes.setdefault(move, []):
                    changes[move].append(name)
        if row["action"] == "rebalance":
            changes["rebalance"] = changes.get("resize_cpu", [])
        for move, nodes in changes.items():
            found.append({"move": move, "nodes": sorted(nodes), "time_s": row["time_s"],
                          "action": row["action"], "transition_s": row["transition_s"]})  # fmt: skip
    return found


def actions_of(timeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every row after the launch: what the policy (or the runtime) asked, and what happened."""
    return [
        {key: row[key] for key in ("time_s", "action", "reason", "applied", "transition_s",
                                   "details")}
        for row in timeline[1:]
    ]  # fmt: skip


def run_scenario(scenario: Scenario, reports: Path) -> dict[str, Any]:
    """Run one scenario with the CLI and summarize its report."""
    report_path = reports / f"{scenario.name}.json"
    command = [sys.executable, "-m", "rightsize", "run", scenario.job, "--policy",
               scenario.policy, "--fresh", "--quiet", "--report", str(report_path)]  # fmt: skip
    shown = " ".join(["rightsize", *command[3:]])
    print(f"{scenario.name}: {shown}", file=sys.stderr, flush=True)
    report_path.unlink(missing_ok=True)
    t0 = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    row: dict[str, Any] = {
        "scenario": scenario.name, "job": scenario.job, "policy": scenario.policy,
        "command": shown, "exit_code": done.returncode,
        "elapsed_s": time.monotonic() - t0, "expect": list(scenario.expect),
    }  # fmt: skip
    if not report_path.exists():
        row.update(passed=False, error=done.stderr.strip().splitlines()[-1:] or ["no report"])
        return row
    report = json.loads(report_path.read_text())
    moves = moves_of(report["timeline"])
    accounting = report["accounting"]
    row.update(
        report=str(report_path.relative_to(ROOT) if report_path.is_relative_to(ROOT)
                   else report_path),
        wall_time_s=report["wall_time_s"],
        exactly_once=bool(accounting.get("checked") and accounting.get("exactly_once")),
        samples=report["samples"], epochs=report["epochs"],
        restarts=report["restarts"]["nodes"],
        actions=actions_of(report["timeline"]),
        moves=moves,
    )  # fmt: skip
    missing = sorted(set(scenario.expect) - {m["move"] for m in moves})
    row["missing"] = missing
    row["passed"] = not missing and row["exactly_once"] and done.returncode == 0
    return row


def where_shown(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per move, every scenario whose run made it, with when and how long it took."""
    table: dict[str, list[dict[str, Any]]] = {move: [] for move in MOVES}
    for row in rows:
        for move in row.get("moves", []):
            table.setdefault(move["move"], []).append(
                {"scenario": row["scenario"], "policy": row["policy"], "report": row["report"],
                 "time_s": move["time_s"], "transition_s": move["transition_s"],
                 "nodes": move["nodes"], "exactly_once": row["exactly_once"]}
            )  # fmt: skip
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", help="comma-separated names (default: all): "
                        + ", ".join(s.name for s in SCENARIOS))  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/runtime_moves.json")
    args = parser.parse_args(argv)
    known = {s.name: s for s in SCENARIOS}
    names = args.scenarios.split(",") if args.scenarios else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"error: unknown scenario {unknown[0]!r}; known: {', '.join(known)}",
              file=sys.stderr)  # fmt: skip
        return 2
    out = Path(args.out).resolve()
    reports = out.parent / f"{out.stem}_reports"
    reports.mkdir(parents=True, exist_ok=True)
    before = load_note()
    rows = [run_scenario(known[name], reports) for name in names]
    result = {
        "benchmark": "runtime_moves", "load_before": before, "load_after": load_note(),
        "scenarios": rows, "moves": where_shown(rows),
    }  # fmt: skip
    write_report(out, result)
    for row in rows:
        verdict = "ok" if row["passed"] else f"FAILED (missing {row.get('missing')})"
        moves = ", ".join(f"{m['move']} {m['time_s']:.1f}s" for m in row.get("moves", []))
        print(f"{row['scenario']:<22} {row['policy']:<10} {verdict}: {moves}", file=sys.stderr)
    return 0 if all(row["passed"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
