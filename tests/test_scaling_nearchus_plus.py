"""nearchus+, rightsize's improved NEARCHUS: each change against hand-computed numbers."""

import math

import pytest
from tests.test_scaling_nearchus import LINK, cores, observe, sample, shape_of, steady

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import NodeRole
from rightsize.scaling.api import Action, Plan, ShapeRecord
from rightsize.scaling.nearchus import NearchusPolicy
from rightsize.scaling.nearchus_plus import NearchusPlusPolicy, PlusNotes, balanced_ps_cores


def test_balanced_split_sizes_the_ps_for_the_speed_the_workers_will_reach():
    # c_ps = 0.5, c_wk = 9.5 core-s per step, 20% slack: k = 0.6/9.5, a = 15 k / (1 + k)
    k = 0.5 * 1.2 / 9.5
    assert balanced_ps_cores(15, 0.5, 9.5, 0.2) == pytest.approx(15 * k / (1 + k))


def test_idle_ps_is_rebalanced_without_starving_it():
    # speed 1 step/s: the PS uses 0.5 (c_ps 0.5), workers 9.5 (c_wk 9.5) of 15 cpu.
    # The literal optimizer (all idle CPU moved) leaves the PS exactly 0.5, the faithful
    # default (90% of it) 0.5 + 0.45 = 0.95; nearchus+ sizes it from the cost per step, 0.891.
    shape = shape_of()
    window = steady(shape, (0.5, 4.75, 4.75), speed=1.0)
    literal = NearchusPolicy(reclaim_fraction=1.0).decide(observe(shape, window))
    assert cores(literal.shape)[0] == 0.5
    faithful = NearchusPolicy().decide(observe(shape, window))
    assert cores(faithful.shape)[0] == pytest.approx(0.95)
    # the budget is the job's 15 cpu: nothing to grow into, so the split is rebalanced
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=15))
    assert plan.action == Action.REBALANCE
    assert cores(plan.shape)[0] == pytest.approx(0.891, abs=1e-3)
    assert plan.shape.total().cpu_cores == pytest.approx(15, abs=3e-3)  # millicore rounding


def test_a_saturated_ps_gets_cpu_back_in_the_faithful_blind_spot():
    # PS at 1.0/1.0 (saturated), workers at 0.85: both >= E_thd_opt, so faithful NEARCHUS
    # adds a worker; nearchus+ sees PSC and moves cpu to the PS
    shape = shape_of(ps=(1.0,), workers=(7.0, 7.0))
    window = steady(shape, (1.0, 5.95, 5.95), speed=1.0)
    assert NearchusPolicy().decide(observe(shape, window)).action == Action.ADD_WORKER
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=15))
    assert plan.action == Action.REBALANCE
    assert cores(plan.shape)[0] > 1.0


def test_a_saturated_job_with_room_grows_to_the_budget_split_by_cost_per_step():
    # The same job with a budget of 100: e_job 0.86 < 0.95, so faithful NEARCHUS adds a
    # worker; nearchus+ reads a saturated PS and grows by the room left, 85 cpu less a
    # millicore for each of 64 nodes' rounding = 84.936, to 99.936 cpu. Split by cost per
    # step (c_ps = 1.0, c_wk = 11.9 core-s, 20% slack): k = 1.2 / 11.9, PS = 99.936 k/(1+k)
    # = 9.155; workers 90.781 at most 7 x 1.5 = 10.5 each -> 9 workers; memory per node kept.
    shape = shape_of(ps=(1.0,), workers=(7.0, 7.0))
    window = steady(shape, (1.0, 5.95, 5.95), speed=1.0)
    plan = NearchusPlusPolicy().decide(observe(shape, window))
    assert plan.action == Action.SCALE_UP and plan.reason.startswith("PS saturated")
    k = 1.2 / 11.9
    assert cores(plan.shape)[0] == pytest.approx(99.936 * k / (1 + k), abs=2e-3)
    assert plan.shape.total().cpu_cores == pytest.approx(99.936, abs=1e-2)
    assert (plan.shape.n_ps, plan.shape.n_workers) == (1, 9)
    # PS at 0.9 and workers at 0.85 of their cpu: both busier than E_thd_opt (0.8), e_job
    # 0.86 -> grown the same way, the PS given its cost's share (c_ps 0.9 core-s per step)
    window = steady(shape, (0.9, 5.95, 5.95), speed=1.0)
    plan = NearchusPlusPolicy().decide(observe(shape, window))
    assert plan.action == Action.SCALE_UP and plan.reason.startswith("PS and workers busy")
    k = 0.9 * 1.2 / 11.9
    assert cores(plan.shape)[0] == pytest.approx(99.936 * k / (1 + k), abs=2e-3)


