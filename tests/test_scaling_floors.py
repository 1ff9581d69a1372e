"""The mechanisms' shared rules for a job's start and for memory floors (scaling.launch,
scaling.floors): one function each, used by the runtime and the simulator alike."""

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.scaling.api import Action, LaunchRequest, Plan
from rightsize.scaling.floors import floored_plan, raised_to_floors
from rightsize.scaling.launch import INITIAL_SHAPE_REASON, launch_plan
from rightsize.scaling.static import StaticPolicy

MI = 2**20
SHAPE = ClusterShape.from_counts(1, 2, Resources(1, 100 * MI), Resources(2, 300 * MI))


def test_nodes_below_their_floor_are_raised_to_it_and_no_other():
    floors = {"ps-0": 200 * MI, "worker-0": 300 * MI, "worker-1": 100 * MI}
    raised = raised_to_floors(SHAPE, floors)
    assert [n.resources for n in raised.nodes] == [
        Resources(1, 200 * MI), Resources(2, 300 * MI), Resources(2, 300 * MI)]  # fmt: skip
    assert raised_to_floors(SHAPE, {"worker-0": 1}) is SHAPE  # nothing below: the same shape
    assert raised_to_floors(SHAPE, {}) is SHAPE  # a node without a floor keeps its memory


def test_a_raised_plan_says_which_nodes_grew_and_keeps_its_notes():
    plan = Plan(SHAPE, Action.SCALE_UP, "policy: more cpu", {"stage": "adjust"})
    raised = floored_plan(plan, {"ps-0": 256 * MI})
    assert raised.reason == "policy: more cpu; memory raised to floors: ps-0 100Mi->256Mi"
    assert (raised.action, raised.details) == (Action.SCALE_UP, {"stage": "adjust"})
    assert raised.shape.node("ps-0").resources == Resources(1, 256 * MI)
    assert floored_plan(plan, {"ps-0": 100 * MI}) is plan  # at its floor: the plan as it was


def test_an_initial_shape_starts_as_it_is_and_the_policy_is_asked_only_without_one():
    other = ClusterShape.from_counts(1, 1, Resources(1, MI), Resources(1, MI))
    request = LaunchRequest("job", Resources(10, 10**9), Resources(10, 10**9))
    explicit = launch_plan(StaticPolicy(other), request, SHAPE)
    assert explicit == Plan(SHAPE, Action.LAUNCH, INITIAL_SHAPE_REASON)
    assert launch_plan(StaticPolicy(other), request).shape == other
