"""``rightsize simulate`` end to end: tables, JSON, plots, and one-line errors with exit 2."""

import json
from pathlib import Path

import pytest

from rightsize.cli.main import main

DATA = Path(__file__).parent / "data"


def run(capsys, *argv):
    code = main(["simulate", "--quiet", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_single_job_experiment_table(capsys):
    code, out, _ = run(capsys, "--job", "mobilenet", "--budget", "30", "--epochs", "20",
                       "--cluster", "B", "--policies", "nearchus+,fa-bf")  # fmt: skip
    assert code == 0
    assert "best steps/s" in out and "to 95% of best" in out
    assert "nearchus+" in out and "fa-bf" in out and "simulated" in out


def test_trace_experiment_json_says_it_is_simulated(capsys):
    code, out, _ = run(capsys, "--trace", str(DATA / "schedule_tiny.csv"), "--cluster", "B",
                       "--policies", "nearchus,optimus", "--json", "--per-job")  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["simulated"] is True and data["experiment"] == "multi-job"
    assert [r["policy"] for r in data["results"]] == ["nearchus", "optimus"]
    assert {"avg_jct_s", "avg_queue_s", "avg_run_s", "makespan_s", "cpu_used_pct",
            "restarts"} <= set(data["results"][0])  # fmt: skip
    assert len(data["jobs"]["optimus"]) == 3


def test_link_sharing_across_jobs_is_selectable(capsys):
    # Optimus's jobs on cluster A run on many 5-vCPU nodes; when several run at once they
    # outnumber the 9 servers, so sharing the links across jobs makes them run longer
    base = ["--trace", "nearchus-40", "--cluster", "A", "--policies", "optimus", "--json"]
    code, job_mode, _ = run(capsys, *base)
    code_shared, shared, _ = run(capsys, *base, "--link-sharing", "cluster")
    assert code == 0 == code_shared
    alone, together = (json.loads(o)["results"][0]["avg_run_s"] for o in (job_mode, shared))
    assert together > alone


def test_the_observed_link_is_selectable(capsys):
    # with every job's nodes sharing A's links, a PS at its share reads far below the
    # server's link; against its share NEARCHUS's PSN check sees it and adds PS more often
    base = ["--trace", "nearchus-40", "--cluster", "A", "--policies", "nearchus",
            "--link-sharing", "cluster", "--json", "--per-job"]  # fmt: skip
    add_ps = []
    for observed in ("server", "share"):
        code, out, _ = run(capsys, *base, "--observed-link", observed)
        assert code == 0
        jobs = json.loads(out)["jobs"]["nearchus"]
        add_ps.append(sum("add a PS" in d for job in jobs for d in job["decisions"]))
    assert add_ps[1] > add_ps[0]


def test_plots_are_written(capsys, tmp_path):
    code, out, _ = run(capsys, "--trace", str(DATA / "pollux_tiny.csv"), "--work-scale", "0.01",
                       "--cluster", "B", "--policies", "fa-bf,nearchus+", "--plots",
                       str(tmp_path / "plots"), "--plot-job", "ncf-1")  # fmt: skip
    assert code == 0
    for name in ("jct_breakdown.png", "utilization.png", "throughput.png"):
        png = tmp_path / "plots" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((tmp_path / "plots").glob("*.tmp"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "nearchus-40", "--policies", "nearchus,optimuss"], "did you mean 'optimus'"),
        (["--trace", "nearchus-4O"], "unknown trace"),
        (["--trace", str(DATA / "schedule_missing_column.csv")], "missing column(s) duration"),
        (["--trace", str(DATA / "schedule_negative_time.csv")], "must not be negative"),
        (
            ["--job", "resnet50", "--budget", "1", "--policies", "nearchus"],
            "below nearchus's minimal shape",
        ),
        (
            ["--job", "resnet50", "--budget", "12", "--policies", "optimus"],
            "below optimus's minimal shape",
        ),
        (["--job", "resnet50"], "--job needs --budget"),
        (["--job", "resnet5", "--budget", "10"], "did you mean 'resnet50'"),
        (["--job", "resnet50", "--budget", "30", "--cluster", "Z"], "unknown cluster"),
        (["--trace", "nearchus-40", "--param", "nearchus:r_upp=1"], "unexpected parameter"),
        (["--trace", "nearchus-40", "--link-sharing", "pod"], "invalid choice: 'pod'"),
        (["--trace", "nearchus-40", "--observed-link", "pod"], "invalid choice: 'pod'"),
        (["--trace", "nearchus-40", "--param", "dlrover:r_up=1"], "dlrover: unexpected parameter"),
        (
            ["--trace", "nearchus-40", "--policies", "fa-bf", "--param", "dlrover:r_up=1"],
            "--param 'dlrover:r_up=1' must look like POLICY:KEY=VALUE",
        ),
    ],
)
def test_user_errors_are_one_line_and_exit_2(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message in err


def test_plot_job_must_exist(capsys, tmp_path):
    code, _, err = run(capsys, "--job", "mobilenet", "--budget", "20", "--epochs", "5",
                       "--policies", "fa-bf", "--plots", str(tmp_path), "--plot-job", "nope")  # fmt: skip
    assert code == 2 and "--plot-job 'nope'" in err
