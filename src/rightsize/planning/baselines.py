"""Srift's static baselines (§5.2): the cost-aware (CAP) and throughput-aware (TAP) policies.

Both rank the available instance types — CAP by hourly price, cheapest first;
TAP by throughput, fastest first — and request VMs in that order, each loaded
with its largest batch, until the global batch is allocated. They know nothing
of the constraints and pick the per-VM batch statically, which is what Srift
shows costs them. Their configurations are predicted by the same estimator as
Srift's own, so the table compares like with like.
"""

from __future__ import annotations

from collections.abc import Sequence

from rightsize.planning.estimate import Estimator
from rightsize.planning.options import InstanceOption
from rightsize.planning.plan import CloudPlan, Config, Slot


def _throughput(option: InstanceOption) -> float:
    batch = max(option.batches() or [option.bmax])
    return batch / option.vm_compute(batch).total_s


def greedy_config(ranked: Sequence[InstanceOption], global_batch: int) -> Config | None:
    """Fill ``global_batch`` with VMs in rank order, each at its largest power-of-two batch
    (no larger than what is left to allocate)."""
    slots, remaining = [], global_batch
    for option in ranked:
        batch = max((b for b in option.batches() if b <= remaining), default=0)
        if batch == 0:
            continue
        count = min(option.cap, remaining // batch)
        if count:
            slots.append(Slot(option.name, count, batch))
            remaining -= count * batch
    return Config(tuple(sorted(slots))) if remaining == 0 and slots else None


def cap_plan(options: Sequence[InstanceOption], estimator: Estimator) -> CloudPlan | None:
    """CAP: cheapest instances first. ``None`` if the cheap-first fill cannot allocate the batch."""
    ranked = sorted(options, key=lambda o: (o.price_per_hour, -_throughput(o)))
    config = greedy_config(ranked, estimator.request.global_batch)
    return estimator.estimate(config, policy="cap") if config else None


def tap_plan(options: Sequence[InstanceOption], estimator: Estimator) -> CloudPlan | None:
    """TAP: fastest instances first."""
    ranked = sorted(options, key=_throughput, reverse=True)
    config = greedy_config(ranked, estimator.request.global_batch)
    return estimator.estimate(config, policy="tap") if config else None
