"""What every benchmark shares (benchmarks/lib): the envelope, the one MAPE, repeats, load."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo root: `benchmarks.`

from benchmarks.lib import envelope, errors, load, repeats  # noqa: E402


def test_the_one_mape_is_the_mean_absolute_error_relative_to_the_measured_value():
    assert errors.mape_percent([110.0, 45.0], [100.0, 50.0]) == pytest.approx(10.0)
    rows = [{"a_s": 1.2, "measured_s": 1.0}, {"a_s": 0.5, "measured_s": 1.0}]
    assert errors.rows_mape(rows, "a_s") == pytest.approx(35.0)
    with pytest.raises(ValueError):  # pairs, never a silent truncation
        errors.mape_percent([1.0, 2.0], [1.0])
    assert errors.relative_error_percent(55.0, 50.0) == pytest.approx(10.0)
    assert errors.relative_error_percent(None, 50.0) is None


def test_rounds_are_seeded_permutations_and_the_medians_skip_what_is_missing():
    first = list(repeats.shuffled_rounds("abcd", 3, seed=7))
    assert first == list(repeats.shuffled_rounds("abcd", 3, seed=7))
    assert [r for r, _ in first] == [0, 1, 2]
    assert all(sorted(order) == list("abcd") for _, order in first)
    assert repeats.shuffled(range(5), seed=1) == repeats.shuffled(range(5), seed=1)
    assert repeats.median_or_none([3.0, None, 1.0, 2.0]) == 2.0
    assert repeats.median_or_none([None]) is None
    assert repeats.steady([9.0, 9.0, 1.0, 2.0]) == [1.0, 2.0]
    assert repeats.steady([9.0]) == [9.0]  # too short a run keeps what it has


def test_the_load_is_read_one_way():
    note = load.load_note()
    assert set(note) == {"cpus", "loadavg_1m", "loadavg_5m"} and note["cpus"] >= 1


def test_every_result_starts_with_the_envelope_and_the_report_s_own_keys_win(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks/run/runtime_elastic.py"), "--quick"])
    out = envelope.write_report(tmp_path / "r.json", {"benchmark": "x", "date": "kept"})
    written = json.loads(out.read_text())
    assert list(written)[:4] == ["command", "date", "commit", "machine"]
    assert written["command"] == ".venv/bin/python benchmarks/run/runtime_elastic.py --quick"
    assert written["date"] == "kept" and written["benchmark"] == "x"
    assert {"cpu", "cores", "python"} <= set(written["machine"])
    # a main(argv) called with its own arguments names them, not the process's
    assert envelope.command(["--repeats", "2"]).endswith("runtime_elastic.py --repeats 2")
