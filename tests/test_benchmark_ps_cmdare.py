"""The CM-DARE check's inputs (benchmarks/ps/ps_cmdare.py): its models and the curves it reads."""

from __future__ import annotations

import sys
from pathlib import Path

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