def test_a_job_with_an_idle_component_is_rebalanced_not_grown():
    # workers saturated (0.95) beside a PS at 0.1: the PS's idle cpu goes to the workers first
    shape = shape_of(ps=(5.0,), workers=(5.0, 5.0))
    plan = NearchusPlusPolicy().decide(observe(shape, steady(shape, (0.5, 4.75, 4.75), speed=1.0)))
    assert plan.action == Action.REBALANCE
    # workers at 0.7 (MU) beside a busy PS: no component idle enough to rebalance by cost,
    # none saturated -> the faithful MU rule adds workers
    shape = shape_of(ps=(1.0,), workers=(7.0, 7.0))
    window = steady(shape, (0.9, 4.9, 4.9), speed=1.0)
    assert NearchusPlusPolicy().decide(observe(shape, window)).action == Action.ADD_WORKER


def test_saturated_workers_beside_an_idle_ps_at_its_floor_grow_the_job():
    # The real small CNN's start (benchmarks/run/runtime_rightsizing.py): the PS at the
    # 0.1-core floor using 0.013, two workers using all of their 0.25; budget 2. e_job 0.85
    # < 0.95 and the PS cannot give more, so faithful NEARCHUS reads an MU bottleneck and
    # adds a worker sharing the same 0.5 cpu; nearchus+ grows the job into its budget.
    shape = shape_of(ps=(0.1,), workers=(0.25, 0.25))
    used = (0.013, 0.25, 0.25)
    window = steady(shape, used, speed=1.0)
    faithful = NearchusPolicy().decide(observe(shape, window, budget=2, free=2))
    assert faithful.action == Action.ADD_WORKER
    assert faithful.shape.role_total(NodeRole.WORKER).cpu_cores == pytest.approx(0.5, abs=2e-3)
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=2, free=2))
    assert plan.action == Action.SCALE_UP and plan.reason.startswith("workers saturated")
    assert plan.shape.total().cpu_cores == pytest.approx(2.0, abs=0.1)
    assert plan.shape.role_total(NodeRole.PS).cpu_cores == pytest.approx(0.1)
    # each worker may grow to a core (mu_free_cores) whatever R_up allows: 2 workers of
    # 0.95, not 6 of 0.375 (0.25 x 1.5)
    assert plan.shape.n_workers == 2
    # the same reading while the speed varies (CV > 5%): evident, so it grows as early
    plan = NearchusPlusPolicy().decide(
        observe(shape, noisy(shape, used, (1.0, 1.2, 0.9, 1.1, 1.0)), budget=2, free=2)
    )
    assert plan.action == Action.SCALE_UP and plan.reason.startswith("workers saturated")
    # workers at 0.9 of their cpu are neither saturated nor idle: faithful NEARCHUS reads
    # an MU bottleneck; nearchus+ keeps the shape (workers that use 90% of their cpu
    # are not allocated more than they can use, and another worker costs a restart)
    window = steady(shape, (0.013, 0.225, 0.225), speed=1.0)
    assert NearchusPolicy().decide(observe(shape, window, budget=2, free=2)).action == (
        Action.ADD_WORKER
    )
    assert NearchusPlusPolicy().decide(observe(shape, window, budget=2, free=2)) is None


def test_mu_bottleneck_adds_as_many_workers_as_the_measured_cap_needs():
    # workers hold 24 cpu each and use 16 (MU): 48 / 16 = 3 workers -> add 1 (at most 2x)
    shape = shape_of(ps=(2,), workers=(24, 24))
    plan = NearchusPlusPolicy().decide(observe(shape, steady(shape, (1.0, 16, 16))))
    assert plan.action == Action.ADD_WORKER
    assert cores(plan.shape) == pytest.approx([2, 16, 16, 16])
    assert plan.details["worker_mu"] == 16
    # 48 cpu used at 6 each would want 8 workers: capped at twice the current count
    plan = NearchusPlusPolicy().decide(observe(shape, steady(shape, (1.0, 6, 6))))
    assert plan.shape.n_workers == 4


def test_scale_up_goes_to_the_budget_in_one_move_with_more_workers():
    # 15 cpu (PS 1, workers 7 each), e_job 1.0, budget 100: x6.67 in one move.
    # Per worker at most 7 * 1.5 = 10.5 cpu -> 93.33 / 10.5 = 9 workers; PS link 10% -> 1 PS.
    shape = shape_of(ps=(1,), workers=(7, 7))
    net = {"ps-0": 10.0}
    plan = NearchusPlusPolicy().decide(observe(shape, steady(shape, (1, 7, 7), net=net)))
    assert plan.action == Action.SCALE_UP
    assert plan.shape.total().cpu_cores == pytest.approx(100, abs=0.1)
    assert (plan.shape.n_ps, plan.shape.n_workers) == (1, 9)


