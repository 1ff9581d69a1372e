"""Optimus (Peng et al., EuroSys '18) as NEARCHUS §V runs it: fixed-size nodes, a fitted
speed model, one node added per interval by greatest marginal gain.

- Every node gets a fixed ``cores_per_node`` (5 vCPU, NEARCHUS §V); a job
  starts as (1 PS, 2 workers), like NEARCHUS (§V-A: "start with (1ps, 2wk) and
  15 vCPUs").
- Before the job runs, Optimus profiles it at ``profile_configs`` (p, w)
  shapes (20, NEARCHUS §III-C and §V, "more than Optimus suggested");
  :meth:`OptimusPolicy.prior_shapes` names them and the mechanism measures
  them. Their time is not counted in the job's completion time (§V-A).
- The resource-speed model is fitted with non-negative least squares over
  every (p, w) point known — the profile, the job's past shapes and the
  current one. Asynchronous training:
  ``f(p, w) = w / (θ0 + θ1·w/p + θ2·w + θ3·p)``, fitted as
  ``w/f = θ·[1, w/p, w, p]``; synchronous training:
  ``f(p, w) = 1 / (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)``, fitted as
  ``1/f = θ·[M/w, 1, w/p, w, p]`` with ``M`` the global batch.
- Every ``interval_s`` (10 minutes — ten metric intervals, ``scaling.pace`` — "adds one parameter server node or
  worker node with 5 vCPUs every 10 minutes", NEARCHUS §III-A) it adds the
  node — one PS or one worker — whose predicted speed gain is greater, while
  the gain is positive and the budget and the cluster have room for it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from itertools import islice

import numpy as np

from rightsize.core.errors import SpecError, choose
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.scaling.api import Action, Observation, Plan, Policy, ShapeRecord
from rightsize.scaling.pace import PAPER_METRIC_INTERVAL_S, paced
from rightsize.scaling.shapes import fixed_node_shape, node_of, require_budget, with_node


class OptimusMode(StrEnum):
    """How workers update: ``async`` (each pushes on its own) or ``sync`` (in lockstep)."""

    ASYNC = "async"
    SYNC = "sync"


MODES: tuple[str, ...] = tuple(OptimusMode)
INTERVALS_PER_STEP = 10  # metric intervals between added nodes (§V: 10 minutes at 1/minute)
FEATURE_ROWS = 4096  # remembered regressor rows (a cache bound)
DESIGNS = 1024  # remembered regressor matrices (a cache bound)


@dataclass(frozen=True)
class SpeedModel:
    """Optimus's fitted resource-speed model ``f(p, w)`` in steps per second."""

    mode: str
    theta: tuple[float, ...]
    global_batch: float = 1.0

    @staticmethod
    def features(mode: str, p: float, w: float, global_batch: float = 1.0) -> list[float]:
        """The regressors of one (p, w) point; the target is ``w/f`` (async) or ``1/f`` (sync)."""
        if mode == OptimusMode.ASYNC:
            return [1.0, w / p, float(w), float(p)]
        return [global_batch / w, 1.0, w / p, float(w), float(p)]

    @classmethod
    def fit(
        cls, points: Sequence[tuple[int, int, float]], mode: str = "async", global_batch=1.0
    ) -> SpeedModel | None:
        """NNLS fit over ``(p, w, steps_per_s)`` points; ``None`` with too few distinct points."""
        usable = [((p, w), f) for p, w, f in points if _usable((p, w), f)]
        return cls.fit_usable(usable, mode, global_batch)

    @classmethod
    def fit_usable(
        cls, points: Sequence[tuple[tuple[int, int], float]], mode: str, global_batch: float
    ) -> SpeedModel | None:
        """:meth:`fit` over ``((p, w), steps_per_s)`` points whose values are all above 0."""
        a = design_matrix(mode, tuple([key for key, _ in points]), global_batch)
        if a is None:
            return None
        b = np.array(
            [w / f for (_, w), f in points] if mode == OptimusMode.ASYNC
            else [1 / f for _, f in points]
        )  # fmt: skip
        from scipy.optimize import nnls  # scipy loads in about a second; only a fit needs it

        theta, _ = nnls(a, b)
        return cls(mode, tuple(theta.tolist()), global_batch)

    def __post_init__(self) -> None:
        # As an array once (not a field: equality and repr stay the tuple's); a decision
        # predicts three times.
        object.__setattr__(self, "_theta", np.array(self.theta))

    def predict(self, p: int, w: int) -> float:
        """Predicted steps per second at ``p`` PS and ``w`` workers (0 if undefined)."""
        features = feature_vector(self.mode, p, w, self.global_batch)
        denominator = float(np.dot(self._theta, features))
        if denominator <= 0:
            return 0.0
        return w / denominator if self.mode == OptimusMode.ASYNC else 1 / denominator


def _mean(values: list[float]) -> float:
    """``statistics.fmean(values)`` for a non-empty list — ``fsum(values) / len(values)``,
    which is what fmean computes — without its generic-iterable overhead."""
    return math.fsum(values) / len(values)


