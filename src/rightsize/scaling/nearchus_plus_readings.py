"""What nearchus+ reads from a job's metrics: the balanced PS/worker split by cost per step,
each role's efficiency, the busiest link, and the evident imbalances it acts on before the
faithful Stability Detector is satisfied (see ``nearchus_plus``). Pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from itertools import chain

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.scaling import nearchus_optimizer
from rightsize.scaling.api import MetricSample, window_speed
from rightsize.scaling.nearchus_params import NearchusPlusParams
from rightsize.scaling.nearchus_stability import StableWindow, stability_points


def balanced_ps_cores(
    total_cores: float, ps_core_s_per_step: float, wk_core_s_per_step: float, slack: float
) -> float:
    """PS cores so that PS and workers sustain the same speed out of ``total_cores``.

    With workers taking ``c_wk`` core-seconds and the PS ``c_ps`` per step, the
    workers' ``A − a`` cores run ``(A − a) / c_wk`` steps/s, which the PS needs
    ``c_ps·(1 + slack)`` core-seconds for: ``a = A·k / (1 + k)``, ``k = c_ps·(1+slack)/c_wk``.
    """
    k = ps_core_s_per_step * (1 + slack) / wk_core_s_per_step
    return total_cores * k / (1 + k)


def role_efficiencies(shape: ClusterShape, used: dict[str, float]) -> tuple[float, float]:
    """``(e_ps, e_wk)``: each role's ``Σu_i / Σa_i`` with the cores ``used`` per node."""
    return (nearchus_optimizer.efficiency(shape.ps, used),
            nearchus_optimizer.efficiency(shape.workers, used))  # fmt: skip


def costs_per_step(
    shape: ClusterShape, used: dict[str, float], speed: float
) -> tuple[float, float]:
    """``(c_ps, c_wk)``: the core-seconds each role uses per step at ``speed`` (> 0)."""
    return (sum(used[n.name] for n in shape.ps) / speed,
            sum(used[n.name] for n in shape.workers) / speed)  # fmt: skip


class Imbalance(Enum):
    """What every point of a window shows about its PS (see :func:`evident_imbalance`)."""

    PS_SATURATED = "PS saturated"
    PS_IDLE = "PS idle"
    WORKERS_IDLE = "workers idle"
    RANKS_SATURATED = "ranks saturated"  # a job without PS: grow in place (saturated_ranks)


#: An evident imbalance and the points that show it, summarized.
Evident = tuple[Imbalance, StableWindow]


def evident_imbalance(
    window: Sequence[MetricSample], shape: ClusterShape, params: NearchusPlusParams
) -> Evident | None:
    """The PS imbalance that each of the window's last ``N_comp`` stability points shows,
    with those points summarized, or None.

    Each point must train (speed > 0) and read the same side of the thresholds: the PS
    at least ``E_thd_job`` busy (PSC), or the PS below ``E_thd_opt`` while the workers
    are at least ``E_thd_opt`` busy, or the workers below ``E_thd_opt`` (with the PS not
    saturated: ``e_job`` is then evidently below ``E_thd_job``, and the faithful engine's
    PSN check and MU rule answer it). Five readings in a row on one side are not noise,
    whatever the speed's CV: the faithful detector's 5% CV guards decisions that weigh
    small differences (``e_job`` against 0.95, one speed against another), not these.
    """
    found = last_readings(window, shape, params.stability_period_s, params.n_comp)
    if found is None:
        return None
    summary, readings = found
    seen: set[Imbalance] = set()
    for e_ps, e_wk in readings:
        if e_ps >= params.e_thd_job:
            seen.add(Imbalance.PS_SATURATED)
        elif e_ps < params.e_thd_opt <= e_wk:
            seen.add(Imbalance.PS_IDLE)
        elif e_wk < params.e_thd_opt:
            seen.add(Imbalance.WORKERS_IDLE)
        else:
            return None
    if len(seen) != 1:
        return None
    return seen.pop(), summary


def last_readings(
    window: Sequence[MetricSample], shape: ClusterShape, period_s: float, count: int
) -> tuple[StableWindow, list[tuple[float, float]]] | None:
    """The window's last ``count`` stability points summarized, and each one's ``(e_ps,
    e_wk)``; None if there are fewer, or one did not train (speed 0) or came from another
    shape."""
    points = stability_points(window, period_s)[-count:]
    if len(points) < count:
        return None
    readings = []
    for point in points:
        if window_speed(point) <= 0:
            return None
        used = StableWindow.of(point).used
        if not all(n.name in used for n in shape.nodes):
            return None  # a point from another shape
        readings.append(role_efficiencies(shape, used))
    return StableWindow.of(tuple(chain.from_iterable(points))), readings


def saturated_ranks(
    window: Sequence[MetricSample], shape: ClusterShape, params: NearchusPlusParams
) -> Evident | None:
    """A job of workers alone whose workers used at least ``E_thd_job`` of their CPU in each
    of the window's last ``in_place_points`` stability points, those points summarized;
    else None."""
    found = None if shape.n_ps else last_readings(window, shape, params.stability_period_s,
                                                      params.in_place_points)  # fmt: skip
    if found is None or any(e_wk < params.e_thd_job for _, e_wk in found[1]):
        return None
    return Imbalance.RANKS_SATURATED, found[0]


def max_link_utilization(window: Sequence[MetricSample]) -> float:
    """The busiest PS link's mean utilization over ``window`` (0 if unknown)."""
    means = []
    names = {
        name
        for s in window
        for name, role in zip(s.nodes.names, s.nodes.roles)  # noqa: B905 (columns)
        if role == NodeRole.PS
    }
    for name in names:
        utils = [u for s in window if (u := s.nodes.net_utilization_of(name)) is not None]
        if utils:
            means.append(sum(utils) / len(utils))
    return max(means, default=0.0)


def with_role_total(shape: ClusterShape, role: NodeRole, cores: float) -> ClusterShape:
    """``shape`` with ``role``'s CPU set to ``cores``, split in proportion to what each holds."""
    members = shape.role(role)
    held = sum(n.resources.cpu_cores for n in members)
    nodes = []
    for node in shape.nodes:
        if node.role == role:
            share = node.resources.cpu_cores / held if held else 1 / len(members)
            res = node.resources
            node = NodeSpec(
                node.name, node.role, Resources(cores * share, res.memory_bytes, res.gpus)
            )
        nodes.append(node)
    return ClusterShape(tuple(nodes))
