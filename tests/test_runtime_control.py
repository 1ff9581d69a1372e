"""The master's control loop with a fake clock, a scripted policy and a fake mechanism;
shape diffs; metrics from readings."""

from itertools import pairwise

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Strategy
from rightsize.runtime.clock import FakeClock
from rightsize.runtime.control import Controller, ControlLoop, Schedule, Transition
from rightsize.runtime.metrics import MetricCollector, Reading, node_metrics
from rightsize.runtime.reshape import diff, rejection
from rightsize.scaling.api import (
    Action,
    EventKind,
    MetricSample,
    NodeEvent,
    NodeMetrics,
    Plan,
    Policy,
)

GI = 2**30
SHAPE = ClusterShape.from_counts(1, 2, Resources(1, GI), Resources(2, GI))
BUDGET = Resources(8, 8 * GI)


class ScriptedPolicy(Policy):
    """Answers the n-th decide() with plans[n] (None after the script ends); keeps what it saw."""

    name = "scripted"

    def __init__(self, plans):
        self.plans, self.seen = list(plans), []

    def initial_shape(self, budget, free):
        return SHAPE

    def decide(self, observation):
        self.seen.append(observation)
        return self.plans.pop(0) if self.plans else None


class FakeMechanism:
    """A job that takes ``rate`` steps per second of fake time and obeys every plan."""

    def __init__(self, clock, rate=1.0, total=100, failures=None, accept=True):
        self.clock, self.rate, self.total, self.accept = clock, rate, total, accept
        self.shape, self.steps = SHAPE, 0.0
        self.checkpoints, self.recovered, self.applied = [], 0, []
        self.failures_at = dict(failures or {})

    def pump(self, timeout_s):
        self.clock.sleep(timeout_s)
        self.steps = min(self.total, self.steps + self.rate * timeout_s)

    def sample(self):
        node = NodeMetrics("worker-0", NodeRole.WORKER, 1.0, 2.0, steps_per_s=self.rate)
        return MetricSample(self.clock.now(), (node,), self.rate)

    def checkpoint(self):
        self.checkpoints.append(self.clock.now())

    def failures(self):
        return self.failures_at.pop(self.clock.now(), [])

    def recover(self):
        self.recovered += 1

    def restart_cost(self, plan):
        return None  # nothing restarts here

    def decline(self, plan, why):
        raise AssertionError("nothing is declined without a restart cost")

    def apply(self, plan):
        self.applied.append((self.clock.now(), plan.action))
        if self.accept:
            self.shape = plan.shape
        return Transition(self.accept, 0.5)

    def finished(self):
        return self.steps >= self.total

    def steps_done(self):
        return int(self.steps)


def make_loop(policy, mechanism, clock, metric_s=10.0, checkpoint_s=25.0):
    launch = Plan(SHAPE, Action.LAUNCH, "launch")
    controller = Controller("j", policy, BUDGET, lambda s: Resources(2, GI), 100, None, [launch])
    return ControlLoop(controller, mechanism, clock, Schedule(0.0, metric_s, checkpoint_s), 0.0)


def test_samples_and_checkpoints_follow_their_intervals():
    clock = FakeClock()
    policy = ScriptedPolicy([])
    mechanism = FakeMechanism(clock, rate=1.0, total=100)
    make_loop(policy, mechanism, clock).run()
    # 100 steps at 1 step/s: a sample (and a decision) every 10 s up to 100 s,
    # checkpoints every 25 s; the loop stops when the 100th step is done
    assert [o.time_s for o in policy.seen] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert mechanism.checkpoints == [25, 50, 75, 100]
    assert [len(o.window) for o in policy.seen] == list(range(1, 11))
    assert policy.seen[-1].steps_done == 100 and policy.seen[-1].steps_total == 100


def test_an_applied_plan_starts_a_new_window_and_records_history():
    clock = FakeClock()
    bigger = SHAPE.with_node_added(NodeRole.WORKER, Resources(2, GI))
    policy = ScriptedPolicy([None, None, Plan(bigger, Action.ADD_WORKER, "more")])
    mechanism = FakeMechanism(clock, rate=2.0, total=100)
    make_loop(policy, mechanism, clock).run()
    assert mechanism.applied == [(30, Action.ADD_WORKER)]
    after = policy.seen[3]  # the first observation after the plan
    assert len(after.window) == 1 and after.decisions == 1 and after.shape == bigger
    assert after.history[0].shape == SHAPE and after.history[0].steps_per_s == 2.0
    assert [p.action for p in after.plans] == [Action.LAUNCH, Action.ADD_WORKER]
    assert after.shape_since_s == 30 and after.free == Resources(2, GI)


