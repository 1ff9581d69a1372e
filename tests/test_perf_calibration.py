"""Fitting the device model (perf/calibration.py) on data the model itself made, where the
answer is known, and its held-out errors."""

from __future__ import annotations

import dataclasses

import pytest

from rightsize.core.catalog import Accelerator
from rightsize.perf import calibration
from rightsize.perf.calibration import Measurement
from rightsize.perf.device_model import CostSheet, Efficiencies, LayerCost
from rightsize.perf.precision import OpClass, Precision

GPUS = [
    Accelerator("old", 12, 4.0, 4.0, 240.0),
    Accelerator("mid", 16, 15.0, 120.0, 900.0),
    Accelerator("new", 40, 20.0, 310.0, 1500.0, tf32_tflops=155.0),
    Accelerator("newer", 80, 60.0, 990.0, 3300.0, tf32_tflops=495.0),
]
CNN = CostSheet.of_layers([LayerCost(OpClass.CONV, 4e9, 8e9, 3e6, 1e8),
                           LayerCost(OpClass.NORM, 1e7, 2e7, 3e6, 1e4),
                           LayerCost(OpClass.MATMUL, 4e6, 8e6, 4e3, 8e6)],
                          4.1e9, 8.1e9, 2e7)  # fmt: skip
MLP = CostSheet.of_layers([LayerCost(OpClass.MATMUL, 5e8, 1e9, 4e4, 2e8)], 5e8, 1e9, 1e5)
TRUE = Efficiencies({OpClass.CONV: 0.6, OpClass.MATMUL: 0.7, OpClass.ATTENTION: 0.5},
                    {OpClass.CONV: 0.4, OpClass.MATMUL: 0.5, OpClass.ATTENTION: 0.3},
                    memory=0.8, kernel_s=8e-6)  # fmt: skip


def synthetic() -> list[Measurement]:
    rows = []
    for acc in GPUS:
        for model, sheet in (("cnn", CNN), ("mlp", MLP)):
            for precision in (Precision.FP32, Precision.AMP):
                for batch in (32, 256):
                    m = Measurement(model, sheet, acc, precision, batch, 1.0)
                    rows.append(dataclasses.replace(
                        m, samples_per_s=calibration.predicted_samples_per_s(m, TRUE)))  # fmt: skip
    return rows


def test_fit_recovers_throughput_of_the_model_that_made_the_data():
    rows = synthetic()
    eff = calibration.fit(rows, prior_weight=1e-6)
    assert max(calibration.absolute_errors(rows, eff)) < 0.01
    assert max(calibration.ratio_errors(rows, eff)) < 0.01
    # the prior alone is far off: the fit is what brought the errors down
    assert max(calibration.absolute_errors(rows, calibration.PRIOR)) > 0.1


def test_ratio_pairs_same_model_batch_and_precision_on_different_gpus():
    rows = synthetic()
    # 2 models x 2 precisions x 2 batches = 8 groups of 4 GPUs: 6 pairs each
    assert len(calibration.ratio_errors(rows, TRUE)) == 8 * 6
    assert calibration.ratio_errors(rows, TRUE) == pytest.approx([0.0] * 48)


def test_ratio_pairs_come_from_one_source_unless_asked():
    rows = [dataclasses.replace(m, source="a" if m.accelerator.name in ("old", "mid") else "b")
            for m in synthetic()]  # fmt: skip
    # per group of 4 GPUs: old-mid and new-newer within a source; all 6 across sources
    assert len(calibration.ratio_errors(rows, TRUE)) == 8 * 2
    assert len(calibration.ratio_errors(rows, TRUE, same_source=False)) == 8 * 6
    held = calibration.leave_one_out(rows, "gpu", lambda seen: TRUE)
    assert held.summary()["ratio_pairs"] == 4 * 8  # each GPU in its one same-source pair
    assert held.summary()["ratio_any_source_pairs"] == 4 * 3 * 8