def test_scale_up_adds_ps_for_the_link_the_growth_will_need():
    # PS link at 40%; growing 6.67x would put it at 267% -> ceil(2.67 / 0.9) = 3 PS
    shape = shape_of(ps=(1,), workers=(7, 7))
    net = {"ps-0": 40.0}
    plan = NearchusPlusPolicy().decide(observe(shape, steady(shape, (1, 7, 7), net=net)))
    assert plan.shape.n_ps == 3


def test_scale_up_respects_a_worker_mu_cap_seen_before():
    shape = shape_of(ps=(1,), workers=(7, 7))
    plans = (Plan(shape, Action.ADD_WORKER, "mu", {"worker_mu": 5.0}),)
    obs = observe(shape, steady(shape, (1, 7, 7)), plans=plans)
    plan = NearchusPlusPolicy().decide(obs)
    assert plan.shape.n_workers == math.ceil(93.333 / 5)


def test_when_the_search_stops_it_goes_back_to_the_fastest_shape():
    best, worse = shape_of(), shape_of(workers=(5, 5, 5))
    current = shape_of(workers=(4, 4, 4, 4))
    plans = (Plan(best, Action.LAUNCH, "l"), Plan(worse, Action.ADD_WORKER, "m"),
             Plan(current, Action.ADD_WORKER, "m"))  # fmt: skip
    history = (ShapeRecord(best, 12.0), ShapeRecord(worse, 10.0))
    window = steady(current, (5, 3.5, 3.5, 3.5, 3.5), speed=10.0)
    obs = observe(current, window, plans=plans, history=history)
    plan = NearchusPlusPolicy().decide(obs)
    assert plan.shape == best and plan.details["final"]
    done = observe(best, steady(best, (1, 5, 5), speed=12.0), plans=(*plans, plan))
    assert NearchusPlusPolicy().decide(done) is None
    assert NearchusPlusPolicy().decision_due_s(done) == math.inf


def test_noise_alone_does_not_rebalance_nodes():
    # two PS at 0.55 and 0.6 efficiency differ by 0.05 < node_spread 0.1: no node move
    shape = shape_of(ps=(2, 2), workers=(10,))
    window = tuple(sample(60 * (i + 1), shape, (1.1, 1.2, 9.9)) for i in range(5))
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=14))
    assert plan is None or plan.action != Action.REBALANCE or cores(plan.shape)[:2] != [2, 2]


def test_nearchus_plus_parameters_extend_the_faithful_ones():
    params = NearchusPlusPolicy(max_scale_out=3).params
    assert params.r_up == 0.5 and params.max_scale_out == 3
    assert NearchusPlusPolicy().initial_shape(Resources(100), Resources(100)).n_workers == 2


def noisy(shape, used, speeds, start=60.0):
    """One sample a minute with these speeds (``used`` alike in each): CPU steady, speed not."""
    return tuple(sample(start + 60 * i, shape, used, s) for i, s in enumerate(speeds))


def test_an_evident_saturated_ps_grows_the_job_before_the_speed_is_stable():
    # The PS uses all of its 1 cpu in each of 5 samples while the speed varies by ~9% (CV >
    # 5%): the faithful detector waits; nearchus+ reads a saturated PS in every point and
    # grows as on a stable window. The same with act_on_evident off waits like the faithful.
    shape = shape_of(ps=(1.0,), workers=(7.0, 7.0))
    window = noisy(shape, (1.0, 5.95, 5.95), (1.0, 1.2, 0.9, 1.1, 1.0))
    assert NearchusPolicy().decide(observe(shape, window)) is None
    policy = NearchusPlusPolicy()
    obs = observe(shape, window)
    assert policy.decision_due_s(obs) == obs.time_s
    plan = policy.decide(obs)
    assert plan.action == Action.SCALE_UP and plan.reason.startswith("PS saturated")
    assert plan.shape.total().cpu_cores > 90
    waiting = NearchusPlusPolicy(act_on_evident=False)
    assert waiting.decide(observe(shape, window)) is None