def test_a_rejected_plan_keeps_the_window():
    clock = FakeClock()
    policy = ScriptedPolicy([Plan(SHAPE, Action.RESHAPE, "no")])
    make_loop(policy, FakeMechanism(clock, total=30, accept=False), clock).run()
    assert [len(o.window) for o in policy.seen] == [1, 2, 3] and policy.seen[-1].decisions == 0


def test_an_oom_kill_is_decided_at_once_then_recovered():
    clock = FakeClock()
    oom = NodeEvent(5, "worker-1", EventKind.OOM_KILLED, "exit code -9")
    crash = NodeEvent(15, "worker-0", EventKind.FAILED, "exit code 1")
    policy = ScriptedPolicy([])
    mechanism = FakeMechanism(clock, total=20, failures={5: [oom], 15: [crash]})
    make_loop(policy, mechanism, clock, metric_s=10, checkpoint_s=100).run()
    # 5 s: the OOM kill -> an extra decision right away; 10 s, 20 s: regular ones
    assert [o.time_s for o in policy.seen] == [5, 10, 20]
    assert policy.seen[0].events == (oom,)
    # the policy kept the shape, so the mechanism relaunched worker-1 with twice its memory
    # (a plan like any other: a new window, and the policy sees it)
    assert mechanism.applied == [(5, Action.RELAUNCH_OOM)]
    assert mechanism.shape.node("worker-1").resources.memory_bytes == 2 * GI
    assert policy.seen[1].last_plan.action == Action.RELAUNCH_OOM
    assert policy.seen[1].last_plan.reason.startswith("runtime: worker-1 OOM-killed")
    assert policy.seen[2].events == (crash,)
    assert mechanism.recovered == 2


class GrowingPolicy(ScriptedPolicy):
    """Gives an OOM-killed node three times its memory itself."""

    def decide(self, observation):
        self.seen.append(observation)
        for event in observation.events:
            node = observation.shape.node(event.node)
            triple = Resources(node.resources.cpu_cores, 3 * node.resources.memory_bytes)
            return Plan(observation.shape.with_resources(event.node, triple),
                        Action.RELAUNCH_OOM, "mine")  # fmt: skip
        return None


def test_a_policy_that_grows_the_killed_node_is_not_second_guessed():
    clock = FakeClock()
    oom = NodeEvent(5, "worker-1", EventKind.OOM_KILLED, "exit code -9")
    mechanism = FakeMechanism(clock, total=10, failures={5: [oom]})
    make_loop(GrowingPolicy([]), mechanism, clock, checkpoint_s=100).run()
    assert mechanism.applied == [(5, Action.RELAUNCH_OOM)]
    assert mechanism.shape.node("worker-1").resources.memory_bytes == 3 * GI


