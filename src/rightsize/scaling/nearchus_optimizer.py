"""NEARCHUS's Resource Optimizer (§IV, "Resource Assignment Adjustment"), as pure functions.

For a given ``(n_ps, n_wk)`` the optimizer moves CPU between nodes without
changing the job's total. It looks at each node's efficiency ``e_i = u_i / a_i``
and, when some node is below ``E_thd_opt`` (0.8):

1. **node level** — balances efficiency among the nodes of one component (all
   PS, or all workers) by reclaiming idle CPU from the less efficient nodes
   and giving it to the others. Here the component's total is re-divided in
   proportion to use, ``a_i' = A · u_i / U``, which makes every ``e_i`` equal
   to the component's ``U / A`` — the balance the paper aims for.
2. **component level** — then, if exactly one of ``e_ps`` and ``e_wk`` is below
   ``E_thd_opt``, the idle CPU of that component (``reclaim_fraction`` of it; see
   ``NearchusParams``) is taken from its nodes in proportion to their assignment and added to the other component's nodes in
   proportion to theirs. If both or neither are below, nothing moves.

The paper says "a successful node-level adjustment triggers component-level
adjustment" and that node level runs first so components are balanced inside;
we read "successful" as "completed" (node level may find nothing to move, e.g.
a single PS), because otherwise an idle lone PS could never give its CPU back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec


def _with_cpu(node: NodeSpec, cpu_cores: float) -> NodeSpec:
    res = node.resources
    return NodeSpec(node.name, node.role, Resources(cpu_cores, res.memory_bytes, res.gpus))


def efficiency(nodes: tuple[NodeSpec, ...], used: Mapping[str, float]) -> float:
    """``sum(u_i) / sum(a_i)`` over ``nodes`` (0 when nothing is allocated)."""
    allocated = sum(n.resources.cpu_cores for n in nodes)
    return sum(used[n.name] for n in nodes) / allocated if allocated else 0.0


def proportional_room(nodes: tuple[NodeSpec, ...], limit_cores: float) -> float:
    """The most CPU that can be added to ``nodes`` in proportion to their allocations
    before the largest reaches ``limit_cores``."""
    held = [n.resources.cpu_cores for n in nodes]
    if not held or max(held) <= 0:
        return 0.0
    return max(0.0, sum(held) * (limit_cores / max(held) - 1))


def node_level(
    shape: ClusterShape,
    used: Mapping[str, float],
    e_thd_opt: float,
    min_node_cores: float,
    limit_cores: float = math.inf,
) -> ClusterShape:
    """Re-divide each component's CPU in proportion to use where a node is below ``e_thd_opt``.

    Every node keeps at least ``min_node_cores``; a component whose re-division
    would put a node above ``limit_cores`` (the largest node) is left alone.
    """
    new = {n.name: n for n in shape.nodes}
    changed = False
    for role in (NodeRole.PS, NodeRole.WORKER):
        members = shape.role(role)
        if len(members) < 2 or all(_eff(n, used) >= e_thd_opt for n in members):
            continue
        total = sum(n.resources.cpu_cores for n in members)
        total_used = sum(used[n.name] for n in members)
        spare = total - min_node_cores * len(members)
        if total_used <= 0 or spare <= 0:
            continue
        cores = {n.name: min_node_cores + spare * used[n.name] / total_used for n in members}
        if max(cores.values()) > limit_cores:
            continue
        for n in members:
            new[n.name] = _with_cpu(n, cores[n.name])
        changed = True
    if not changed:
        return shape  # the same value, with its derived totals already known
    return ClusterShape(tuple(new[n.name] for n in shape.nodes))


def component_level(
    shape: ClusterShape,
    used: Mapping[str, float],
    e_thd_opt: float,
    reclaim_fraction: float,
    min_node_cores: float,
    limit_cores: float = math.inf,
) -> ClusterShape:
    """Move the idle CPU of the one component below ``e_thd_opt`` to the other component
    (no more than the other's nodes can take below ``limit_cores``)."""
    ps, wk = shape.ps, shape.workers
    if not ps or not wk:
        return shape
    ps_low = efficiency(ps, used) < e_thd_opt
    wk_low = efficiency(wk, used) < e_thd_opt
    if ps_low == wk_low:
        return shape
    low, high = (ps, wk) if ps_low else (wk, ps)
    low_total = sum(n.resources.cpu_cores for n in low)
    high_total = sum(n.resources.cpu_cores for n in high)
    idle = (low_total - sum(used[n.name] for n in low)) * reclaim_fraction
    idle = min(idle, low_total - min_node_cores * len(low), proportional_room(high, limit_cores))
    if idle <= 0 or high_total <= 0:
        return shape
    new = {n.name: n for n in shape.nodes}
    for n in low:
        new[n.name] = _with_cpu(n, n.resources.cpu_cores - idle * n.resources.cpu_cores / low_total)
    for n in high:
        new[n.name] = _with_cpu(
            n, n.resources.cpu_cores + idle * n.resources.cpu_cores / high_total
        )
    return ClusterShape(tuple(new[n.name] for n in shape.nodes))


def cpu_moved(before: ClusterShape, after: ClusterShape) -> float:
    """Cores that changed hands between two shapes with the same nodes."""
    gained = 0.0
    for node in before.nodes:
        delta = after.node(node.name).resources.cpu_cores - node.resources.cpu_cores
        gained += max(delta, 0.0)
    return gained


def optimize(
    shape: ClusterShape,
    used: Mapping[str, float],
    e_thd_opt: float,
    reclaim_fraction: float = 1.0,
    min_node_cores: float = 0.1,
    limit_cores: float = math.inf,
) -> ClusterShape | None:
    """Node-level then component-level adjustment, or ``None`` if no node is below threshold.

    Returns the adjusted shape (possibly equal to ``shape`` when nothing could move).
    """
    if all(_eff(n, used) >= e_thd_opt for n in shape.nodes):
        return None
    balanced = node_level(shape, used, e_thd_opt, min_node_cores, limit_cores)
    return component_level(balanced, used, e_thd_opt, reclaim_fraction, min_node_cores, limit_cores)


def _eff(node: NodeSpec, used: Mapping[str, float]) -> float:
    cores = node.resources.cpu_cores
    return used[node.name] / cores if cores else 0.0
