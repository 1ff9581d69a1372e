"""tune_peers.py's bracketed packed waves (issue 41): Hyperband's brackets, each a waves run
on one study, run in the benchmark's own child process (real Optuna, MLP-3 on digits)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("variant", ["rightsize-waves-tpe-brackets",
                                     "rightsize-waves-tpe-brackets-small-first"])  # fmt: skip
def test_bracketed_waves_run_every_hyperband_bracket_on_one_study(tmp_path, variant):
    out = tmp_path / "peers.json"
    subprocess.run(
        [sys.executable, "benchmarks/tune/tune_peers.py", "--quick", "--seed", "1",
         "--variants", variant, "--retrain-seeds", "1", "--out", str(out)],
        cwd=ROOT, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    row = json.loads(out.read_text())["variants"][variant]
    assert not row["errors"]
    details = row["details"]
    # --quick: R = 9, eta = 3 -> brackets of 9 trials from 1 unit, 5 from 3, 3 at R
    first_rungs = [1, 3, 9] if variant.endswith("brackets") else [9, 3, 1]
    assert details["min_units"] == first_rungs
    assert details["configurations"] == row["trials_started"] == 17
    assert details["states"]["COMPLETE"] == row["trials_finished"] >= 3  # bracket s=0: all at R
    assert row["best"]["units"] == 9 and row["best"]["val_loss"] > 0
    # every trial-step of the five runs counted: at least each bracket's first rung
    assert details["rightsize_trial_steps"] >= (9 * 1 + 5 * 3 + 3 * 9) * 2  # 2 steps a unit
