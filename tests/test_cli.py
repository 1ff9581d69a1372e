import json
import subprocess
import sys
import textwrap

import pytest

from rightsize.cli.main import COMMANDS, main
from rightsize.core.catalog import INSTANCE_COLUMNS


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, fragment):
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err
    assert "Traceback" not in err


def test_help_lists_each_capability(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("workloads", "catalog", "profile", "predict"):
        assert command in out


def test_workloads_json(capsys):
    code, out, _ = run(capsys, "workloads", "--json")
    data = json.loads(out)
    assert code == 0 and {m["name"] for m in data["models"]} >= {
        "resnet50",
        "wide-deep",
        "gpt-small",
    }
    assert "digits" in {d["name"] for d in data["datasets"]}


def test_catalog_table_and_json(capsys):
    code, out, _ = run(capsys, "catalog", "--cloud", "aws", "--gpu", "V100")
    assert code == 0 and "p3.8xlarge" in out and "4xV100" in out
    code, out, _ = run(capsys, "catalog", "--cloud", "srift-2020", "--json")
    rows = json.loads(out)
    assert {r["instance_type"] for r in rows} >= {"p3.8xlarge", "g3.8xlarge", "g4dn.8xlarge"}
    code, out, _ = run(capsys, "catalog", "--accelerators", "--json")
    assert any(a["name"] == "T4" and a["memory_gib"] == 16 for a in json.loads(out))


def test_profile_and_predict_end_to_end(capsys, tmp_path):
    out_file = tmp_path / "mlp3.json"
    code, out, err = run(capsys, "profile", "mlp3", "--max-batch", "64", "--repeats", "2", "--warmup", "1",
                         "--memory-limit", "2Gi", "--sampling", "dense", "--out", str(out_file),
                         "--json")  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert data["profile"]["bmax"] == 64 and out_file.exists()
    assert data["profile"]["memory"]["process_limit_bytes"] == 2 * 2**30  # the process's bound
    assert [p["batch"] for p in data["predictions"]] == [1, 2, 4, 8, 16, 32, 64]
    assert "B_max search" not in err  # no progress under --json
    code, out, _ = run(capsys, "predict", str(out_file), "--batches", "10,20", "--json")
    assert code == 0 and [p["batch"] for p in json.loads(out)["predictions"]] == [10, 20]
    code, out, _ = run(capsys, "predict", str(out_file), "--batches", "32,100", "--json")
    report = json.loads(out)  # 100 is past B_max = 64: flagged, and said in a warning
    assert [p["extrapolated"] for p in report["predictions"]] == [False, True]
    assert any("batch 100 is above the profile's B_max 64" in w for w in report["warnings"])
    code, out, _ = run(capsys, "predict", str(out_file), "--batches", "100")
    assert "100*" in out and "warning: batch 100 is above" in out
    code, out, _ = run(capsys, "predict", str(out_file))
    assert code == 0 and "compute model (dense)" in out and "samples/s" in out
    code, out, _ = run(capsys, "predict", str(out_file), "--method", "srift", "--json")
    assert json.loads(out)["compute_model"]["method"] == "srift"
    # on a GPU, at any batch (not only powers of two), with its precision
    code, out, _ = run(capsys, "predict", str(out_file), "--device", "A100-80GB", "--batch", "360",
                       "--precision", "tf32", "--json")  # fmt: skip
    gpu = json.loads(out)
    assert code == 0 and gpu["device"] == "A100-80GB" and gpu["precision"] == "tf32"
    (row,) = gpu["predictions"]
    assert row["batch"] == 360 and row["fits_memory"] is True
    low, high = row["samples_per_s_interval"]
    assert low <= row["samples_per_s"] <= high and row["step_s"] > 0
    # the default device model times the operations the profile recorded
    assert gpu["model"]["method"] == "per-op"
    code, out, _ = run(capsys, "predict", str(out_file), "--device", "A100-80GB", "--batch", "360",
                       "--precision", "tf32", "--device-model", "per-class", "--json")  # fmt: skip
    per_class = json.loads(out)
    assert code == 0 and per_class["model"]["method"] == "per-class"
    assert per_class["predictions"][0]["step_s"] != row["step_s"]
    code, out, _ = run(capsys, "predict", str(out_file), "--instance", "gcp:a2-ultragpu-1g",
                       "--batch", "640")  # fmt: skip
    assert code == 0 and "A100" in out and "pytorch default" in out and "samples/s" in out


def test_profile_says_its_bounds_and_progress_on_stderr(capsys, tmp_path):
    code, _, err = run(capsys, "profile", "mlp3", "--max-batch", "16", "--repeats", "1",
                       "--warmup", "0", "--max-step-time", "30s", "--budget-s", "none",
                       "--out", str(tmp_path / "p.json"))  # fmt: skip
    assert code == 0, err
    assert "profiling mlp3 on digits on cpu: no time limit — 4 batches (1, B_max/3" in err
    # the default memory bound and the time bound are said before the search
    assert "B_max search up to batch 16 or a 30s step, memory bound" in err
    assert "50% of the" in err and "--memory-limit, --max-batch and --max-step-time" in err
    assert "elapsed, about" in err and "timing: round 1 of 1" in err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["profile", "resnet05"], "unknown workload 'resnet05'; did you mean 'resnet50'?"),
        (["profile", "mlp3", "--memory-limit", "4XB"], "--memory-limit '4XB': expected a size"),
        (
            ["profile", "mlp3", "--memory-limit", "1Ki", "--quiet"],
            "is below a training step at batch 1",
        ),
        (["profile", "mlp3", "--device", "cuda"], "no CUDA GPU is available"),
        (["profile", "mlp3", "--option", "activation"], "must look like KEY=VALUE"),
        (["catalog", "--cloud", "ibm"], "unknown cloud catalog"),
        (["catalog", "--gpu", "T5"], "unknown accelerator 'T5'"),
        (["predict", "/nonexistent.json"], "cannot read profile"),
        (["predict", "x.json", "--batches", "a,b"], "--batches 'a,b' must be comma-separated"),
        (["predict", "x.json", "--precision", "amp"], "--precision applies to a GPU"),
        (["predict", "x.json", "--device", "A1000"], "unknown accelerator 'A1000'"),
        (["predict", "x.json", "--instance", "gcp"], "write CLOUD:TYPE"),
        (["predict", "x.json", "--instance", "aws:m5.large"], "m5.large has no GPU"),
        (["predict", "x.json", "--device", "T4", "--batch", "0"], "--batch must be a positive"),
        (["predict", "x.json", "--device-model", "per-class"], "--device-model applies to a GPU"),
        (["predict", "x.json", "--device", "T4", "--precision", "fp8"], "invalid choice: 'fp8'"),
        (["profile"], "the following arguments are required: workload"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_inputs_give_one_line_and_exit_2(capsys, argv, fragment):
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, fragment)


