"""The planner on hand-made profiles and 3-4-row catalogs, with hand-computed picks."""

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profile_factory import linear_profile
from rightsize.core.catalog import load_catalog
from rightsize.core.errors import ResourceError, SpecError
from rightsize.core.spec import Constraints, Objective
from rightsize.perf.comm import CommModel
from rightsize.perf.iteration import EXCHANGES, ddp_copy_s, is_ddp, simulate_iteration
from rightsize.planning.baselines import cap_plan, greedy_config, tap_plan
from rightsize.planning.estimate import Estimator, PlanRequest
from rightsize.planning.options import bmax_on, make_option
from rightsize.planning.plan import Config, Slot
from rightsize.planning.planner import best_single_type, parse_instances, plan
from rightsize.planning.replan import Interruption, Progress, remaining_request, replan
from rightsize.planning.search import InfeasiblePlanError, SearchSettings, configurations, search

# Three GPU types. FAST: 1 V100 at $3/h; SLOW: 1 T4 at $1/h; QUAD: 4 T4 at $4/h.
CATALOG = textwrap.dedent("""\
    InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,NetworkGbps,Price,SpotPrice,Region
    fast.x,V100,1,8,61,10,3.0,1.0,r
    slow.x,T4,1,8,32,10,1.0,0.3,r
    quad.x,T4,4,48,192,50,4.0,,r
""")


class FreeComm(CommModel):
    """A network so fast that parameter exchange always hides behind backward."""

    kind = "free"

    def bus_bandwidth(self, size_bytes, world, link, concurrent=1):
        return 1e15


class SlowComm(CommModel):
    """Every transfer gets 100 MB/s of bus bandwidth: the exchange matters."""

    kind = "slow"

    def bus_bandwidth(self, size_bytes, world, link, concurrent=1):
        return 1e8


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    path = tmp_path_factory.mktemp("cat") / "mine.csv"
    path.write_text(CATALOG)
    return load_catalog(path)


def profiles():
    # measured on each accelerator, without spread so the numbers are exact:
    # V100: t(b) = 0.02 + 0.01 b per step; T4: t(b) = 0.02 + 0.03 b
    v100 = linear_profile(0.01, 0.02, device_kind="cuda", device_name="Tesla V100-SXM2-16GB")
    t4 = linear_profile(0.03, 0.02, device_kind="cuda", device_name="Tesla T4")
    return [p.model_copy(update={"samples": tuple(s.model_copy(update={"total_cv": 0.0}) for s in p.samples)})
            for p in (v100, t4)]  # fmt: skip


def options_for(catalog, caps, spot=False):
    return [make_option(profiles(), catalog.get(name), cap, spot) for name, cap in caps.items()]


def run(catalog, caps, request, **kw):
    options = options_for(catalog, caps)
    estimator = Estimator({o.name: o for o in options}, FreeComm(), request)
    return search(options, estimator, SearchSettings(**kw)), options, estimator


def test_measured_profiles_are_used_for_their_accelerators(catalog):
    fast, slow = options_for(catalog, {"fast.x": 8, "slow.x": 8})
    assert fast.provenance.startswith("measured (Tesla V100")
    assert slow.vm_compute(10).total_s == pytest.approx(0.02 + 0.03 * 10)
    # saturating batch: throughput b/(0.02+0.01b) reaches half of its best (at 256) at b = 2
    assert fast.batches()[0] == 2 and fast.batches()[-1] == 256


def test_time_objective_spreads_the_batch_cost_objective_concentrates_it(catalog):
    request = PlanRequest(256, 1000, objective=Objective.TIME)
    best = run(catalog, {"fast.x": 8}, request)[0][0]
    # 8 VMs x 32: t_iter = 0.02 + 0.01*32 = 0.34 s, the fastest the cap allows
    assert str(best.config) == "8×fast.x@32" and best.seconds_per_iter == pytest.approx(0.34)
    assert best.total_seconds == pytest.approx(340) and best.total_cost == pytest.approx(
        340 / 3600 * 24
    )
    # cost = N t_iter c price = N (0.02 c + 2.56) $3/h: 1 x 256 costs $2.150, 2 x 128 $2.167.
    # Within 1% they tie, and the tie goes to the faster plan (1.30 s against 2.58 s per step).
    plans = run(catalog, {"fast.x": 8}, PlanRequest(256, 1000, objective=Objective.COST))[0]
    assert [str(p.config) for p in plans[:2]] == ["2×fast.x@128", "1×fast.x@256"]
    assert plans[0].total_cost == pytest.approx(1.30 * 1000 / 3600 * 6)
    assert plans[1].total_cost == pytest.approx(2.58 * 1000 / 3600 * 3)


