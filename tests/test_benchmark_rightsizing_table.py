"""The right-sizing results table: rows as docs/benchmarks.md shows them, from the JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.run import rightsizing_table as rt  # noqa: E402

RUN = {
    "start": "too-small", "policy": "nearchus+", "jct_s": 84.73, "jct_over_oracle": 2.549,
    "time_to_95pct_oracle_s": None, "final_over_oracle": 0.321,
    "samples_per_cpu_s_over_oracle": 1.306, "restarts": 0,
    "plans": {"rebalance": {"applied": 1, "rejected": 0}, "add_worker": {"applied": 1, "rejected": 2},
              "scale_up": {"applied": 0, "rejected": 1}},
    "sim": {"jct_s": 73.6, "jct_error_percent": -13.1},
}  # fmt: skip


def test_a_run_row_names_applied_plans_and_the_simulated_error():
    assert rt.run_row("wide-deep", RUN) == (
        "| wide-deep | too-small | nearchus+ | 84.7 (2.55) | never | 0.32 | 1.31 "
        "| rebalance 1, add_worker 1 | 0 | 73.6 (-13%) |"
    )
    reached = {**RUN, "time_to_95pct_oracle_s": 39.2, "plans": {}, "sim": None}
    assert "| 39 |" in rt.run_row("w", reached) and rt.run_row("w", reached).endswith(
        "| none | 0 | — |"
    )


def test_the_table_reads_a_result_file_and_refuses_a_missing_one(tmp_path, capsys):
    oracle = {"shape": "1x0.7ps+3x0.433wk", "jct_s": 33.2, "samples_per_s": 70432.0}
    result = {"workloads": [{"workload": "wide-deep", "oracle": oracle, "runs": [RUN],
                             "sim_jct_mape_percent": 10.74, "goals": {}}]}  # fmt: skip
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    assert rt.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "| wide-deep | oracle 1x0.7ps+3x0.433wk | static | 33.2 (1.00) |" in out
    assert "Oracle 70,432 samples/s; simulator's mean absolute JCT error 10.7%" in out
    assert rt.main([str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
