"""Export a plan as a SkyPilot task file, so the chosen cluster can be launched with ``sky launch``.

A SkyPilot task runs on ``num_nodes`` identical nodes, so only homogeneous
plans can be exported; for a heterogeneous best plan the caller exports the
best homogeneous one and says so. The ``run`` section starts PyTorch's
``torchrun`` across the nodes with the plan's per-node batch in an environment
variable, for the user's training script to read.
"""

from __future__ import annotations

import yaml

from rightsize.core.errors import SpecError
from rightsize.planning.plan import CloudPlan

# rightsize catalog -> SkyPilot cloud; the papers' tables are EC2 price lists. A
# user's own catalog has no known cloud, and SkyPilot then finds the instance type.
SKYPILOT_CLOUDS = {
    "aws": "aws",
    "gcp": "gcp",
    "azure": "azure",
    "srift-2020": "aws",
    "fc2-2018": "aws",
}


def task_yaml(plan: CloudPlan, cloud: str, spot: bool, name: str = "rightsize-job") -> str:
    """SkyPilot task YAML for a homogeneous ``plan``.

    Raises:
        SpecError: the plan uses more than one instance type.
    """
    workers = [s for s in plan.config.slots if s.role != "ps"]
    if len(workers) != 1 or len(plan.config.slots) != 1:
        raise SpecError(f"a SkyPilot task needs one instance type; {plan.config} has several")
    slot = workers[0]
    resources = {"instance_type": slot.instance, "use_spot": spot}
    if cloud in SKYPILOT_CLOUDS:
        resources = {"cloud": SKYPILOT_CLOUDS[cloud], **resources}
    task = {
        "name": name,
        "num_nodes": slot.count,
        "resources": resources,
        "envs": {"RIGHTSIZE_BATCH_PER_NODE": slot.batch, "RIGHTSIZE_ITERATIONS": plan.iterations},
        "run": (
            "# your training script reads RIGHTSIZE_BATCH_PER_NODE\n"
            "torchrun --nnodes=$SKYPILOT_NUM_NODES --node_rank=$SKYPILOT_NODE_RANK "
            "--nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE "
            '--master_addr=$(echo "$SKYPILOT_NODE_IPS" | head -n1) --master_port=29500 '
            "train.py\n"
        ),
    }
    header = (
        f"# rightsize plan {plan.config}: {plan.seconds_per_iter:.4g} s/iter predicted, "
        f"{plan.total_seconds:.0f} s and ${plan.total_cost:.2f} in all ({plan.policy})\n"
    )
    return header + yaml.dump(task, Dumper=_LiteralDumper, sort_keys=False)


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings (the run script) as ``|`` blocks, as SkyPilot's examples do."""


def _literal(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_LiteralDumper.add_representer(str, _literal)
