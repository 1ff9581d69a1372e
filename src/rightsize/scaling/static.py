"""Fixed allocation: the job keeps the shape it was given for its whole life.

The baseline every adaptive policy is compared with, and what a user gets who
already knows the shape they want. Without a shape it launches the whole
budget as NEARCHUS's starting layout, one parameter server and two workers
sharing it 1:2 (NEARCHUS §IV's ``(1, 2, R/3, 2R/3)``, with R the full budget).
"""

from __future__ import annotations

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, DTConfig
from rightsize.scaling.api import Observation, Plan, Policy


def one_ps_two_workers(total: Resources) -> ClusterShape:
    """``total`` split as (1 PS, 2 workers) with a third and two thirds: NEARCHUS's DT-config."""
    return ClusterShape.from_dt_config(DTConfig(1, 2, total.scaled(1 / 3), total.scaled(2 / 3)))


class StaticPolicy(Policy):
    """Keeps ``shape`` (or the whole budget as 1 PS + 2 workers) and never changes it."""

    name = "static"

    def __init__(self, shape: ClusterShape | None = None) -> None:
        self.shape = shape

    def initial_shape(self, budget: Resources, free: Resources) -> ClusterShape | None:
        shape = self.shape or one_ps_two_workers(budget)
        return shape if shape.total().fits_within(free) else None

    def decide(self, observation: Observation) -> Plan | None:
        return None
