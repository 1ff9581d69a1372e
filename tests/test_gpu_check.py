"""benchmarks/gpu_check.py (issue 40 item 7): the GPU check runs its whole code path on a CPU
with --quick, names the GPU it predicts from the device's name, and refuses what it cannot do."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks import gpu_check  # noqa: E402

from rightsize.core.errors import UnknownNameError  # noqa: E402


@pytest.mark.parametrize(("device_name", "catalog"), [
    ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"),
    ("Tesla V100-SXM2-16GB", "V100"),
    ("Tesla V100-SXM2-32GB", "V100-32GB"),
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100-PCIe"),
    ("Tesla T4", "T4"),
    ("Tesla K80", "K80"),
    ("NVIDIA A10G", "A10G"),
])  # fmt: skip
def test_the_device_name_names_its_catalog_gpu(device_name: str, catalog: str) -> None:
    assert gpu_check.catalog_gpu(device_name).name == catalog


def test_an_unknown_device_asks_for_its_catalog_name() -> None:
    with pytest.raises(UnknownNameError, match="--catalog-gpu"):
        gpu_check.catalog_gpu("Radeon Instinct MI300X")


def test_it_refuses_what_it_cannot_measure(capsys) -> None:
    if not gpu_check.torch.cuda.is_available():
        assert gpu_check.main(["--device", "cuda"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
    assert gpu_check.main(["--device", "cpu"]) == 2
    assert "add --quick" in capsys.readouterr().err
    assert gpu_check.main(["--device", "cpu", "--quick", "--catalog-gpu", "Z9"]) == 2
    assert "Z9" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # before any work, one line from argparse
        gpu_check.main(["--device", "cpu", "--quick", "--trials", "0"])
    assert refused.value.code == 2 and "--trials: '0' is not" in capsys.readouterr().err


def test_the_quick_check_runs_every_part_on_a_cpu(tmp_path, capsys) -> None:
    out = tmp_path / "gpu_check.json"
    assert gpu_check.main(["--device", "cpu", "--quick", "--catalog-gpu", "T4",
                           "--out", str(out)]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    assert report["catalog_gpu"] == "T4" and [m["model"] for m in report["models"]] == [
        case.model for case in gpu_check.QUICK_CASES]  # fmt: skip
    # every model at three batches and three precisions, timed for real and predicted
    assert len(report["rows"]) == 2 * 3 * 3
    for row in report["rows"]:
        assert row["measured_samples_per_s"] > 0 and row["predicted_samples_per_s"] > 0
        assert row["device_model"] == "per-op"  # the profiles recorded their operations
    rung = report["packed_rung"]
    assert rung["alone_s"] > 0 and rung["packed_s"] > 0
    assert rung["bit_identical"]  # packing changes no trial's losses (on a CPU, to the bit)
    printed = capsys.readouterr().out
    assert "pred/meas" in printed and "packed rung: 4 trials" in printed