def test_leave_one_out_predicts_what_it_did_not_see():
    rows = synthetic()
    by_gpu = calibration.leave_one_out(rows, "gpu",
                                       lambda seen: calibration.fit(seen, prior_weight=1e-6))
    assert len(by_gpu.absolute) == len(rows)  # every row predicted once, held out
    assert by_gpu.summary()["absolute_median"] < 0.02
    # pairs with the held-out GPU in them: each of 4 GPUs is in 3 pairs of each of 8 groups
    assert by_gpu.summary()["ratio_pairs"] == 4 * 3 * 8
    by_model = calibration.leave_one_out(rows, "model", calibration.fit)
    assert by_model.summary()["n"] == len(rows)
    assert calibration.log_spread(by_gpu) >= 0
    # by source: each publisher's rows predicted by a fit that saw none of them
    sourced = [dataclasses.replace(m, source=f"s{i % 3}") for i, m in enumerate(rows)]
    by_source = calibration.leave_one_out(sourced, "source",
                                          lambda seen: calibration.fit(seen, prior_weight=1e-6))
    assert sorted(set(by_source.groups)) == ["s0", "s1", "s2"]
    assert len(by_source.absolute) == len(rows) and by_source.summary()["absolute_median"] < 0.02


def test_fit_refuses_no_data():
    with pytest.raises(ValueError, match="at least one measurement"):
        calibration.fit([])


def test_the_fits_vectorised_step_is_the_device_models_step():
    for m in synthetic():
        for eff in (TRUE, calibration.PRIOR):
            fast = calibration._fast_samples_per_s(calibration._prepare(m),
                                                   calibration._efficiency_vector(eff),
                                                   eff.memory, eff.kernel_s)  # fmt: skip
            assert fast == pytest.approx(calibration.predicted_samples_per_s(m, eff), rel=1e-9)


def test_both_fits_recover_how_much_faster_the_reference_stacks_train():
    """Rows measured with NVIDIA's reference implementations (``reference``) run a fitted
    factor faster than users' own code; the efficiencies stay those of users' code, which is
    what every plan predicts. Half the synthetic rows are made 1.6x faster: each fit finds it."""
    from tests.test_perf_op_model import EFF, _synthetic_rows

    from rightsize.perf import op_calibration

    def made_faster(rows, predict, eff):
        out = []
        for i, m in enumerate(rows):
            reference = i % 2 == 0
            speed = predict(m, eff) * (1.6 if reference else 1.0)
            out.append(dataclasses.replace(m, reference=reference, samples_per_s=speed))
        return out

    rows = made_faster(synthetic(), calibration.predicted_samples_per_s, TRUE)
    eff = calibration.fit(rows, prior_weight=1e-6)
    assert eff.reference_speedup == pytest.approx(1.6, rel=0.01)
    assert max(calibration.absolute_errors(rows, eff)) < 0.01
    plain = dataclasses.replace(rows[0], reference=False)
    assert calibration.predicted_samples_per_s(rows[0], eff) == pytest.approx(
        1.6 * calibration.predicted_samples_per_s(plain, eff), rel=0.02)  # fmt: skip
    op_rows = made_faster(_synthetic_rows(EFF), op_calibration.predicted_samples_per_s, EFF)
    op_eff = op_calibration.fit(op_rows, prior_weight=1e-6, loss="linear")
    assert op_eff.reference_speedup == pytest.approx(1.6, rel=0.01)
    assert max(calibration.absolute_errors(op_rows, op_eff,
                                           op_calibration.predicted_samples_per_s)) < 0.01  # fmt: skip
    # without the flag the same rows cannot be explained: the factor is what the fit needs
    blind = [dataclasses.replace(m, reference=False) for m in op_rows]
    blind_eff = op_calibration.fit(blind, prior_weight=1e-6, loss="linear")
    assert max(calibration.absolute_errors(blind, blind_eff,
                                           op_calibration.predicted_samples_per_s)) > 0.15  # fmt: skip
    # it is saved with the rest of the fit
    again = type(op_eff).from_dict(op_eff.to_dict())
    assert again.reference_speedup == op_eff.reference_speedup
