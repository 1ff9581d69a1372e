"""Export a plan as a SkyPilot task file, so that ``sky launch FILE`` starts the planned cluster.

A SkyPilot task runs one command on ``num_nodes`` nodes of one instance type.
Its alternatives (``any_of``, ``ordered``) let SkyPilot pick one of several
types, never a mix of them; its job groups (experimental since SkyPilot 0.12)
do run tasks of different types side by side, but in 0.14 their tasks reach
each other by hostname only on Kubernetes, and rightsize plans cloud VMs. So a
plan exports as one task of identical nodes:

- a plan of one instance type exports as planned;
- an allreduce plan that mixes types exports as the best single-type plan,
  which the caller searches for (``planner.best_single_type``); the file and
  the command name both plans with their predicted time and cost;
- a parameter-server plan whose servers are of another type than its workers
  runs the servers on nodes of the workers' type (the first ``num_ps`` ranks),
  and says what that changes in price and server bandwidth.

The task is pinned to the planned cloud and region (``infra``); rightsize's
catalogs have no zones, so SkyPilot picks the zone in that region. What the
nodes run is the user's command (on every node, with its role, the parameter
servers' addresses and its batch in ``RIGHTSIZE_*`` variables) or ``rightsize
run JOB`` on the head node: rightsize's runtime runs a whole job on one machine
(only its local backend exists), so the other nodes have nothing to run, and
the file says so.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from rightsize.core.catalog import InstanceType
from rightsize.core.errors import SpecError
from rightsize.core.units import format_duration, format_money
from rightsize.planning.plan import CloudPlan, Slot

# rightsize catalog -> SkyPilot cloud; the papers' tables are EC2 price lists. A
# user's own catalog names no known cloud: its region is pinned on any cloud ("*").
SKYPILOT_CLOUDS = {
    "aws": "aws",
    "gcp": "gcp",
    "azure": "azure",
    "srift-2020": "aws",
    "fc2-2018": "aws",
}
TASK_NAME = "rightsize-job"
REMOTE_JOB_DIR = "~/rightsize-job"  # where the job file is mounted on the nodes
REMOTE_VENV = "~/rightsize-venv"
PYTHON = "3.11"  # rightsize's requires-python floor


@dataclass(frozen=True)
class TaskShape:
    """What one SkyPilot task launches for a plan: ``num_nodes`` nodes of ``instance``.

    Attributes:
        plan: the plan exported (the best single-type one when the best mixes types).
        instance: every node's catalog row; its cloud and region are pinned.
        num_nodes: parameter servers and workers together.
        num_ps: how many of the nodes (the first ranks) are parameter servers.
        worker_batch: samples per worker VM per step (split across its accelerators).
        notes: how the task differs from the plan, said in the file and by the command.
    """

    plan: CloudPlan
    instance: InstanceType
    num_nodes: int
    num_ps: int
    worker_batch: int
    notes: tuple[str, ...] = ()

    @property
    def infra(self) -> str:
        """SkyPilot's ``cloud/region`` (no zone: the catalogs have none)."""
        cloud = SKYPILOT_CLOUDS.get(self.instance.cloud, "*")
        return f"{cloud}/{self.instance.region}"


def one_worker_type(plan: CloudPlan) -> bool:
    """Whether the plan's workers share one instance type (parameter servers aside)."""
    return len({s.instance for s in plan.config.slots if s.role != "ps"}) == 1