def test_a_deadline_rules_out_slow_plans(catalog):
    # deadline 500 s for 1000 iterations -> t_iter <= 0.5: 0.02 + 2.56/c <= 0.5 needs c = 8
    request = PlanRequest(256, 1000, Constraints(deadline_s=500), Objective.COST)
    assert str(run(catalog, {"fast.x": 8}, request)[0][0].config) == "8×fast.x@32"


def test_heterogeneous_when_one_type_cannot_hold_the_batch(catalog):
    # each type holds at most 2 x 256 = 512 of the 1024: only both together can
    request = PlanRequest(1024, 100, objective=Objective.TIME)
    plans = run(catalog, {"fast.x": 2, "slow.x": 2}, request)[0]
    assert [str(p.config) for p in plans] == ["2×fast.x@256 + 2×slow.x@256"]
    # the slower T4 sets the pace: t_iter = 0.02 + 0.03 * 256
    assert plans[0].seconds_per_iter == pytest.approx(7.70)


def test_ties_prefer_homogeneous_and_larger_instances(catalog):
    request = PlanRequest(64, 10, objective=Objective.COST)
    plans = run(catalog, {"slow.x": 8, "quad.x": 2}, request)[0]
    assert len(plans[0].config.slots) == 1


def test_infeasible_deadline_names_the_fastest_plan(catalog):
    request = PlanRequest(256, 1000, Constraints(deadline_s=60), Objective.COST)
    with pytest.raises(
        InfeasiblePlanError,
        match=r"deadline 1m00s cannot be met: the fastest plan, 8×fast.x@32, takes 5m40s",
    ):
        run(catalog, {"fast.x": 8}, request)
    request = PlanRequest(256, 1000, Constraints(budget_usd=0.5), Objective.TIME)
    with pytest.raises(
        InfeasiblePlanError,
        match=r"budget \$0.50 is too small: the cheapest plan, 1×fast.x@256, costs \$2.15",
    ):
        run(catalog, {"fast.x": 8}, request)


def test_a_global_batch_no_configuration_adds_up_to(catalog):
    # 1009 is prime and above B_max (256): no equal share fits, and an odd batch is no sum
    # of fast.x's powers of two (from 2)
    with pytest.raises(InfeasiblePlanError, match="no configuration adds up to global batch 1009"):
        run(catalog, {"fast.x": 8}, PlanRequest(1009, 10))


def test_a_global_batch_that_is_no_power_of_two_is_planned_by_equal_shares(catalog):
    # 1000 on up to 8 fast.x (B_max 256): 4 x 250, 5 x 200 or 8 x 125 (was refused)
    plans, _, _ = run(catalog, {"fast.x": 8}, PlanRequest(1000, 10), top=5)
    assert {str(p.config) for p in plans} == {"4×fast.x@250", "5×fast.x@200", "8×fast.x@125"}
    # a 4-GPU VM takes a share only if its devices split it evenly: 360 = 4 x 90 per GPU
    options = options_for(catalog, {"quad.x": 3})
    assert 360 in options[0].batches(global_batch=360)
    assert 90 not in options[0].batches(global_batch=270)  # 270 / 3 VMs = 90 = 4 x 22.5
    # a power-of-two global batch adds nothing to Srift's powers of two
    assert options[0].batches(global_batch=1024) == options[0].batches()


