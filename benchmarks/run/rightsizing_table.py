"""The right-sizing benchmark's results as the Markdown table docs/benchmarks.md shows.

Reads what ``runtime_rightsizing.py`` wrote (nothing is run again): per workload the
oracle row, then one row per real run with its simulated twin's JCT and error, then
the fidelity (mean absolute error) and the goals as the JSON states them.

    python benchmarks/run/rightsizing_table.py benchmarks/results/runtime_rightsizing.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HEADER = (
    "| workload | start | policy | JCT s (× oracle) | time to 95% s | final / oracle "
    "| samples per CPU-s / oracle | plans applied | restarts | simulated JCT s (error) |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def plans(row: dict) -> str:
    applied = [f"{action} {n['applied']}" for action, n in row.get("plans", {}).items()
               if n["applied"]]  # fmt: skip
    return ", ".join(applied) or "none"


def simulated(row: dict) -> str:
    sim = row.get("sim") or {}
    if sim.get("jct_s") is None:
        return "—"
    error = sim.get("jct_error_percent")
    return f"{sim['jct_s']:.1f}" if error is None else f"{sim['jct_s']:.1f} ({error:+.0f}%)"


def run_row(name: str, row: dict) -> str:
    if "error" in row:
        return f"| {name} | {row['start']} | {row['policy']} | error: {row['error']} |"
    reach = row["time_to_95pct_oracle_s"]
    return (
        f"| {name} | {row['start']} | {row['policy']} | {row['jct_s']:.1f} "
        f"({_num(row['jct_over_oracle'])}) | {'never' if reach is None else f'{reach:.0f}'} "
        f"| {_num(row['final_over_oracle'])} | {_num(row['samples_per_cpu_s_over_oracle'])} "
        f"| {plans(row)} | {row['restarts']} | {simulated(row)} |"
    )


def workload_table(workload: dict) -> str:
    name, oracle = workload["workload"], workload["oracle"]
    lines = [HEADER, f"| {name} | oracle {oracle['shape']} | static | {oracle['jct_s']:.1f} "
             "(1.00) | — | 1.00 | 1.00 | — | 0 | — |"]  # fmt: skip
    lines += [run_row(name, row) for row in workload["runs"]]
    mape = workload.get("sim_jct_mape_percent")
    lines.append("")
    lines.append(f"Oracle {oracle['samples_per_s']:,.0f} samples/s; simulator's mean absolute "
                 f"JCT error {_num(mape, 1)}%; goals: {json.dumps(workload['goals'])}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: rightsizing_table.py RESULT.json", file=sys.stderr)
        return 2
    try:
        report = json.loads(Path(argv[0]).read_text())
    except (OSError, ValueError) as error:
        print(f"error: {argv[0]}: {error}", file=sys.stderr)
        return 2
    print("\n\n".join(workload_table(w) for w in report["workloads"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