def test_an_evident_idle_ps_is_rebalanced_and_mixed_readings_wait():
    shape = shape_of(ps=(5.0,), workers=(5.0, 5.0))
    speeds = (1.0, 1.2, 0.9, 1.1, 1.0)
    plan = NearchusPlusPolicy().decide(observe(shape, noisy(shape, (0.5, 4.75, 4.75), speeds)))
    assert plan.action == Action.REBALANCE and cores(plan.shape)[0] < 5.0
    # one point with the PS busy (4.5 of 5: neither idle nor saturated) is not evident
    window = noisy(shape, (0.5, 4.75, 4.75), speeds[:4]) + noisy(
        shape, (4.5, 4.75, 4.75), speeds[4:], start=300.0
    )
    assert NearchusPlusPolicy().decide(observe(shape, window)) is None
    # four points are too few: the detector's N_comp = 5 holds for evident readings too
    window = noisy(shape, (0.5, 4.75, 4.75), speeds[:4])
    assert NearchusPlusPolicy().decide(observe(shape, window)) is None


def test_evidently_idle_workers_get_the_faithful_mu_answer_before_the_speed_is_stable():
    # The real small CNN after its idle PS was folded: one worker at 1.493 cpu using 0.995
    # (one torch thread), the PS at 0.107 using 0.016, the speed varying by ~10%: no
    # stable window, so faithful NEARCHUS waits; nearchus+ reads idle workers in every
    # point and runs the engine: no PSN, nothing to rebalance, an MU bottleneck ->
    # ceil(1.493 / 0.995) = 2 workers.
    shape = shape_of(ps=(0.107,), workers=(1.493,))
    window = noisy(shape, (0.016, 0.995), (1.0, 1.2, 0.9, 1.1, 1.0))
    assert NearchusPolicy().decide(observe(shape, window, budget=2, free=0)) is None
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=2, free=0))
    assert plan.action == Action.ADD_WORKER and plan.shape.n_workers == 2
    waiting = NearchusPlusPolicy(act_on_evident=False)
    assert waiting.decide(observe(shape, window, budget=2, free=0)) is None


def test_an_idle_extra_ps_is_folded_into_the_others_when_the_links_allow():
    # 2 PS at 0.6 cpu using 0.15 each beside a saturated 0.4-cpu worker, 1 step/s, budget
    # 2, nothing free: c_ps = 0.3, c_wk = 0.4 core-s per step, 20% slack -> k = 0.36/0.4 =
    # 0.9, the one PS left gets 1.6 x 0.9/1.9 = 0.758 cpu and the worker the other 0.842;
    # the PS role's memory is kept (the folded PS's shards move to ps-0).
    shape = shape_of(ps=(0.6, 0.6), workers=(0.4,))
    window = steady(shape, (0.15, 0.15, 0.4), speed=1.0)
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=2, free=0))
    assert plan.action == Action.RESHAPE and "fold ps-1" in plan.reason
    assert (plan.shape.n_ps, plan.shape.n_workers) == (1, 1)
    assert cores(plan.shape) == pytest.approx([1.6 * 0.9 / 1.9, 1.6 - 1.6 * 0.9 / 1.9], abs=1e-3)
    ps_memory = plan.shape.role_total(NodeRole.PS).memory_bytes
    assert ps_memory == shape.role_total(NodeRole.PS).memory_bytes
    # without the fold (NEARCHUS keeps every PS) the same window is rebalanced
    kept = NearchusPlusPolicy(fold_idle_ps=False).decide(observe(shape, window, budget=2, free=0))
    assert kept.action == Action.REBALANCE and kept.shape.n_ps == 2


def test_a_ps_that_carries_the_link_is_not_folded():
    # the same job with each PS link at 30%: one PS fewer would put 60% on a link, above
    # fold_link_max (0.5) -> rebalanced, both PS kept
    shape = shape_of(ps=(0.6, 0.6), workers=(0.4,))
    net = {"ps-0": 0.3 * LINK, "ps-1": 0.3 * LINK}
    window = steady(shape, (0.15, 0.15, 0.4), speed=1.0, net=net)
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=2, free=0.4))
    assert plan.action == Action.REBALANCE and plan.shape.n_ps == 2


