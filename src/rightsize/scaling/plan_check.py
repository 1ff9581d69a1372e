"""Whether a shape can run: the one set of rules every mechanism checks a policy's plan against.

A plan must fit the job's budget, grow by no more than the cluster has free, place no
node larger than the largest the mechanism can place, have the roles its training
strategy needs (parameter-server training: at least one PS and one worker; allreduce:
workers only) and give every node something to run on. The runtime turns the reasons
into a refusal (the plan is recorded as rejected and the job keeps its shape); the
simulator raises, because there a plan that breaks a rule is a bug in the policy.
Both ask :func:`plan_problems`, so a plan is judged alike on a real job and in
simulation.
"""

from __future__ import annotations

from rightsize.core.resources import Resources
from rightsize.core.shape import MILLICORE, ClusterShape, rounding_slack
from rightsize.core.spec import Strategy

_NOTHING = Resources()  # what a job holds before its launch


def plan_problems(
    shape: ClusterShape,
    budget: Resources,
    strategy: Strategy = Strategy.PS,
    held: Resources | None = None,
    free: Resources | None = None,
    node_limit: Resources | None = None,
) -> list[str]:
    """Every reason ``shape`` cannot run (empty if it can).

    Args:
        shape: the shape a plan asks for.
        budget: the job's budget ``R_max``. A memory budget of 0 leaves memory unlimited
            (a trace gives CPU budgets only, as NEARCHUS does), and nodes may then carry
            no memory figure either.
        strategy: how gradients are exchanged, which decides the roles a shape needs.
        held: what the job holds now (nothing before its launch); only growth beyond it
            must be free.
        free: what the cluster can still give the job, or ``None`` not to check.
        node_limit: the largest single node the mechanism can place, or ``None``.

    CPU is compared with one millicore of slack per node (``core.shape.rounding_slack``);
    memory and GPUs exactly. (Written as plain comparisons, with messages built — and the helpers
    that build them called — only for a problem found: the simulator checks every plan of
    millions.)
    """
    total, slack = shape.total(), rounding_slack(len(shape.nodes))
    max_cpu, max_memory, min_cpu, min_memory = shape.node_extremes  # remembered per shape
    problems = []
    if total.cpu_cores > budget.cpu_cores + slack:
        problems.append(f"{total.cpu_cores:g} cpu exceeds the budget {budget.cpu_cores:g}")
    if budget.memory_bytes and total.memory_bytes > budget.memory_bytes:
        problems.append(f"{total.memory_bytes} bytes exceed the budget {budget.memory_bytes}")
    if total.gpus > budget.gpus:
        problems.append(f"{total.gpus} gpus exceed the budget {budget.gpus}")
    if free is not None:
        held = held or _NOTHING
        if (
            total.cpu_cores - held.cpu_cores > free.cpu_cores + slack
            or total.memory_bytes - held.memory_bytes > free.memory_bytes
            or total.gpus - held.gpus > free.gpus
        ):
            problems += _growth_problems(total, held, free, slack)
    if node_limit is not None and (
        max_cpu > node_limit.cpu_cores + MILLICORE
        or (node_limit.memory_bytes and max_memory > node_limit.memory_bytes)
    ):
        problems += _node_limit_problems(shape, node_limit)
    n_ps = shape.n_ps
    if not shape.n_workers or (not n_ps if strategy == Strategy.PS else n_ps):
        problems += _role_problems(shape, strategy)
    if min_cpu <= 0:
        problems.append("every node needs some cpu")
    if budget.memory_bytes and min_memory <= 0:
        problems.append("every node needs some memory")
    return problems


def _growth_problems(total: Resources, held: Resources, free: Resources, slack: float) -> list:
    # each dimension apart: a shape may shrink in one and grow in another
    problems = []
    if total.cpu_cores - held.cpu_cores > free.cpu_cores + slack:
        problems.append(f"grows by more than the {free.cpu_cores:g} free cpu")
    if total.memory_bytes - held.memory_bytes > free.memory_bytes:
        problems.append(f"grows by more than the {free.memory_bytes} free memory bytes")
    if total.gpus - held.gpus > free.gpus:
        problems.append(f"grows by more than the {free.gpus} free gpus")
    return problems


def _node_limit_problems(shape: ClusterShape, limit: Resources) -> list[str]:
    problems = []
    for node in shape.nodes:
        if node.resources.cpu_cores > limit.cpu_cores + MILLICORE:
            problems.append(f"{node.name} exceeds the {limit.cpu_cores:g}-cpu node limit")
        if limit.memory_bytes and node.resources.memory_bytes > limit.memory_bytes:
            problems.append(f"{node.name} exceeds the node limit's {limit.memory_bytes} bytes")
    return problems


def _role_problems(shape: ClusterShape, strategy: Strategy) -> list[str]:
    n_ps, n_workers = shape.n_ps, shape.n_workers
    problems = []
    if not n_workers:
        problems.append("a shape needs at least one worker")
    if strategy == Strategy.PS and not n_ps:
        problems.append("strategy ps needs at least one parameter server")
    if strategy == Strategy.ALLREDUCE and n_ps:
        problems.append("strategy allreduce has no parameter servers")
    return problems