@lru_cache(maxsize=FEATURE_ROWS)
def feature_row(mode: str, p: int, w: int, global_batch: float) -> tuple[float, ...]:
    """``SpeedModel.features``, remembered: every fit of a job repeats its prior's points."""
    return tuple(SpeedModel.features(mode, p, w, global_batch))


@lru_cache(maxsize=FEATURE_ROWS)
def feature_vector(mode: str, p: int, w: int, global_batch: float) -> np.ndarray:
    """:func:`feature_row` as a (read-only) array: what ``np.dot`` would convert it to, once."""
    return _read_only(np.array(feature_row(mode, p, w, global_batch)))


@lru_cache(maxsize=DESIGNS)
def design_matrix(
    mode: str, keys: tuple[tuple[int, int], ...], global_batch: float
) -> np.ndarray | None:
    """The regressors of the (p, w) points ``keys``, one row each (read-only), or ``None`` if
    fewer distinct points than parameters. Remembered: a job's fits repeat the same points
    (its prior's and its own shapes), with new speeds only."""
    n_params = len(SpeedModel.features(mode, 1, 1))
    if len(set(keys)) < n_params:
        return None
    # One flat list of floats, then shaped: numpy converts it several times faster than
    # nested lists (the same float64 matrix).
    rows = [feature_row(mode, p, w, global_batch) for p, w in keys]
    return _read_only(np.array([x for row in rows for x in row]).reshape(len(rows), n_params))


def _pair(index: int) -> tuple[int, int]:
    """The ``index``-th (p, w) of ``[(p, n - p) for n in range(2, N + 1) for p in range(1, n)]``
    (whatever N beyond it): the pairs of ``n`` nodes start at index ``(n - 1)(n - 2) / 2``."""
    n = (math.isqrt(8 * index + 1) - 1) // 2 + 2  # the largest n with (n-1)(n-2)/2 <= index
    p = index - (n - 1) * (n - 2) // 2 + 1
    return p, n - p


