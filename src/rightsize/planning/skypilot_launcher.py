"""A Python launcher beside the SkyPilot task file, so SkyPilot chooses by the job's total cost.

SkyPilot's optimizer scores a task's candidate resources by price times the time the
task takes, and takes every task to take an hour unless a time estimator is set
(``sky.Task.set_time_estimator``, a function from ``sky.Resources`` to seconds) — a
function, which a YAML file cannot carry. So ``rightsize plan --launcher`` writes a
short script that builds the task from the exported YAML, offers SkyPilot every
instance type the plan predicted for the task's shape (the same number of nodes at
the same batch per node, meeting the deadline and budget), sets the estimator from a
table of those predictions, and launches.

One more step is needed than "set the estimator and call ``sky.launch``": in SkyPilot
0.14 (read in its source, ``sky/client/sdk.py``) ``sky.launch`` sends the task to
SkyPilot's API server as YAML, where the optimizer runs, and the estimator does not
survive that. The script therefore
scores the candidates itself, as SkyPilot's optimizer does (``Resources.get_cost`` of
the estimated seconds, times the nodes: SkyPilot's own prices, rightsize's times),
pins the task to the cheapest, and launches that.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any

from rightsize.core.catalog import InstanceType
from rightsize.perf.comm import CommModel
from rightsize.planning.estimate import Estimator, PlanRequest
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan, Config, Slot
from rightsize.planning.skypilot import SKYPILOT_CLOUDS, TaskShape


@dataclass(frozen=True)
class Candidate:
    """One instance type the task could run on: ``plan`` is the task's shape on it."""

    instance: InstanceType
    plan: CloudPlan

    @property
    def infra(self) -> str:
        return f"{SKYPILOT_CLOUDS.get(self.instance.cloud, '*')}/{self.instance.region}"

    def row(self) -> dict[str, Any]:
        """The script's table row: where it is, its accelerators, the predicted job time."""
        return {"infra": self.infra, "accelerator": self.instance.accelerator_name,
                "accelerator_count": self.instance.accelerator_count,
                "seconds": round(self.plan.total_seconds, 1),
                "rightsize_cost_usd": round(self.plan.total_cost, 4)}  # fmt: skip


def candidates(shape: TaskShape, options: Sequence[InstanceOption], comm: CommModel,
               request: PlanRequest) -> list[Candidate]:  # fmt: skip
    """Every planned type that can run ``shape``'s nodes at its batch, predicted by the planner's
    estimator, within the deadline and budget; ``shape``'s own type first."""
    estimator = Estimator({o.name: o for o in options}, comm, request)
    limits = request.constraints
    nodes, batch = shape.num_nodes, shape.worker_batch
    found = []
    for option in options:
        if nodes > option.cap or batch > option.bmax or batch % option.devices:
            continue
        plan = estimator.estimate(Config((Slot(option.name, nodes, batch),)))
        if limits.deadline_s is not None and plan.total_seconds > limits.deadline_s:
            continue
        if limits.budget_usd is not None and plan.total_cost > limits.budget_usd:
            continue
        found.append(Candidate(option.instance, plan))
    found.sort(key=lambda c: c.instance.name != shape.instance.name)
    return found


def launcher_script(task_file: Path, shape: TaskShape, found: Sequence[Candidate],
                    spot: bool, precision: str) -> str:  # fmt: skip
    """The launcher's source: the table of ``found``'s predictions and the code that uses it."""
    table = {c.instance.name: c.row() for c in found}
    plan = shape.plan
    nodes = f"{shape.num_nodes} node{'s' if shape.num_nodes != 1 else ''}"
    about = (f"Written by `rightsize plan --launcher` for {plan.config} ({plan.policy}): "
             f"{nodes}, {shape.worker_batch} samples per node per step, {plan.iterations} "
             f"steps; predicted at {precision}")  # fmt: skip
    return _SCRIPT.substitute(
        about=textwrap.fill(about, 88), nodes=nodes,
        task_file=repr(str(task_file)), spot=repr(spot),
        table=_table_literal(table),
    )  # fmt: skip