def task_shape(plan: CloudPlan, instances: Mapping[str, InstanceType], spot: bool,
               best: CloudPlan | None = None) -> TaskShape:  # fmt: skip
    """The task for ``plan``, whose instance types ``instances`` holds as the planner priced them.

    Args:
        best: the best plan, when ``plan`` is the best single-type one exported instead.

    Raises:
        SpecError: the workers are of several types (export ``best_single_type``'s plan).
    """
    if not one_worker_type(plan):
        raise SpecError(
            f"a SkyPilot task's nodes share one instance type and {plan.config} mixes "
            "several; export the best single-type plan (planner.best_single_type)"
        )
    (worker,) = (s for s in plan.config.slots if s.role != "ps")
    servers = [s for s in plan.config.slots if s.role == "ps"]
    instance = instances[worker.instance]
    notes = [] if best is None or best is plan else [_single_type_note(best, plan)]
    notes += [_ps_note(s, instances[s.instance], instance, spot, plan.price_per_hour)
              for s in servers if s.instance != worker.instance]  # fmt: skip
    num_ps = sum(s.count for s in servers)
    return TaskShape(plan, instance, worker.count + num_ps, num_ps, worker.batch, tuple(notes))


def _single_type_note(best: CloudPlan, exported: CloudPlan) -> str:
    return (
        f"the best plan, {best.config} ({_outcome(best)}), mixes instance types, which one "
        f"SkyPilot task cannot launch; this is the best single-type plan, {exported.config} "
        f"({_outcome(exported)})"
    )


def _ps_note(servers: Slot, planned: InstanceType, node: InstanceType, spot: bool,
             price_per_hour: float) -> str:  # fmt: skip
    price = price_per_hour + servers.count * (node.price(spot) - planned.price(spot))
    who = (
        "parameter server runs" if servers.count == 1 else f"{servers.count} parameter servers run"
    )
    return (
        f"the {who} on {node.name} nodes, not the planned {planned.name}, "
        f"since a SkyPilot task's nodes share one type: the cluster costs "
        f"{format_money(price)}/h instead of {format_money(price_per_hour)}/h, and a server "
        f"has {node.network_gbps:g} Gbps instead of {planned.network_gbps:g}"
    )


def _outcome(plan: CloudPlan) -> str:
    return f"{format_duration(plan.total_seconds)}, {format_money(plan.total_cost)}"


# -- what the nodes run ----------------------------------------------------------------


class NodeCommand(Protocol):
    """What the task's nodes run: the ``workdir``, ``file_mounts``, ``setup`` and ``run`` fields."""

    def task_fields(self, shape: TaskShape) -> dict[str, Any]: ...

    def notes(self, shape: TaskShape) -> list[str]: ...


# SkyPilot numbers the nodes (SKYPILOT_NODE_RANK, head 0) and lists their IPs in rank
# order (SKYPILOT_NODE_IPS, one per line); the plan's servers are the first ranks.
ROLE_PRELUDE = """\
# rightsize's plan: the first RIGHTSIZE_NUM_PS nodes are parameter servers, the rest workers
if [ "$SKYPILOT_NODE_RANK" -lt "$RIGHTSIZE_NUM_PS" ]; then
  export RIGHTSIZE_ROLE=ps
else
  export RIGHTSIZE_ROLE=worker
fi
export RIGHTSIZE_PS_HOSTS="$(echo "$SKYPILOT_NODE_IPS" | head -n "$RIGHTSIZE_NUM_PS" | paste -sd, -)"
"""


@dataclass(frozen=True)
class UserCommand:
    """The user's command on every node, in the directory ``sky launch`` ran in (the workdir)."""

    command: str

    def __post_init__(self) -> None:
        if not self.command.strip():
            raise SpecError("--run-command is empty; give the command every node runs")

    def task_fields(self, shape: TaskShape) -> dict[str, Any]:
        return {"workdir": ".", "run": ROLE_PRELUDE + self.command.strip() + "\n"}

    def notes(self, shape: TaskShape) -> list[str]:
        return []