def _read_only(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only: it is shared by every caller of a cache."""
    array.flags.writeable = False
    return array


def speed_points(
    records: Iterable[ShapeRecord], known: dict[tuple[int, int], list[float]] | None = None
) -> list[tuple[int, int, float]]:
    """``(p, w, mean speed)`` per distinct (p, w) among the records (and the speeds already
    grouped in ``known``, as :func:`group_speeds` returns them, which stays unchanged)."""
    speeds = {key: list(values) for key, values in (known or {}).items()}
    for record in records:
        key = (record.shape.n_ps, record.shape.n_workers)
        speeds.setdefault(key, []).append(record.steps_per_s)
    return [(p, w, statistics.fmean(v)) for (p, w), v in sorted(speeds.items())]


def group_speeds(records: Iterable[ShapeRecord]) -> dict[tuple[int, int], list[float]]:
    """Measured speeds per (p, w), in record order."""
    speeds: dict[tuple[int, int], list[float]] = {}
    for record in records:
        speeds.setdefault((record.shape.n_ps, record.shape.n_workers), []).append(
            record.steps_per_s
        )
    return speeds


@dataclass(frozen=True)
class KnownSpeeds:
    """Speeds already measured (a job's prior), grouped per (p, w) with each group's mean.

    Every decision of a job fits over its prior plus its own few records; the prior's groups,
    their means and which of them a fit can use are worked out once here, and only the groups
    a decision's records touch are averaged and checked again (:meth:`model`).
    """

    grouped: dict[tuple[int, int], list[float]]
    means: dict[tuple[int, int], float]
    usable: dict[tuple[int, int], float]  # the means a fit uses: p, w and speed above 0

    @classmethod
    def of(cls, records: Iterable[ShapeRecord]) -> KnownSpeeds:
        grouped = group_speeds(records)
        means = {key: _mean(values) for key, values in grouped.items()}
        return cls(grouped, means, {key: f for key, f in means.items() if _usable(key, f)})

    def model(
        self, records: Iterable[ShapeRecord], mode: str, global_batch: float
    ) -> SpeedModel | None:
        """``SpeedModel.fit(speed_points(records, self.grouped), mode, global_batch)`` — the
        same fit — without re-averaging the groups ``records`` leave alone, and with the
        prior's usable means as they are (Optimus fits at every decision)."""
        fresh = self._fresh(records)
        merged = self.usable | fresh
        for key, speed in fresh.items():
            if not _usable(key, speed):
                del merged[key]  # (a prior mean it replaced goes too)
        # sorted by (p, w), each group once: the speeds themselves are never compared
        return SpeedModel.fit_usable(sorted(merged.items()), mode, global_batch)

    def _fresh(self, records: Iterable[ShapeRecord]) -> dict[tuple[int, int], float]:
        """The mean speed of each (p, w) ``records`` touch, with the prior's speeds there."""
        return {
            key: _mean([*self.grouped.get(key, ()), *values])
            for key, values in group_speeds(records).items()
        }


def _usable(key: tuple[int, int], speed: float) -> bool:
    """Whether a fit uses the point: p, w and the speed all above 0 (not a NaN speed)."""
    return key[0] > 0 and key[1] > 0 and speed > 0


class OptimusPolicy(Policy):
    """Optimus with fixed ``cores_per_node``, NNLS speed model, one node per interval."""

    name = "optimus"

    def __init__(
        self,
        cores_per_node: float = 5.0,
        interval_s: float | None = None,
        profile_configs: int = 20,
        mode: OptimusMode = OptimusMode.ASYNC,
        global_batch: float = 1024.0,
        seed: int = 0,
        metric_interval_s: float = PAPER_METRIC_INTERVAL_S,
    ) -> None:
        # §V's "every 10 minutes" at the papers' minute per sample: ten metric intervals
        interval_s = paced(interval_s, INTERVALS_PER_STEP, metric_interval_s)
        if cores_per_node <= 0 or interval_s <= 0 or global_batch <= 0:
            raise SpecError(
                "optimus: cores_per_node, interval_s and global_batch must be > 0, got "
                f"{cores_per_node}, {interval_s}, {global_batch}"
            )
        mode = choose(OptimusMode, mode, "optimus mode")
        if profile_configs < 0:
            raise SpecError(f"optimus: profile_configs={profile_configs} must be >= 0")
        self.cores_per_node = cores_per_node
        self.interval_s = interval_s
        self.profile_configs = profile_configs
        self.mode = mode
        self.global_batch = global_batch
        self.seed = seed

    def max_nodes(self, budget: Resources) -> int:
        return int(budget.cpu_cores / self.cores_per_node + 1e-9)

    def initial_shape(self, budget: Resources, free: Resources) -> ClusterShape | None:
        """(1 PS, 2 workers) of ``cores_per_node`` each, if it fits.

        Raises:
            ResourceError: the budget holds fewer than three nodes.
        """
        require_budget(self.name, budget, 3 * self.cores_per_node, "1 PS + 2 workers")
        shape = fixed_node_shape(1, 2, node_of(budget, self.cores_per_node))
        return shape if shape.total().fits_within(free) else None

    def prior_shapes(
        self, budget: Resources, node_limit: Resources | None = None
    ) -> tuple[ClusterShape, ...]:
        """``profile_configs`` distinct (p, w) shapes within the budget, drawn by seed."""
        total = self.max_nodes(budget)
        rng = np.random.default_rng([self.seed, total])
        # a permutation of the pairs (p, n - p) for n in 2..total and p in 1..n-1, in that
        # order; only the chosen ones are made (a budget of a hundred nodes has ~5,000 pairs)
        count = (total - 1) * total // 2 if total >= 2 else 0
        chosen = sorted(
            _pair(i) for i in rng.permutation(count)[: self.profile_configs].tolist()
        )
        node = node_of(budget, self.cores_per_node)
        return tuple(fixed_node_shape(p, w, node) for p, w in chosen)

    def decision_due_s(self, observation: Observation) -> float:
        """One decision per ``interval_s`` after the current shape was requested."""
        return max(observation.time_s, observation.shape_since_s + self.interval_s)

    def decide(self, observation: Observation) -> Plan | None:
        obs = observation
        if obs.time_s - obs.shape_since_s < self.interval_s or not obs.window:
            return None
        speed = _mean([s.steps_per_s for s in islice(obs.window, len(obs.window) // 2, None)])
        current = ShapeRecord(obs.shape, speed)
        p, w = obs.shape.n_ps, obs.shape.n_workers
        node = node_of(obs.budget, self.cores_per_node)
        if not node.fits_within(obs.headroom):
            return None
        known = obs.job_readings.of("optimus.prior", lambda: KnownSpeeds.of(obs.prior))
        model = known.model([*obs.history, current], self.mode, self.global_batch)
        if model is None:
            return self._explore(obs, node)
        base = model.predict(p, w)
        gains = {NodeRole.PS: model.predict(p + 1, w) - base}
        gains[NodeRole.WORKER] = model.predict(p, w + 1) - base
        role = max(gains, key=lambda r: gains[r])
        if gains[role] <= 0:
            return None
        action = Action.ADD_PS if role == NodeRole.PS else Action.ADD_WORKER
        return Plan(
            with_node(obs.shape, role, node),
            action,
            f"speed model predicts +{gains[role]:.3g} steps/s from one more {role} "
            f"(measured {speed:.3g} at ({p}, {w}))",
            {"gain_steps_per_s": gains[role], "predicted": base + gains[role]},
        )

    def _explore(self, obs: Observation, node: Resources) -> Plan:
        """Too few (p, w) points to fit: add a worker, or a PS once that point is known."""
        known = {(r.shape.n_ps, r.shape.n_workers) for r in (*obs.prior, *obs.history)}
        p, w = obs.shape.n_ps, obs.shape.n_workers
        role = NodeRole.WORKER if (p, w + 1) not in known else NodeRole.PS
        action = Action.ADD_WORKER if role == NodeRole.WORKER else Action.ADD_PS
        return Plan(
            with_node(obs.shape, role, node),
            action,
            f"too few (p, w) points to fit the speed model: try one more {role}",
        )