def test_doubling_after_an_oom_kill_stops_at_the_budget():
    clock = FakeClock()
    oom = NodeEvent(5, "ps-0", EventKind.OOM_KILLED, "exit code -9")
    mechanism = FakeMechanism(clock, total=30, failures={5: [oom], 15: [oom], 25: [oom]})
    launch = Plan(SHAPE, Action.LAUNCH, "launch")
    budget = Resources(8, 4 * GI + GI // 2)  # the shape holds 3 GiB: 1.5 GiB more at most
    controller = Controller("j", ScriptedPolicy([]), budget, lambda s: Resources(2, GI), 100,
                            None, [launch])  # fmt: skip
    ControlLoop(controller, mechanism, clock, Schedule(0.0, 10.0, 100.0), 0.0).run()
    # 1 GiB -> 2 GiB (doubled), -> 2.5 GiB (what the budget has left), then nothing to add
    assert mechanism.applied == [(5, Action.RELAUNCH_OOM), (15, Action.RELAUNCH_OOM)]
    assert mechanism.shape.node("ps-0").resources.memory_bytes == 2 * GI + GI // 2
    assert mechanism.shape.total().memory_bytes == budget.memory_bytes


def test_oom_kills_whose_relaunch_was_abandoned_are_remedied_together():
    # worker-1 is OOM-killed at 5 s; its relaunch with 2 GiB is abandoned (worker-0 died
    # while it was applied); at 15 s worker-0's OOM kill is reported: both are relaunched
    # with twice the memory they died with, in one plan
    clock = FakeClock()
    kill = lambda node: NodeEvent(5, node, EventKind.OOM_KILLED, "exit code -9")  # noqa: E731
    mechanism = FakeMechanism(clock, total=20, failures={5: [kill("worker-1")],
                                                        15: [kill("worker-0")]})  # fmt: skip
    answers = iter([False, True])
    apply = mechanism.apply
    mechanism.apply = lambda plan: (mechanism.__setattr__("accept", next(answers)), apply(plan))[1]
    make_loop(ScriptedPolicy([]), mechanism, clock).run()
    assert mechanism.applied == [(5, Action.RELAUNCH_OOM), (15, Action.RELAUNCH_OOM)]
    memory = {n.name: n.resources.memory_bytes for n in mechanism.shape.nodes}
    assert memory == {"ps-0": GI, "worker-0": 2 * GI, "worker-1": 2 * GI}


def test_schedule_by_hand():
    schedule = Schedule(now=0, metric_interval_s=5, checkpoint_interval_s=12)
    assert schedule.timeout(0) == 5 and not schedule.metrics_due(4.9)
    assert schedule.metrics_due(5) and schedule.timeout(5) == 5
    assert schedule.metrics_due(23) and schedule.next_metric == 23  # a late tick does not pile up
    assert schedule.checkpoint_due(12.5) and schedule.next_checkpoint == 24.5


def test_diff_by_name():
    target = (
        SHAPE.with_resources("worker-0", Resources(3, GI))
        .with_resources("ps-0", Resources(0.5, GI))
        .without_node("worker-1")
        .with_node_added(NodeRole.PS, Resources(1, GI))
    )
    change = diff(SHAPE, target)
    assert [new.name for _, new in change.resize] == ["ps-0", "worker-0"]  # shrinking first
    assert [n.name for n in change.add] == ["ps-1"] and [n.name for n in change.remove] == [
        "worker-1"
    ]
    assert change.ps_changed and change.workers_changed and not diff(SHAPE, SHAPE).resize


def test_rejection_names_the_rule():
    assert rejection(SHAPE, BUDGET, Strategy.PS) is None
    assert "budget" in rejection(SHAPE, Resources(4, 8 * GI), Strategy.PS)
    assert "allreduce" in rejection(SHAPE, BUDGET, Strategy.ALLREDUCE)
    assert "worker" in rejection(
        SHAPE.without_node("worker-0").without_node("worker-1"), BUDGET, Strategy.PS
    )
    assert "parameter server" in rejection(SHAPE.without_node("ps-0"), BUDGET, Strategy.PS)


def test_metrics_from_two_readings_by_hand():
    node = NodeSpec("worker-0", NodeRole.WORKER, Resources(2, GI))
    prev = Reading(10, cpu_s=4.0, memory_bytes=0, bytes_in=1000, bytes_out=500, steps=20)
    cur = Reading(15, cpu_s=11.5, memory_bytes=300, bytes_in=6000, bytes_out=3000, steps=45)
    m = node_metrics(node, prev, cur)
    # 7.5 cpu-seconds over 5 s = 1.5 cores of 2; 5000 B/5 s in; 25 steps/5 s
    assert m.cpu_used_cores == 1.5 and m.cpu_efficiency == 0.75
    assert (m.net_in_bytes_per_s, m.net_out_bytes_per_s, m.steps_per_s) == (1000, 500, 5)
    assert m.memory_used_bytes == 300 and m.memory_allocated_bytes == GI


def test_a_steady_slow_node_reads_steady_whatever_falls_in_each_interval():
    """1.5 steps/s reported at each step, read every 2 s: 2, 4, 3 or 3 steps land in an
    interval, but the rate counts them over the time they took."""
    node = NodeSpec("worker-0", NodeRole.WORKER, Resources(0.2, GI))
    collector = MetricCollector()
    step_s = 2 / 3

    def reading(t: float) -> Reading:
        steps = int(t / step_s + 1e-9)
        return Reading(t, 0.2 * t, 0, steps=steps, samples=32 * steps,
                       counted_s=steps * step_s if steps else None)  # fmt: skip

    times = (0.7, 2.5, 4.1, 6.5, 8.1, 10.5)
    samples = [collector.collect(t, [(node, reading(t))]) for t in times][1:]
    counts = [reading(b).steps - reading(a).steps for a, b in pairwise(times)]
    assert len(set(counts)) > 1  # what a count per interval would have read
    assert {round(s.steps_per_s, 9) for s in samples} == {1.5}
    assert {round(s.samples_per_s, 6) for s in samples} == {48.0}


def test_a_stalled_node_reads_its_stall():
    node = NodeSpec("worker-0", NodeRole.WORKER, Resources(1, GI))
    prev = Reading(10, 0, 0, steps=20, counted_s=9.9)
    # 10 steps by 11.0, then nothing until the reading at 20: 10 steps / 10 s, not / 1.1 s
    cur = Reading(20, 0, 0, steps=30, counted_s=11.0)
    assert node_metrics(node, prev, cur).steps_per_s == 1.0
    # still counting at 19.95: the 10 steps took 10.05 s
    cur = Reading(20, 0, 0, steps=30, counted_s=19.95)
    assert node_metrics(node, prev, cur).steps_per_s == 10 / (19.95 - 9.9)


def test_a_count_that_arrives_late_is_carried_then_spread_over_its_span():
    node = NodeSpec("worker-0", NodeRole.WORKER, Resources(0.2, GI))
    collector = MetricCollector()
    collector.collect(1, [(node, Reading(1, 0, 0, steps=1, samples=64, counted_s=0.9))])
    first = collector.collect(3, [(node, Reading(3, 0, 0, steps=3, samples=192, counted_s=2.9))])
    assert first.steps_per_s == 1.0 and first.samples_per_s == 64.0
    # the step that ended at 4.9 is reported only after the reading at 5: within pace
    late = collector.collect(5, [(node, Reading(5, 0, 0, steps=3, samples=192, counted_s=2.9))])
    assert late.steps_per_s == 1.0 and late.samples_per_s == 64.0
    # two counts arrive, the last step ended at 6.9: 2 steps over the 4 s they took
    caught = collector.collect(7, [(node, Reading(7, 0, 0, steps=5, samples=320, counted_s=6.9))])
    assert caught.steps_per_s == 0.5
    # silent past 3 of its steps: a stall, which reads as one
    silent = Reading(15, 0, 0, steps=5, samples=320, counted_s=6.9)
    assert collector.collect(15, [(node, silent)]).steps_per_s == 0.0


def test_collector_skips_first_readings_and_restarts():
    node = NodeSpec("worker-0", NodeRole.WORKER, Resources(1, GI))
    collector = MetricCollector()
    assert collector.collect(0, [(node, Reading(0, 0, 0, steps=0, loss_sum=0))]) is None
    sample = collector.collect(
        2, [(node, Reading(2, 1, 0, steps=10, samples=80, loss_sum=5, loss_n=10))]
    )
    assert sample.steps_per_s == 5 and sample.samples_per_s == 40 and collector.loss == 0.5
    # the node was relaunched: its counters start again from zero
    assert collector.collect(4, [(node, Reading(4, 0.2, 0, steps=1))]) is None


class RestartingMechanism(FakeMechanism):
    """A job whose world-size changes restart its ranks at a measured cost (a script's)."""

    def __init__(self, clock, cost, **kwargs):
        super().__init__(clock, **kwargs)
        self.cost, self.declined = cost, []

    def restart_cost(self, plan):
        return self.cost if plan.shape.n_workers != self.shape.n_workers else None

    def decline(self, plan, why):
        self.declined.append((self.clock.now(), why))


def test_a_restart_that_does_not_pay_back_is_declined_and_one_that_does_is_applied():
    from rightsize.scaling.payback import RestartCost

    bigger = SHAPE.with_node_added(NodeRole.WORKER, Resources(2, GI))  # 3 workers of 2 cpu
    for cost_s, taken in ((100.0, False), (5.0, True)):
        clock = FakeClock()
        policy = ScriptedPolicy([None, Plan(bigger, Action.ADD_WORKER, "more ranks")])
        mechanism = RestartingMechanism(clock, RestartCost(cost_s, True), rate=1.0, total=100)
        make_loop(policy, mechanism, clock).run()
        # at 20 s: 80 steps left at 1 step/s; eq. 1 predicts 3/2 the speed: gain 80/3 = 26.7 s
        assert bool(mechanism.applied) == taken
        if not taken:
            assert mechanism.declined[0][0] == 20
            assert "does not pay back: predicted gain 26.7s" in mechanism.declined[0][1]
        else:
            assert mechanism.applied == [(20, Action.ADD_WORKER)] and not mechanism.declined
