"""The PS-scaling benchmark's fits (benchmarks/ps/ps_scaling.py) on curves made by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.ps import ps_scaling as ps  # noqa: E402


def curve(ps_cpu: float, update_s: float, per_byte: float, think_s: float, moved: float):
    """Rows a PS with these costs would give for 1-6 workers (the queueing model's own)."""
    f = ps.Fit(update_s, per_byte, think_s)
    rows = []
    for n in range(1, 7):
        steps = ps.predict(f, ps_cpu, n, moved, queueing=True)
        used = steps * (update_s + per_byte * moved)
        rows.append({"ps_cpu": ps_cpu, "workers": n, "steps_per_s": steps, "ps_cpu_used": used,
                     "ps_bytes_per_s": steps * moved, "bytes_per_step": moved})  # fmt: skip
    return rows


def test_the_ps_costs_come_back_from_the_ps_readings():
    # one model moves the same bytes every step: only the sum per step is identifiable
    rows = curve(0.25, 0.002, 1e-9, 0.1, 7e6) + curve(1.0, 0.002, 1e-9, 0.1, 7e6)
    a, b = ps.fit_ps_cpu(rows)
    assert a + b * 7e6 == pytest.approx(0.002 + 0.007, rel=1e-6)
    assert ps.fit(rows).think_s == pytest.approx(0.1, rel=1e-6)
    # two sizes of step separate the cost per update from the cost per byte
    rows += curve(0.5, 0.002, 1e-9, 0.1, 2e6)
    a, b = ps.fit_ps_cpu(rows)
    assert a == pytest.approx(0.002, rel=1e-6) and b == pytest.approx(1e-9, rel=1e-6)


def test_held_out_curves_are_predicted_and_saturation_found():
    rows = [r for c in (0.25, 0.5, 1.0) for r in curve(c, 0.002, 1e-9, 0.1, 7e6)]
    out = ps.held_out(rows)
    assert set(out) == {"0.25", "0.5", "1"}
    assert out["0.5"]["queueing"]["mape"] < 1e-6  # made by the same model
    # a 0.25-core PS: D = (0.002 + 0.007) / 0.25 = 36 ms per update, so at most 27.8 steps/s;
    # Z = 0.1 s: 1 worker ~7.4 steps/s; the curve flattens before 6 workers
    measured = out["0.25"]["measured"]
    assert measured[6] < 27.8 and ps.saturation(measured) is not None
    assert ps.saturation({1: 10.0, 2: 20.0, 3: 30.0}) is None
    assert ps.saturation({1: 10.0, 2: 20.0, 3: 21.0}) == 2


def ceiling_run(ps_cpu: float, workers: int, others: float, worker_cpu: float, master: float):
    return {"ps_cpu": ps_cpu, "workers": workers, "others_cores": others,
            "worker_cpu_s_per_step": worker_cpu, "master_cpu_s_per_step": master}  # fmt: skip


def test_curves_on_a_shared_host_are_recovered_with_its_measurement():
    # curves made on a host with 1.0 core left to the job, where the workers spend 0.03 s of CPU
    # per step: D_host = (0.009 + 0.03) / 1.0 = 39 ms, so the job never passes 25.6 steps/s
    host = ps.Host(cores=1.0, colocated_cpu_s_per_step=0.03)
    f = ps.Fit(0.002, 1e-9, 0.1)
    rows = []
    for c in (0.25, 0.5, 1.0):
        for n in range(1, 7):
            steps = ps.predict(f, c, n, 7e6, queueing=True, host=host)
            rows.append({"ps_cpu": c, "workers": n, "steps_per_s": steps, "bytes_per_step": 7e6,
                         "ps_cpu_used": steps * 0.009, "ps_bytes_per_s": steps * 7e6})  # fmt: skip
    assert max(r["steps_per_s"] for r in rows) < 1 / 0.039
    # the fit takes the host's demand out of Z: one worker waits for neither the PS nor the host
    assert ps.fit(rows, host=host).think_s == pytest.approx(0.1, rel=1e-6)
    # ceiling runs at the other settings measured that host (1.0 core left: 2 - 1.0 others)
    ceiling = ps.Ceiling(2.0, tuple(ceiling_run(c, 6, 1.0, 0.029, 0.001) for c in (0.25, 0.5, 1.0)))
    out = ps.held_out(rows, ceiling)
    assert out["1"]["host"] == {"cores": 1.0, "colocated_cpu_s_per_step": pytest.approx(0.03),
                                "master_cpu_s_per_step": 0.001}  # fmt: skip
    assert out["1"]["queueing+host"]["mape"] < 1e-6
    assert out["1"]["queueing"]["mape"] > 0.05  # without the host, the 1-core PS runs too fast
    assert "queueing+host" not in ps.held_out(rows)["1"]
    # the host a ps_ceiling result measured: its quietest run at the most workers
    result = {"case": "wide-deep", "load_before": {"cpus": 2}, "runs": [
        ceiling_run(1.0, 6, 0.7, 0.03, 0.001), ceiling_run(0.5, 6, 0.1, 0.025, 0.001),
        ceiling_run(1.0, 1, 0.0, 0.02, 0.002)]}  # fmt: skip
    assert ps.Ceiling.of([result], "wide-deep").host() == ps.Host(
        pytest.approx(1.9), pytest.approx(0.026), pytest.approx(0.001))  # fmt: skip
    assert ps.Ceiling.of([result], "mlp3") is None
    # a split never reads the ceiling runs at the PS setting it holds out
    held_1 = ps.Ceiling.of([result], "wide-deep").without(1.0)
    assert [r["ps_cpu"] for r in held_1.runs] == [0.5]
    assert ps.Ceiling.of([result], "wide-deep").without(0.5).host().cores == pytest.approx(1.3)


def test_the_worker_cpu_per_step_is_solved_from_one_worker_runs():
    # T = max(c / q, c + D_ps): a 1/6-core worker, a 0.25-core PS at 19 ms per update (76 ms)
    quota_bound = {"steps_per_s": 1 / 0.144, "ps_cpu": 0.25}  # c / q = 0.144 -> c = 0.024
    assert ps.alone_cpu_s(quota_bound, 0.019, 1 / 6, None) == pytest.approx(0.024)
    ps_bound = {"steps_per_s": 1 / 0.2, "ps_cpu": 0.25}  # c + 0.076 = 0.2 -> c = 0.124 < 0.2 / 6?
    assert ps.alone_cpu_s(ps_bound, 0.019, 1, None) == pytest.approx(0.124)
    # with the host: c + 0.076 + (0.019 + 0.001 + c) / 2 = 0.2 -> c = (0.2 - 0.086) / 1.5
    host = ps.Host(2.0, 0.03, 0.001)
    assert ps.alone_cpu_s(ps_bound, 0.019, 1, host) == pytest.approx(0.114 / 1.5)
    # the growth with co-located workers: least squares through the one-worker CPU
    assert ps.growth_through(0.024, [(6, 0.027), (6, 0.029), (1, 0.5)]) == pytest.approx(0.0008)
    assert ps.growth_through(0.024, [(6, 0.02)]) == 0.0  # never negative
    assert ps.growth_through(0.024, [(1, 0.03)]) == 0.0  # nothing to fit it on


def test_quota_curves_are_recovered_held_out():
    # curves a quota'd worker makes (24 ms of CPU per step alone, +0.6 ms per co-located worker,
    # 1/6 core) against a PS at 19 ms per update; the ceiling measured the growth at 6 workers
    f = ps.Fit(0.019, 0.0, 0.024, worker_cpu_s=0.024, worker_cpu_growth_s=0.0006)
    rows = []
    for c in (0.25, 0.5, 1.0):
        for n in range(1, 7):
            steps = ps.predict(f, c, n, 6e5, queueing=True, worker_cores=1 / 6)
            rows.append({"ps_cpu": c, "workers": n, "steps_per_s": steps, "bytes_per_step": 6e5,
                         "ps_cpu_used": steps * 0.019, "ps_bytes_per_s": steps * 6e5})  # fmt: skip
    # the 1-core curve is quota-bound throughout: 6 workers at 0.027 s / (1/6) each
    assert rows[-1]["steps_per_s"] == pytest.approx(6 / 0.162)
    runs = tuple(ceiling_run(c, 6, 0.0, 0.027, 0.0) for c in (0.25, 0.5, 1.0))
    out = ps.held_out(rows, ps.Ceiling(float("inf"), runs), worker_cores=1 / 6)
    for held in ("0.25", "0.5", "1"):
        quota = out[held]["queueing+quota"]
        assert quota["mape"] < 1e-6
        assert quota["fit"]["worker_cpu_growth_s"] == pytest.approx(0.0006)
    # the queueing model without the quota adds the PS's wait to the worker's step: it misses
    assert out["0.25"]["queueing"]["mape"] > 0.1


def test_repeats_merge_to_medians_keeping_the_worker_cpu_and_run_in_a_shuffled_order():
    runs = [{"ps_cpu": 0.5, "workers": 2, "steps_per_s": s, "ps_cpu_used": 0.1,
             "ps_bytes_per_s": 1e6, "bytes_per_step": 5e4, "worker_cpu_s_per_step": c}
            for s, c in ((10.0, 0.02), (30.0, 0.01), (20.0, 0.05))]  # fmt: skip
    (merged,) = ps.merge_repeats(runs)
    assert merged["repeats"] == 3 and merged["steps_per_s"] == 20.0
    assert merged["worker_cpu_s_per_step"] == 0.02  # the quota models' growth fit reads it
    # runs stored before the workers' CPU was read merge without it
    older = [{k: v for k, v in r.items() if k != "worker_cpu_s_per_step"} for r in runs]
    assert "worker_cpu_s_per_step" not in ps.merge_repeats(older)[0]
    # every point once per repeat; a repeat's order is its own and reproducible
    orders = [ps.run_order([0.25, 1.0], 3, repeat) for repeat in range(3)]
    assert all(sorted(o) == [(c, n) for c in (0.25, 1.0) for n in (1, 2, 3)] for o in orders)
    assert len({tuple(o) for o in orders}) > 1 and orders[0] == ps.run_order([0.25, 1.0], 3, 0)
