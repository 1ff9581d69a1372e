"""The PS-scaling benchmark's fits (benchmarks/ps_scaling.py) on curves made by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ps_scaling as ps  # noqa: E402


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
    out = ps.held_out(rows, host)
    assert out["1"]["queueing+host"]["mape"] < 1e-6
    assert out["1"]["queueing"]["mape"] > 0.05  # without the host, the 1-core PS runs too fast
    assert "queueing+host" not in ps.held_out(rows)["1"]
    # the host a ps_ceiling result measured: its quietest run at the most workers
    ceiling = {"case": "wide-deep", "load_before": {"cpus": 2}, "runs": [
        {"workers": 6, "others_cores": 0.7, "worker_cpu_s_per_step": 0.03, "master_cpu_s_per_step": 0.001},
        {"workers": 6, "others_cores": 0.1, "worker_cpu_s_per_step": 0.025, "master_cpu_s_per_step": 0.001},
        {"workers": 1, "others_cores": 0.0, "worker_cpu_s_per_step": 0.02, "master_cpu_s_per_step": 0.002},
    ]}  # fmt: skip
    assert ps.host_of(ceiling, "wide-deep") == ps.Host(pytest.approx(1.9), pytest.approx(0.026))
    assert ps.host_of(ceiling, "mlp3") is None