@settings(max_examples=60, deadline=None)
@given(
    global_batch=st.one_of(st.integers(4, 10).map(lambda e: 2**e), st.integers(16, 1024)),
    fast_cap=st.integers(1, 8),
    slow_cap=st.integers(1, 8),
    quad_cap=st.integers(1, 3),
    objective=st.sampled_from(list(Objective)),
    deadline=st.one_of(st.none(), st.floats(50, 5000)),
    budget=st.one_of(st.none(), st.floats(0.5, 20)),
    comm=st.sampled_from([FreeComm(), SlowComm()]),
    eager_k=st.one_of(st.none(), st.integers(1, 4)),
)
def test_every_plan_respects_the_constraints_and_the_search_is_optimal(
    catalog, global_batch, fast_cap, slow_cap, quad_cap, objective, deadline, budget, comm, eager_k
):
    # exhaustive against every configuration; eager (without a time limit) against every
    # configuration of at most eager_k VMs a type: the bounds that prune both are exact
    request = PlanRequest(
        global_batch, 1000, Constraints(deadline_s=deadline, budget_usd=budget), objective
    )
    caps = {"fast.x": fast_cap, "slow.x": slow_cap, "quad.x": quad_cap}
    options = options_for(catalog, caps)
    estimator = Estimator({o.name: o for o in options}, comm, request)
    if eager_k is None:
        mode = SearchSettings(top=3)
    else:
        mode = SearchSettings("eager", top=3, eager_k=eager_k, eager_budget_s=float("inf"))
    try:
        plans = search(options, estimator, mode)
    except InfeasiblePlanError:
        plans = []
    space = list(configurations(options, request.global_batch, 3, eager_k))
    brute = [estimator.estimate(c) for c in space]
    for config, predicted in zip(space, brute, strict=True):  # the bound the search prunes by
        bound = estimator.bound_plan(config).seconds_per_iter
        assert bound <= predicted.seconds_per_iter * (1 + 1e-9)
    feasible = [p for p in brute if estimator.feasible(p)]
    assert bool(plans) == bool(feasible)
    for p in plans:
        assert p.config.global_batch == request.global_batch
        assert all(s.count <= min(caps[s.instance], eager_k or 8) for s in p.config.slots)
        assert deadline is None or p.total_seconds <= deadline
        assert budget is None or p.total_cost <= budget
    if feasible:
        value = lambda p: estimator.objective_value(p.seconds_per_iter, p.config)  # noqa: E731
        best = sorted(value(p) for p in feasible)[:3]
        assert sorted(value(p) for p in plans) == pytest.approx(best, rel=1e-9)  # the 3 best
        assert value(plans[0]) <= best[0] * 1.01 + 1e-12  # ties within 1% go by preference


def test_cap_and_tap(catalog):
    options = options_for(catalog, {"fast.x": 2, "slow.x": 8})
    request = PlanRequest(1024, 100)
    estimator = Estimator({o.name: o for o in options}, FreeComm(), request)
    # CAP: cheapest first -> slow.x, 4 x 256 holds it all
    assert str(cap_plan(options, estimator).config) == "4×slow.x@256"
    # TAP: fastest first -> fast.x 2 x 256, then slow.x for the other 512
    assert str(tap_plan(options, estimator).config) == "2×fast.x@256 + 2×slow.x@256"
    assert greedy_config(options[:1], 3) is None  # fast.x batches start at 2: 2 + nothing = 3 fails


def test_a_budget_below_one_instance_hour_plans_a_job_that_costs_less(catalog):
    # slow.x costs $1.00/h; a job of a few seconds costs cents, billed per second
    options = options_for(catalog, {"fast.x": 2, "slow.x": 2})
    request = PlanRequest(256, 10, Constraints(budget_usd=0.5))
    result = plan(options, FreeComm(), request)
    assert result.plans and all(p.total_cost <= 0.5 for p in result.plans)
    assert min(o.price_per_hour for o in options) > 0.5
    # a budget the cheapest plan exceeds is refused with that plan's cost, not an hourly rule
    tiny = PlanRequest(256, 10, Constraints(budget_usd=result.plans[0].total_cost / 100))
    with pytest.raises(InfeasiblePlanError, match="is too small: the cheapest plan"):
        plan(options, FreeComm(), tiny)


def test_instance_parsing(catalog):
    options = options_for(catalog, {"fast.x": 2, "slow.x": 2})
    assert parse_instances("fast.x:4, slow.x", catalog) == {"fast.x": 4, "slow.x": 16}
    with pytest.raises(SpecError, match="count must be at least 1"):
        parse_instances("fast.x:0", catalog)
    with pytest.raises(Exception, match="did you mean 'fast.x'"):
        parse_instances("fast.y:2", catalog)
    result = plan(options, FreeComm(), PlanRequest(256, 100, objective=Objective.TIME))
    assert result.mode == "exhaustive" and {p.policy for p in result.baselines} == {"cap", "tap"}


