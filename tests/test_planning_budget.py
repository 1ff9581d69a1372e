"""Eager mode's solving budget is a promise: the search stops when its clock says so.

The clock is passed in (a fake one here), so these tests count what the search
does once the budget is spent instead of timing it. The catalog is large for a
test: 24 types, 2,324 subsets of up to three.
"""

import textwrap

import pytest

from profile_factory import linear_profile
from rightsize.core.catalog import load_catalog
from rightsize.core.spec import Constraints, Objective
from rightsize.perf.comm import AnalyticCommModel
from rightsize.planning.estimate import Estimator, PlanRequest
from rightsize.planning.options import make_option
from rightsize.planning.search import InfeasiblePlanError, SearchSettings, search

TYPES = 24


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    # t00..t23: V100 and T4 VMs with 1, 2 or 4 GPUs at different prices
    rows = [f"t{i:02},{('V100', 'T4')[i % 2]},{(1, 2, 4)[i % 3]},8,64,10,{1 + i * 0.37:.2f},,r"
            for i in range(TYPES)]  # fmt: skip
    path = tmp_path_factory.mktemp("cat") / "many.csv"
    header = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,NetworkGbps,Price,SpotPrice,Region"
    path.write_text(textwrap.dedent("\n".join([header, *rows])))
    catalog = load_catalog(path)
    profiles = [linear_profile(0.01, 0.02, device_kind="cuda", device_name="Tesla V100-SXM2-16GB"),
                linear_profile(0.03, 0.02, device_kind="cuda", device_name="Tesla T4")]  # fmt: skip
    return [make_option(profiles, instance, 8) for instance in catalog]


class FakeClock:
    """Seconds that pass only when something charges them (or, with ``per_read``, when read)."""

    def __init__(self, per_read: float = 0.0) -> None:
        self.now, self.per_read, self.reads = 0.0, per_read, 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.per_read
        return self.now


class JumpingClock:
    """Time stands still until the ``at_read``-th reading, which is an hour later."""

    def __init__(self, at_read: int) -> None:
        self.at_read, self.reads = at_read, 0

    def __call__(self) -> float:
        self.reads += 1
        return 3600.0 if self.reads >= self.at_read else 0.0


class ChargingEstimator(Estimator):
    """Every prediction, bound or full, costs ``tick`` seconds of the fake clock."""

    def __init__(self, clock: FakeClock, tick: float, *args) -> None:
        super().__init__(*args)
        self.clock, self.tick, self.calls = clock, tick, 0

    def bound_plan(self, config):
        self._charge()
        return super().bound_plan(config)

    def estimate(self, config, policy="srift"):
        self._charge()
        return super().estimate(config, policy)

    def _charge(self) -> None:
        self.calls += 1
        self.clock.now += self.tick


REQUEST = PlanRequest(1024, 1000, Constraints(deadline_s=5000), Objective.TIME)


def charged_search(options, budget_s: float, tick: float = 0.01):
    clock = FakeClock()
    estimator = ChargingEstimator(clock, tick, {o.name: o for o in options}, AnalyticCommModel(),
                                  REQUEST)  # fmt: skip
    settings = SearchSettings(mode="eager", top=3, eager_budget_s=budget_s)
    return search(options, estimator, settings, clock=clock), estimator


def test_eager_stops_predicting_when_its_budget_is_spent(options):
    # 1 s of 10 ms predictions: the clock is read before each one, so the 101st is the last
    plans, estimator = charged_search(options, budget_s=1.0)
    assert estimator.calls <= 101
    unlimited = charged_search(options, budget_s=float("inf"))[1]
    assert unlimited.calls > 2 * estimator.calls  # the budget, not the space, stopped it
    assert plans  # the best found by then


def test_the_search_stops_at_the_first_reading_past_its_budget(options):
    # a clock that jumps past the budget at its 200th reading, while predictions are free:
    # the search reads it for every subset and every candidate, and stops at once
    clock = JumpingClock(at_read=200)
    estimator = Estimator({o.name: o for o in options}, AnalyticCommModel(), REQUEST)
    plans = search(options, estimator, SearchSettings("eager", 3, eager_budget_s=1.0), clock)
    assert clock.reads == 200 and plans


def test_no_plan_within_the_budget_says_so(options):
    with pytest.raises(InfeasiblePlanError, match="within its 0.5 s budget"):
        charged_search(options, budget_s=0.5, tick=1.0)


def test_exhaustive_mode_has_no_budget(options):
    clock = FakeClock(per_read=1.0)
    estimator = Estimator({o.name: o for o in options}, AnalyticCommModel(), REQUEST)
    search(options, estimator, SearchSettings("exhaustive", 3, max_types=2), clock)
    assert clock.reads == 0