def test_a_saturated_rank_of_a_job_without_ps_grows_in_place_before_its_speed_is_stable():
    # A script's one rank at 0.5 of a 2-cpu budget uses all of it while its speed varies
    # by ~9%: nearchus+ grows it in place to the whole budget (2 cpu, two torch threads;
    # one rank: no restart, and no rounding room needed). Capped at R_up (or
    # mu_free_cores) per worker, as for a PS job's workers, the growth is two ranks of
    # 0.968 (the budget less 64 millicores of rounding room for up to 64 nodes).
    shape = shape_of(ps=(), workers=(0.5,))
    window = noisy(shape, (0.5,), (1.0, 1.2, 0.9, 1.1, 1.0))
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=2, free=1.5))
    assert plan.action == Action.SCALE_UP and plan.reason.startswith("workers saturated")
    assert cores(plan.shape) == [2.0]
    # two ranks of 0.5 -> 1 cpu each; three of 0.5 in a budget of 2 -> 0.666 each
    two = shape_of(ps=(), workers=(0.5, 0.5))
    plan = NearchusPlusPolicy().decide(observe(two, noisy(two, (0.5, 0.5), (1.0, 1.2, 0.9, 1.1, 1.0)),
                                               budget=2, free=1))  # fmt: skip
    assert cores(plan.shape) == [1.0, 1.0]
    three = shape_of(ps=(), workers=(0.5, 0.5, 0.5))
    window = noisy(three, (0.5, 0.5, 0.5), (1.0, 1.2, 0.9, 1.1, 1.0))
    plan = NearchusPlusPolicy().decide(observe(three, window, budget=2, free=0.5))
    assert cores(plan.shape) == [pytest.approx(0.666)] * 3
    capped = NearchusPlusPolicy(grow_ranks_in_place=False)
    plan = capped.decide(observe(shape, window, budget=2, free=1.5))
    assert cores(plan.shape) == [pytest.approx(0.968)] * 2


def test_saturated_ranks_grow_in_place_after_two_points_and_a_restart_waits_for_five():
    # two saturated points are enough to grow a rank in place (nothing restarts); four
    # are too few for a PS job, and for a rank growth that would add ranks (a restart)
    shape = shape_of(ps=(), workers=(0.5,))
    window = noisy(shape, (0.5,), (1.0, 1.2))
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=2, free=1.5))
    assert plan.action == Action.SCALE_UP and plan.reason.startswith("ranks saturated")
    assert cores(plan.shape) == [2.0]
    assert NearchusPlusPolicy(in_place_points=3).decide(
        observe(shape, window, budget=2, free=1.5)) is None  # fmt: skip
    past_the_node = observe(shape, window, budget=4, free=3.5, node_limit=Resources(2))
    assert NearchusPlusPolicy().decide(past_the_node) is None  # 2 ranks: a restart
    one_reading_idle = noisy(shape, (0.5,), (1.0,)) + noisy(shape, (0.2,), (1.0,), start=120)
    assert NearchusPlusPolicy().decide(observe(shape, one_reading_idle, budget=2)) is None
    ps_job = shape_of(ps=(1.0,), workers=(7.0, 7.0))
    window = noisy(ps_job, (1.0, 5.95, 5.95), (1.0, 1.2, 0.9, 1.1))
    assert NearchusPlusPolicy().decide(observe(ps_job, window)) is None
    with pytest.raises(SpecError, match="in_place_points=0"):
        NearchusPlusPolicy(in_place_points=0)


def test_an_idle_rank_of_a_job_without_ps_gets_the_mu_answer_not_an_empty_rebalance():
    # A rank waiting on its data (0.06 of 0.5 cpu): with no PS there is nothing to
    # rebalance (the split has no PS share to change), so the engine's MU rule answers:
    # ceil(0.5 / 0.06) = 9 ranks wanted, at most max_scale_out = 2x a move -> 2 ranks.
    shape = shape_of(ps=(), workers=(0.5,))
    window = noisy(shape, (0.06,), (1.0, 1.2, 0.9, 1.1, 1.0))
    plan = NearchusPlusPolicy().decide(observe(shape, window, budget=2, free=1.5))
    assert plan.action == Action.ADD_WORKER and plan.shape.n_workers == 2
    assert plan.shape.total().cpu_cores == pytest.approx(0.5)


def test_nearchus_plus_is_the_faithful_rule_list_with_named_replacements_and_additions():
    faithful = [rule.name for rule in NearchusPolicy().rules]
    assert faithful == ["stop", "scale_up", "add_ps", "rebalance", "add_worker"]
    plus = [rule.name for rule in NearchusPlusPolicy().rules]
    assert plus == ["finished", "stop+", "scale_up+", "add_ps+", "grow_saturated",
                    "rebalance+", "grow_starved", "add_worker+"]  # fmt: skip
    # The notes it keeps in its plans, typed, and the details they travel in.
    notes = PlusNotes(final=True, worker_mu=16.0)
    plan = Plan(shape_of(), Action.RESHAPE, "keep", notes.details())
    assert plan.details == {"final": 1.0, "worker_mu": 16.0}
    assert PlusNotes.of(plan) == notes == PlusNotes.of(Plan.from_json(plan.to_json()))
    assert PlusNotes.of(None) == PlusNotes() and PlusNotes().details() == {}