@dataclass(frozen=True)
class RightsizeRun:
    """``rightsize run JOB`` on the head node, rightsize installed from its checkout ``source``.

    The checkout is the task's workdir (SkyPilot copies it to every node, less what
    git ignores) and the job file is mounted beside it.
    """

    job_file: Path
    source: Path

    @property
    def remote_job(self) -> str:
        return f"{REMOTE_JOB_DIR}/{self.job_file.name}"

    def task_fields(self, shape: TaskShape) -> dict[str, Any]:
        setup = (
            "set -e\n"
            f"# rightsize needs Python {PYTHON} or newer; uv fetches one if the image's is older\n"
            "python3 -m pip install --quiet uv\n"
            f"python3 -m uv venv --allow-existing --python {PYTHON} {REMOTE_VENV}\n"
            f"python3 -m uv pip install --quiet --python {REMOTE_VENV}/bin/python .\n"
        )
        run = (
            "set -e\n"
            'if [ "$SKYPILOT_NODE_RANK" != "0" ]; then\n'
            '  echo "rightsize run starts the whole job on the head node; '
            'node $SKYPILOT_NODE_RANK has nothing to run"\n'
            "  exit 0\n"
            "fi\n"
            f"{REMOTE_VENV}/bin/rightsize run {self.remote_job}\n"
        )
        return {"workdir": str(self.source), "file_mounts": {self.remote_job: str(self.job_file)},
                "setup": setup, "run": run}  # fmt: skip

    def notes(self, shape: TaskShape) -> list[str]:
        if shape.num_nodes == 1:
            return []
        return [
            f"rightsize run runs the whole job on the head node (only its local backend "
            f"exists, docs/runtime.md): nodes 1-{shape.num_nodes - 1} have nothing to run; "
            "give --run-command to start a multi-node trainer instead"
        ]


def rightsize_checkout() -> Path:
    """The source checkout this rightsize runs from, which ``RightsizeRun`` installs on the nodes.

    Raises:
        SpecError: rightsize was installed some other way (from a wheel).
    """
    root = Path(__file__).resolve().parents[3]
    if not ((root / "pyproject.toml").is_file() and (root / "src" / "rightsize").is_dir()):
        raise SpecError(
            f"--run-job installs rightsize on the nodes from its source checkout, and this "
            f"rightsize does not run from one ({root}); give --run-command with your own command"
        )
    return root


# -- the file ---------------------------------------------------------------------------


def task_config(shape: TaskShape, command: NodeCommand, spot: bool) -> dict[str, Any]:
    """The task as SkyPilot's YAML mapping (env values are strings, as its schema wants)."""
    resources = {"infra": shape.infra, "instance_type": shape.instance.name, "use_spot": spot}
    envs = {
        "RIGHTSIZE_BATCH_PER_NODE": str(shape.worker_batch),
        "RIGHTSIZE_ITERATIONS": str(shape.plan.iterations),
        "RIGHTSIZE_NUM_PS": str(shape.num_ps),
    }
    return {"name": TASK_NAME, "num_nodes": shape.num_nodes, "resources": resources,
            "envs": envs, **command.task_fields(shape)}  # fmt: skip


def task_notes(shape: TaskShape, command: NodeCommand) -> list[str]:
    """Everything the task does otherwise than the plan or than one might expect."""
    return [*shape.notes, *command.notes(shape)]


def task_yaml(shape: TaskShape, command: NodeCommand, spot: bool) -> str:
    """SkyPilot task YAML for ``shape``, with the plan and the notes in comments on top."""
    plan = shape.plan
    lines = [
        f"rightsize plan {plan.config} ({plan.policy}), predicted: "
        f"{plan.seconds_per_iter:.4g} s/iter; {_outcome(plan)} in all",
        f"pinned to {shape.infra}; SkyPilot picks the zone (rightsize's catalogs have none)",
        *(f"note: {note}" for note in task_notes(shape, command)),
        "launch with: sky launch THIS_FILE",
    ]
    header = "".join(
        textwrap.fill(line, 88, initial_indent="# ", subsequent_indent="#   ") + "\n"
        for line in lines
    )
    return header + yaml.dump(task_config(shape, command, spot), Dumper=_LiteralDumper,
                              sort_keys=False)  # fmt: skip


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings (the run script) as ``|`` blocks, as SkyPilot's examples do."""


def _literal(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_LiteralDumper.add_representer(str, _literal)