def test_replan_keeps_survivors_never_asks_for_the_lost_type_and_pays_launch(catalog):
    # Srift §5.4 in miniature: 2 fast.x were running, one was preempted at iteration 200 of 400
    options = options_for(catalog, {"fast.x": 8, "slow.x": 8})
    original = PlanRequest(512, 400, Constraints(deadline_s=2000), Objective.COST)
    lost = Interruption(frozenset({"fast.x"}), {"fast.x": 1}, launch_s=150, detach_s=5)
    request = remaining_request(original, Progress(200, 222, 1.0), lost)
    assert (request.iterations, request.constraints.deadline_s) == (200, 1778)
    plans = replan(options, FreeComm(), original, Progress(200, 222, 1.0), lost)
    for p in plans:
        fast = sum(s.count for s in p.config.slots if s.instance == "fast.x")
        assert fast <= 1  # the survivor may stay, no new fast.x
        new_vms = any(s.instance == "slow.x" for s in p.config.slots)
        assert p.launch_s == (155 if new_vms else 5)
        assert p.total_seconds <= 1778
    with pytest.raises(ResourceError, match="already used up"):
        remaining_request(original, Progress(10, 2001, 0), lost)
    with pytest.raises(ResourceError, match="all iterations are done"):
        remaining_request(original, Progress(400, 10, 0), lost)


def test_best_single_type_when_the_best_plan_mixes_types(catalog):
    # what a SkyPilot task (identical nodes) can launch. One fast.x holds 256 of the 512 at
    # 0.02 + 0.01*256 = 2.58 s, two slow.x the rest at 0.02 + 0.03*128 = 3.86 s: the best
    # plan. Alone, only the two slow.x hold it, at 256 each: 0.02 + 0.03*256 = 7.70 s.
    options = options_for(catalog, {"fast.x": 1, "slow.x": 2})
    request = PlanRequest(512, 100, objective=Objective.TIME)
    best = plan(options, FreeComm(), request).plans[0]
    assert str(best.config) == "1×fast.x@256 + 2×slow.x@128"
    assert best.seconds_per_iter == pytest.approx(3.86)
    single = best_single_type(options, FreeComm(), request)
    assert str(single.config) == "2×slow.x@256" and single.seconds_per_iter == pytest.approx(7.70)
    # 1024 samples need both types (each holds at most 2 x 256)
    with pytest.raises(InfeasiblePlanError):
        best_single_type(options_for(catalog, {"fast.x": 2, "slow.x": 2}), FreeComm(),
                         PlanRequest(1024, 100, objective=Objective.TIME))  # fmt: skip