def test_catalog_csv_with_a_missing_column(capsys, tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(",".join(c for c in INSTANCE_COLUMNS if c != "Price") + "\nx,,0,4,16,10,,r\n")
    code, _, err = run(capsys, "catalog", "--file", str(path))
    assert_one_line_error(code, err, "missing column(s) Price")


def test_console_script_exit_code_and_no_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "rightsize", "profile", "nosuchmodel"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown workload") and "Traceback" not in result.stderr


#: Libraries that take seconds to import: a command's --help, and ``rightsize --help``, must
#: not wait for them. ``profile --help`` still does: its defaults are ProfilerSettings', which
#: lives beside the profiler (torch).
SLOW_IMPORTS = ("torch", "lightgbm", "sklearn", "scipy", "matplotlib")
LIGHT_COMMANDS = ("workloads", "catalog", "predict", "plan", "replan", "probe", "run", "tune",
                  "simulate")  # fmt: skip


@pytest.mark.parametrize("command", [name for name, _, _ in COMMANDS])
def test_every_command_has_help(capsys, command):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0 and f"usage: rightsize {command}" in capsys.readouterr().out


def test_help_imports_no_slow_library():
    # one process, each command's --help in turn, then the whole command line is imported
    code = textwrap.dedent(f"""\
        import contextlib, io, sys
        from rightsize.cli.main import main
        for argv in [[]] + [[c] for c in {LIGHT_COMMANDS!r}]:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
                main(argv + ["--help"])
            slow = [name for name in {SLOW_IMPORTS!r} if name in sys.modules]
            assert not slow, f"rightsize {{' '.join(argv)}} --help imported {{slow}}"
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_core_never_imports_torch():
    code = (
        "import sys, rightsize.core.catalog, rightsize.core.spec, rightsize.core.shape, "
        "rightsize.core.units, rightsize.profiling.profile, rightsize.perf.compute; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