def _table_literal(table: dict[str, dict[str, Any]]) -> str:
    """The table as Python source, one entry per instance type (None stays None)."""
    lines = ["{"]
    for name, row in table.items():
        fields = [f"{key!r}: {value!r}" for key, value in row.items()]
        lines += [f"    {name!r}: {{", f"        {', '.join(fields[:3])},",
                  f"        {', '.join(fields[3:])},", "    },"]  # fmt: skip
    return "\n".join([*lines, "}"])


_SCRIPT = Template('''\
#!/usr/bin/env python3
"""Launch rightsize's plan with SkyPilot, on the instance type with the lowest total cost.

$about.

SkyPilot prices a task at one hour unless it has a time estimator. This script sets one
(sky.Task.set_time_estimator) from PREDICTED: the whole job's predicted seconds on
$nodes of each instance type the plan evaluated for this shape. Since sky.launch sends
the task to SkyPilot's API server as YAML, which cannot carry the estimator, the script
scores the candidates as SkyPilot's optimizer does (SkyPilot's price for the estimated
seconds, Resources.get_cost, times the nodes) and pins the task to the cheapest.

Resources the plan did not evaluate (estimated_seconds): a type named in PREDICTED takes
its time; otherwise resources with a planned accelerator take the slowest time planned
for that accelerator; otherwise the slowest time in PREDICTED (FALLBACK_S), so an
unpredicted type never wins on a time nobody predicted.

Usage: python THIS_FILE [--dry-run] [--cluster NAME]
"""

import argparse
import sys

import sky

TASK_YAML = $task_file
USE_SPOT = $spot
# instance type -> where, its accelerators, the predicted seconds of the whole job on the
# task's nodes, and the cost rightsize's catalog gives it (SkyPilot's own prices decide)
PREDICTED = $table
FALLBACK_S = max(row["seconds"] for row in PREDICTED.values())


def estimated_seconds(resources):
    """Predicted seconds of the whole job on ``resources`` (see the docstring's fallback)."""
    row = PREDICTED.get(resources.instance_type)
    if row is not None:
        return row["seconds"]
    wanted = {name.lower() for name in (resources.accelerators or {})}
    same = [r["seconds"] for r in PREDICTED.values()
            if r["accelerator"] and r["accelerator"].lower() in wanted]
    return max(same) if same else FALLBACK_S


def candidates():
    return [sky.Resources(infra=row["infra"], instance_type=name, use_spot=USE_SPOT)
            for name, row in PREDICTED.items()]


def total_cost(resources, num_nodes):
    """SkyPilot's optimizer's score: the price of the estimated time, times the nodes."""
    return resources.get_cost(estimated_seconds(resources)) * num_nodes


def build_task():
    task = sky.Task.from_yaml(TASK_YAML)
    task.set_resources(set(candidates()))
    task.set_time_estimator(estimated_seconds)
    return task


def ranked(task):
    return sorted(task.resources, key=lambda r: total_cost(r, task.num_nodes))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the choice, launch nothing")
    parser.add_argument("--cluster", help="SkyPilot cluster name")
    args = parser.parse_args(argv)
    task = build_task()
    order = ranked(task)
    for resources in order:
        print(f"{resources.instance_type}: {estimated_seconds(resources) / 3600:.2f} h, "
              f"$${total_cost(resources, task.num_nodes):.2f} at SkyPilot's prices")
    task.set_resources(order[0])
    print(f"chosen: {task.num_nodes} x {order[0].instance_type}")
    if args.dry_run:
        return 0
    sky.stream_and_get(sky.launch(task, cluster_name=args.cluster))
    return 0


if __name__ == "__main__":
    sys.exit(main())
''')