def test_memory_line_gives_the_target_bmax():
    # probes (1, 2 MB) and (256, 257 MB): 1 MB resident + 1 MB per sample
    profile = linear_profile()
    assert bmax_on(profile, 16 * 2**30) == int((0.9 * 16 * 2**30 - 1e6) // 1e6)


def test_ddp_modes_add_the_bucket_copies_and_the_optimizer_step(catalog):
    (fast,) = options_for(catalog, {"fast.x": 8})
    config = Config((Slot("fast.x", 2, 32),))

    def seconds(exchange: str) -> float:
        request = PlanRequest(64, 1000, exchange=exchange)
        return Estimator({"fast.x": fast}, FreeComm(), request).estimate(config).seconds_per_iter

    # the exchange is free (FreeComm), so overlapped or serial alike; DDP adds the optimizer
    # step and two copies of the gradients, each reading and writing them: 4 x gradient
    # bytes at V100's 900 GB/s (read + write)
    grad_bytes = sum(g.param_bytes for g in fast.layers)
    assert fast.mem_bytes_per_s == pytest.approx(900e9, rel=0.01)
    ddp_terms = fast.compute.optimizer_s + 4 * grad_bytes / fast.mem_bytes_per_s
    assert seconds("ddp-buckets") - seconds("per-layer") == pytest.approx(ddp_terms)
    assert seconds("ddp-serial") == pytest.approx(seconds("ddp-buckets"))


def test_the_estimator_predicts_what_the_iteration_simulator_does(catalog):
    # no spread, so the straggler phase is the mean: the search's cached estimate must equal
    # the plain simulator in every exchange mode
    (fast,) = options_for(catalog, {"fast.x": 8})
    config, mean, comm = Config((Slot("fast.x", 2, 32),)), fast.vm_compute(32), SlowComm()
    predicted = {}
    for mode in EXCHANGES:
        request = PlanRequest(64, 1000, exchange=mode)
        predicted[mode] = Estimator({"fast.x": fast}, comm, request).estimate(config)
        ddp = is_ddp(mode)
        expected = simulate_iteration(
            mean.total_s - mean.backward_s, mean.backward_s, fast.layers, 2, comm, fast.link,
            optimizer_s=fast.compute.optimizer_s if ddp else 0.0, exchange=mode,
            copy_s=ddp_copy_s(fast.layers, fast.mem_bytes_per_s) if ddp else 0.0,
        )  # fmt: skip
        assert predicted[mode].seconds_per_iter == pytest.approx(expected.iteration_s)
    # the slow exchange outlasts backward, and serial waits for backward first
    serial, overlapped = predicted["ddp-serial"], predicted["ddp-buckets"]
    assert serial.seconds_per_iter > overlapped.seconds_per_iter


def test_ddp_probe_adds_the_probed_overhead_on_its_host_and_falls_back_elsewhere(catalog):
    from rightsize.perf.ddp_overhead import DdpOverheadModel
    from rightsize.profiling.ddp_probe import DdpProbeRecord

    (fast,) = options_for(catalog, {"fast.x": 8})
    config, mean = Config((Slot("fast.x", 2, 32),)), fast.vm_compute(32)
    # 2 processes on "fast.x": 5 ms more than the compute, for any gradient up to 1 GiB
    probe = DdpOverheadModel([DdpProbeRecord(2, 2**30, 1, 0.010, 0.015)], "fast.x")

    def predicted(model):
        request = PlanRequest(64, 1000, exchange="ddp-probe", ddp_probe=model)
        return Estimator({"fast.x": fast}, SlowComm(), request).estimate(config)

    on_host = predicted(probe)
    assert on_host.seconds_per_iter == pytest.approx(
        mean.total_s + 0.005 + fast.compute.optimizer_s  # no spread: compute is the mean
    )
    assert on_host.models["comm"] == "ddp-probe"
    elsewhere = predicted(DdpOverheadModel(probe.records, "another-host"))
    serial = Estimator({"fast.x": fast}, SlowComm(), PlanRequest(64, 1000, exchange="ddp-serial"))
    assert elsewhere.seconds_per_iter == pytest.approx(serial.estimate(config).seconds_per_iter)
    assert elsewhere.models["comm"] == "slow, no DDP probe"
    with pytest.raises(ValueError, match="needs a DDP probe"):
        PlanRequest(64, 1000, exchange="ddp-probe")


def test_plans_carry_their_models_interval_and_overlaps_are_named(catalog):
    from rightsize.perf.device_model import GpuCompute
    from rightsize.planning.options import ComputeMethod, DeviceChoice
    from rightsize.planning.plan import CloudPlan, overlapping

    cpu_profile = linear_profile(0.01, 0.02)  # not measured on any GPU: the device model
    calibrated = make_option([cpu_profile], catalog.get("fast.x"), 8)
    assert isinstance(calibrated.compute, GpuCompute)
    assert calibrated.provenance == "device model (pytorch)"
    assert calibrated.log_spread == calibrated.compute.efficiencies.log_spread
    # per operation: a profile without recorded operations falls back to the class model
    fallback = make_option([cpu_profile], catalog.get("fast.x"), 8,
                           device=DeviceChoice(ComputeMethod.CALIBRATED_PER_OP))  # fmt: skip
    assert fallback.provenance == "device model (pytorch)"
    ratio = make_option([cpu_profile.model_copy(update={"device": cpu_profile.device.model_copy(
        update={"peak_flops_per_s": 1e11, "peak_mem_bytes_per_s": 1e10})})],
        catalog.get("fast.x"), 8, device=DeviceChoice(ComputeMethod.RATIO))  # fmt: skip
    assert ratio.provenance.startswith("roofline") and ratio.log_spread is None
    measured = options_for(catalog, {"fast.x": 8})[0]
    assert measured.log_spread == 0.0
    # plans: 100 s at x/÷ e^0.1 = 90.5-110.5 s; a second at 105 s overlaps, one at 130 s not
    config = Config((Slot("fast.x", 1, 8),))

    def plan_of(seconds, spread=0.1):
        return CloudPlan(config, seconds, 1, 3.6, "srift", log_spread=spread)

    plans = [plan_of(100), plan_of(105), plan_of(130)]
    assert overlapping(plans, "time") == [1]
    low, high = plans[0].interval(100)
    assert low == pytest.approx(100 / 1.10517, rel=1e-4) and high == pytest.approx(110.517, rel=1e-4)
    assert overlapping([plan_of(100, None), plan_of(100)], "time") == []  # unknown: no claim
    assert plans[0].to_dict()["total_cost_interval"][1] == pytest.approx(0.1 * 1.10517, rel=1e-4)
