"""The CM-DARE check's inputs (benchmarks/ps/ps_cmdare.py): its models and the curves it reads."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.plan import gpu_models  # noqa: E402
from benchmarks.ps import ps_cmdare  # noqa: E402


def test_the_cifar_resnets_have_he_et_al_s_sizes_and_train_on_cifar_images():
    counts = {}
    for name in ps_cmdare.MODELS:
        built = gpu_models.BUILDERS[name](None)
        counts[name] = sum(p.numel() for p in built.model.parameters())
        loss = built.loss(built.model, built.example_batch(4))
        loss.backward()
        assert loss.ndim == 0 and loss.item() > 0
    # ResNet-32 on CIFAR is the 0.46M-parameter network of He et al. (Table 6)
    assert 0.46e6 < counts["resnet32-cifar"] < 0.47e6
    assert counts["resnet15-cifar"] < counts["resnet32-cifar"] / 2


def test_only_the_authors_one_ps_sweeps_are_read():
    curves = ps_cmdare.curves()
    assert set(curves) == {(m, g) for m in ps_cmdare.MODELS for g in ("K80", "P100")}
    assert all(sorted(c) == list(range(1, 9)) for c in curves.values())
    assert curves["resnet32-cifar", "P100"][5] == 44.63  # the authors' summary value


def test_tensorflow_holds_each_parameter_and_batch_norm_statistic_as_a_variable():
    # ResNet-32: 33 convolutions (two of them 1x1 projections), 33 batch norms (gamma and beta
    # trained, moving mean and variance assigned) and a dense layer (kernel, bias)
    assert ps_cmdare.variables("resnet32-cifar") == (33 + 2 * 33 + 2, 2 * 33)
    assert ps_cmdare.variables("resnet15-cifar")[1] == 30


def test_the_shape_error_ignores_how_fast_one_worker_is():
    measured = {1: 10.0, 2: 20.0, 4: 30.0}
    assert ps_cmdare.shape_error({n: 3 * v for n, v in measured.items()}, measured) == 0
    # 2 workers right, 4 workers at 4x instead of 3x: a third off there, a sixth on average
    assert ps_cmdare.shape_error({1: 1.0, 2: 2.0, 4: 4.0}, measured) == pytest.approx(1 / 6)


def test_the_tensorflow_bounds_span_its_published_figures():
    slow, fast = ps_cmdare.TF1_BOUNDS["slow"], ps_cmdare.TF1_BOUNDS["fast"]
    central = ps_cmdare.TENSORFLOW1_GRPC
    assert slow.transfer_bytes_per_s < central.transfer_bytes_per_s < fast.transfer_bytes_per_s
    assert slow.cpu_s_per_tensor > central.cpu_s_per_tensor == fast.cpu_s_per_tensor


def test_a_predicted_curve_reports_the_ps_capacity_its_busiest_station_allows():
    worker = ps_cmdare.WorkerSpec(128, 0.03, 2e9)
    tf1 = ps_cmdare.TENSORFLOW1_GRPC
    run = ps_cmdare.predicted_curve(worker, tf1, 8e-4, 269, 1_867_624, ps_cmdare.PSModel.QUEUEING,
                                    list(range(1, 9)))  # fmt: skip
    # 3.7 MB a step through 500 MB/s is the busiest: 134 steps/s
    assert run["capacity"] == pytest.approx(tf1.transfer_bytes_per_s / (2 * 1_867_624))
    assert all(run["curve"][n] < run["curve"][n + 1] <= run["capacity"] for n in range(1, 8))
