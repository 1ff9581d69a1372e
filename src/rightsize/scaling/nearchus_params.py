"""NEARCHUS's thresholds (Tariq et al., §IV), the paper's values as defaults, ours marked.

Kept apart from the policy so that its rules (``nearchus_rules``), its stability detector
and nearchus+ read them without importing the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from rightsize.core.errors import SpecError
from rightsize.scaling.pace import paced


@dataclass(frozen=True)
class NearchusParams:
    """NEARCHUS's thresholds; defaults are the paper's unless marked ours.

    Attributes:
        r0: fraction of the budget to launch with. Ours: §V-A starts jobs with
            "(1ps, 2wk) and 15 vCPUs" of a 100-vCPU budget, so 0.15.
        launch_min_cores: ours — launch with at least this many cores (never more
            than the budget). 0 (the default) is §IV's ``R0`` alone; §V-A starts
            NEARCHUS and Optimus alike at "(1ps, 2wk) and 15 vCPUs", so the §V
            experiments set 15 for budgets of any size.
        e_thd_job: ``E_thd_job``, job efficiency to scale up at (0.95, §IV).
        r_up: ``R_up``, the multiplicative scale-up ratio (0.5, §IV and §V-C).
        n_comp: ``N_comp``, consecutive stable samples needed (5, §IV).
        cv_max: coefficient of variation below which samples are stable (0.05, §IV).
        stability_period_s: seconds of metrics averaged into one stability sample.
            Ours: none means one metric interval (``scaling.pace``): §IV's samples are the
            collector's; at the papers' minute per sample detection takes its "5 to 8
            minutes", at the runtime's 2 s about 10 s.
        n_net: ``N_net``, network samples per PS examined (30, §IV).
        psn_sample_fraction: PSN if more than this fraction of samples ... (0.10, §IV)
        psn_link_utilization: ... are above this fraction of link capacity (0.90, §IV).
        e_thd_opt: ``E_thd_opt``, the Resource Optimizer's threshold (0.8, §IV).
        reclaim_fraction: ours — share of a component's idle CPU (allocated minus used)
            the optimizer moves (0.9). §IV says "idle resources are extracted" but not
            whether all of them: taking all (1.0) leaves the donor — usually the PS —
            with exactly what it used at the old speed, so it saturates as soon as the
            workers speed up (the PSC bottleneck of §III-B) and the job oscillates at
            its launch size. Keeping a tenth lets the job climb; 1.0 is measured beside
            it in ``benchmarks/schedule/schedule_experiments.py`` (``nearchus-all-idle``).
        min_gain: ours — ``patience`` scale-outs (add PS, add worker) in a row that
            raise the speed by less than this fraction mean no improvement is left
            (the paper gives no number; 2% is above the measurement noise after
            averaging). Rebalances in between neither count nor break the run: §IV's
            stop ends the Scaling Engine's search, and the Resource Optimizer is a
            separate, periodic adjustment.
        patience: ours — how many such scale-outs in a row (2).
        min_step_cores: ours — do not restart a job to move or add less CPU than this
            (0.5 core) or than ``min_step_fraction`` of its budget, whichever is smaller:
            at §V's budgets (30-100 vCPU) the half core applies; a job with a 2-CPU budget
            on one machine moves as little as 0.05 core rather than never moving.
        min_step_fraction: ours — see ``min_step_cores`` (0.025).
        min_node_cores: ours — the smallest CPU allocation of one node (a 100m quota).
    """

    r0: float = 0.15
    launch_min_cores: float = 0.0
    e_thd_job: float = 0.95
    r_up: float = 0.5
    n_comp: int = 5
    cv_max: float = 0.05
    stability_period_s: float | None = None
    n_net: int = 30
    psn_sample_fraction: float = 0.10
    psn_link_utilization: float = 0.90
    e_thd_opt: float = 0.8
    reclaim_fraction: float = 0.9
    min_gain: float = 0.02
    patience: int = 2
    min_step_cores: float = 0.5
    min_step_fraction: float = 0.025
    min_node_cores: float = 0.1

    def __post_init__(self) -> None:
        fractions = ("r0", "e_thd_job", "cv_max", "psn_sample_fraction", "psn_link_utilization")
        for name in (*fractions, "e_thd_opt", "reclaim_fraction", "min_step_fraction"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise SpecError(f"nearchus parameter {name}={value!r} must be in (0, 1]")
        for name in ("r_up", "stability_period_s", "min_node_cores"):
            value = getattr(self, name)
            if name == "stability_period_s" and value is None:
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise SpecError(f"nearchus parameter {name}={getattr(self, name)!r} must be > 0")
        if self.patience < 1:
            raise SpecError(f"nearchus parameter patience={self.patience!r} must be >= 1")
        for name in ("n_comp", "n_net"):
            if getattr(self, name) < 2:
                raise SpecError(f"nearchus parameter {name}={getattr(self, name)!r} must be >= 2")
        if self.min_gain < 0 or self.min_step_cores < 0 or self.launch_min_cores < 0:
            raise SpecError(
                "nearchus parameters min_gain, min_step_cores and launch_min_cores must be >= 0"
            )


P = TypeVar("P", bound=NearchusParams)


def on_clock(params: P, metric_interval_s: float) -> P:
    """``params`` with an unset stability period set to one metric interval."""
    period = paced(params.stability_period_s, 1, metric_interval_s)
    return replace(params, stability_period_s=period)


@dataclass(frozen=True)
class NearchusPlusParams(NearchusParams):
    """The faithful parameters plus nearchus+'s own (all ours).

    Attributes:
        ps_slack: CPU the balanced split gives the PS beyond its measured need (20%,
            which keeps ``e_ps`` just above ``E_thd_opt`` at the expected speed).
        max_scale_out: at most this many times the current PS or workers per move.
        node_spread: balance nodes within a component only if their efficiencies differ
            by more than this (0.1), so that measurement noise does not cost restarts.
        max_r_up: the largest growth ratio of one scale-up (8: up to 9x, in practice
            straight to the budget or what the cluster has free).
        act_on_evident: act on an evident PS imbalance before the metrics are stable
            (``nearchus_plus_readings.evident_imbalance``); False waits for the faithful detector.
        fold_idle_ps: remove a PS when the servers are idle and the links allow it
            (``nearchus_plus.fold_idle_ps``); False keeps every PS, as NEARCHUS.
        fold_link_max: fold only if the busiest link, carrying ``n/(n−1)`` times its
            traffic, stays under this fraction of its capacity (0.5): well below the PSN
            threshold, as the scale-up sizes the PS count for the link (folding a PS of
            such a job at 81% of its link slowed it, in the simulator).
        grow_ranks_in_place: a job of workers alone (allreduce ranks, a script's) grows
            each worker's CPU in place up to the node limit or the MU cap a worker showed
            (True), and adds workers only for an MU bottleneck; False caps each worker's
            growth at ``R_up`` (or ``mu_free_cores``) and adds the rest as workers, as for a
            PS job. In place costs no restart; another rank costs one, and on a script's
            compute-bound ranks here one rank of 2 CPU trained 1.2-1.5x faster than two of 1
            (benchmarks/torchrun/torchrun_rightsizing.py).
        in_place_points: with ``grow_ranks_in_place``, ranks that used at least
            ``E_thd_job`` of their CPU in this many stability points in a row (2) grow in
            place at once. §IV's ``N_comp`` (5) guards moves that restart the job; a move
            that restarts nothing is undone as cheaply, and the three points between, at
            the runtime's 2 s each, are 6 s at the too-small size: a tenth of a one-minute
            script (benchmarks/torchrun/torchrun_rightsizing.py).
        mu_free_cores: a worker's CPU may grow to at least this (1 core) in one move,
            whatever ``R_up`` allows: the MU bottleneck sets in at 16-37 vCPUs in the
            paper (§III), never below a core, and a small CNN's workers at 0.25 CPU grown
            by ``R_up`` became five workers at 0.37 that trained at 0.71 of the two at 0.8
            of the measured sweep (benchmarks/run/runtime_rightsizing.py).
    """

    ps_slack: float = 0.2
    max_scale_out: float = 2.0
    node_spread: float = 0.1
    max_r_up: float = 8.0
    act_on_evident: bool = True
    fold_idle_ps: bool = True
    fold_link_max: float = 0.5
    mu_free_cores: float = 1.0
    grow_ranks_in_place: bool = True
    in_place_points: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.ps_slack < 0 or self.max_scale_out < 1 or self.max_r_up < self.r_up
                or not 0 < self.fold_link_max <= 1 or self.mu_free_cores < 0
                or self.in_place_points < 1):  # fmt: skip
            raise SpecError(
                f"nearchus+ parameters: ps_slack={self.ps_slack} must be >= 0, "
                f"max_scale_out={self.max_scale_out} >= 1, max_r_up={self.max_r_up} >= r_up, "
                f"fold_link_max={self.fold_link_max} in (0, 1], "
                f"mu_free_cores={self.mu_free_cores} >= 0 "
                f"and in_place_points={self.in_place_points} >= 1"
            )
