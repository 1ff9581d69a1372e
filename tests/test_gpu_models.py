"""The published measurements' models that benchmarks/plan/gpu_models.py builds (issue 40 item
2): each builds on the meta device with its published parameter count, and a step of each
counts its operations there, as benchmarks/plan/gpu_predictions.py counts them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.plan import gpu_models  # noqa: E402

#: (builder, published parameter count, where it is published)
PUBLISHED = {
    # Dai et al. 2019, Table 1: the WikiText-103 base (d_model 410, d_inner 2100, 16 layers)
    "transformer-xl-paper-base": (lambda: gpu_models.TransformerXL(gpu_models.TXL_PAPER_BASE),
                                  151_000_000),  # fmt: skip
    "resnet152": (gpu_models.resnet152, 60_192_808),  # torchvision's model table
    "resnext101-32x4d": (gpu_models.resnext101, 44_177_704),  # Cadene pretrained-models, timm
    "se-resnext101-32x4d": (lambda: gpu_models.resnext101(squeeze=True), 48_955_416),  # Cadene
    "vgg16": (lambda: gpu_models.VGG(gpu_models.VGG16_STAGES), 138_357_544),  # torchvision
    # torchvision's Inception3, 27,161,264, less its AuxLogits head (tf_cnn_benchmarks has none)
    "inception-v3": (gpu_models.inception_v3, 27_161_264 - 3_326_696),
    # torchvision's AlexNet, 61,100,840, with tf_cnn_benchmarks' 384-wide conv4: +737,408
    "alexnet": (gpu_models.alexnet, 61_100_840 + 384 * 384 * 9 - 384 * 256 * 9 + 128),
}


def parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_model_builds_on_meta_with_its_published_parameter_count(name: str) -> None:
    build, published = PUBLISHED[name]
    with torch.device("meta"):
        model = build()
    assert abs(parameters(model) / published - 1) <= 0.01


def test_dle_transformer_xl_counts_what_its_configuration_implies() -> None:
    """DLE's base (d_model 512, powers of two) has no published count: its parameters are the
    paper base's arithmetic at DLE's sizes — the tied adaptive embedding (267,735 x 512, one
    table at div_val 1), per layer Q/K/V, R, O (no biases), the 512-2048-512 feed-forward
    and two LayerNorms, the two relative biases and the softmax's biases and cluster logits."""
    cfg = gpu_models.TXL_BASE
    w, inner = cfg.width, cfg.heads * cfg.head_width
    layer = 5 * w * inner + 2 * w * cfg.inner + cfg.inner + w + 2 * 2 * w
    expected = (gpu_models.TXL_VOCAB * w + cfg.layers * layer + 2 * inner
                + gpu_models.TXL_VOCAB + 3 * w + 3)  # fmt: skip
    with torch.device("meta"):
        assert parameters(gpu_models.TransformerXL(cfg)) == expected


@pytest.mark.parametrize("name", ["transformer-xl-large", "alexnet", "resnext101-32x4d"])
def test_a_step_of_each_new_model_is_counted_on_meta(name: str) -> None:
    from benchmarks.plan import gpu_predictions

    built = gpu_models.BUILDERS[name](None)  # each at its published rows' size
    sheet = gpu_predictions.count_step_ops(built.model, built, "meta")
    assert sheet.flops(2) > 2 * sheet.flops(1, "forward") > 0  # a backward, and work per sample


def test_transformer_xl_base_forward_counts_the_work_its_configuration_implies() -> None:
    """A segment's forward FLOPs, by hand: per layer Q/K/V over memory and segment (k_len
    tokens), R over k_len positions, AC, BD and the context (3 x q x k x inner), O and the
    feed-forward over the segment; the adaptive softmax's head on every token and each tail
    cluster on its share. The counter must find the same work in what the step dispatches."""
    from benchmarks.plan import gpu_predictions

    cfg = gpu_models.TXL_BASE
    q, k, w, inner = cfg.tgt_len, cfg.tgt_len + cfg.mem_len, cfg.width, cfg.heads * cfg.head_width
    layer = k * w * 3 * inner + k * w * inner + 3 * q * k * inner + q * inner * w + 2 * q * w * cfg.inner
    shares = gpu_models.TXL_CLUSTER_SHARES
    words = [n for _, n in gpu_models._cluster_sizes()]
    softmax = q * w * (words[0] + 3) + sum(s * q * w * n for s, n in zip(shares[1:], words[1:], strict=True))
    expected = 2 * (cfg.layers * layer + softmax)
    built = gpu_models.BUILDERS["transformer-xl-base"](None)
    sheet = gpu_predictions.count_step_ops(built.model, built, "meta")
    assert sheet.flops(1, "forward") == pytest.approx(expected, rel=0.02)


def test_the_calibration_rows_say_which_were_measured_with_nvidias_reference_code(tmp_path) -> None:
    """DLE's and Lambda's rows (NVIDIA's reference implementations in NGC containers) are fitted
    with the reference speed-up, every other source as users' own code; the ablation flags take
    the speed-up and Kepler's issue fraction away."""
    import argparse
    import csv

    from benchmarks.plan import gpu_predictions

    data = gpu_predictions.DATA
    sources = set()
    for name in ("gpu_training_throughput.csv", "lambda_gpu_benchmarks.csv"):
        with (data / name).open() as handle:
            sources |= {row["source_id"] for row in csv.DictReader(handle)}
    reference = {s for s in sources if gpu_predictions.is_reference(s)}
    assert {"dle_pt_bert", "dle_tf_rn50", "lambda_v1", "lambda_v2"} <= reference
    assert not reference & {"gavel", "pollux", "tf_benchmarks_2017", "ryujaehun_a100"}
    sheets = gpu_predictions.load_sheets(gpu_predictions.SHEETS)
    rows = gpu_predictions.read_rows(data / "gpu_training_throughput.csv", sheets, {})
    k80 = next(m for m in rows if m.accelerator.name == "K80" and not m.reference)
    dle = next(m for m in rows if m.source.startswith("dle_"))
    assert dle.reference and k80.accelerator.issue_fraction is not None
    ablate = argparse.Namespace(no_reference_stack=True, no_issue_fraction=True)
    assert not gpu_predictions.ablated(dle, ablate).reference
    assert gpu_predictions.ablated(k80, ablate).accelerator.issue_fraction is None
    keep = argparse.Namespace(no_reference_stack=False, no_issue_fraction=False)
    assert gpu_predictions.ablated(dle, keep) == dle
