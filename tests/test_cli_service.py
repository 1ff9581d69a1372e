"""The service's commands: tokens, the client's errors in one line, and ``rightsize run``
writing its run into the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from rightsize.cli.main import main
from rightsize.service.store import Store


def call(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_client_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("RIGHTSIZE_TOKEN", raising=False)
    monkeypatch.delenv("RIGHTSIZE_SERVER", raising=False)


def test_token_create_prints_a_token_the_store_knows(tmp_path, capsys):
    database = tmp_path / "s.db"
    code, out, err = call(capsys, "serve", "token", "create", "alice", "--database", database)
    assert code == 0 and out.startswith("rs_") and "only its hash" in err
    store = Store(str(database))
    assert store.owner(out.strip()) is not None
    store.close()
    code, _, err = call(capsys, "serve", "token", "create", "alice", "--database", database)
    assert code == 2 and err.count("\n") == 1 and "already has a token" in err


def test_client_errors_are_one_line(tmp_path, capsys, no_client_config):
    code, _, err = call(capsys, "jobs")
    assert code == 2 and "no token given" in err and err.count("\n") == 1
    code, _, err = call(capsys, "jobs", "--server", "http://127.0.0.1:9", "--token", "rs_x")
    assert code == 2 and "cannot reach http://127.0.0.1:9" in err and err.count("\n") == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkload: mlp3\nbatch_size: 0\nbudget: {cpu: 1, memory: 1Gi}\n")
    code, _, err = call(capsys, "submit", bad, "--server", "http://127.0.0.1:9", "--token", "x")
    assert code == 2 and "batch_size" in err and "cannot reach" not in err  # checked first


def test_the_config_file_names_server_and_token(tmp_path, capsys, no_client_config):
    config = tmp_path / "config" / "rightsize" / "client.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("server: http://127.0.0.1:9\ntoken: rs_from_file\n")
    code, _, err = call(capsys, "cancel", "x")
    assert code == 2 and "cannot reach http://127.0.0.1:9" in err


def test_serve_refuses_a_bad_database_in_one_line(capsys):
    code, _, err = call(capsys, "serve", "--database", "nosuch://x/y")
    assert code == 2 and err.startswith("error: --database") and err.count("\n") == 1


@pytest.mark.integration
def test_run_writes_its_run_into_the_store(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: stored
workload: mlp3
options: {{hidden: 64}}
dataset: digits
batch_size: 64
steps: 60
strategy: ps
budget: {{cpu: 1, memory: 4Gi}}
initial_shape:
  ps: {{count: 1, cpu: 0.5, memory: 1Gi}}
  workers: {{count: 1, cpu: 0.5, memory: 1Gi}}
checkpoint: {{dir: {tmp_path / "ckpt"}, interval: 5s}}
runtime: {{metric_interval: 1s}}
""")
    database = tmp_path / "runs.db"
    code, out, err = call(capsys, "run", job, "--quiet", "--database", database)
    assert code == 0, err
    store = Store(str(database))
    (run,) = store.jobs()
    assert (run.name, run.source, run.phase) == ("stored", "run", "finished")
    assert run.accounting["exactly_once"] is True and run.measured_time_s > 0
    assert store.shapes(run.id)[0].action == "launch"
    assert store.samples(run.id) and store.report(run.id)["steps"] == 60
    store.close()
    # a second run of the same file (--fresh) is a run of its own
    assert call(capsys, "run", job, "--quiet", "--fresh", "--database", database)[0] == 0
    store = Store(str(database))
    assert [j.name for j in store.jobs()] == ["stored", "stored-2"]
    store.close()


def test_run_refuses_a_bad_database_before_training(tmp_path, capsys):
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: x\nworkload: mlp3\ndataset: digits\nbatch_size: 8\nsteps: 5\n"
        f"budget: {{cpu: 1, memory: 1Gi}}\ncheckpoint: {{dir: {tmp_path}/c}}\n"
    )
    code, _, err = call(capsys, "run", job, "--database", "nosuch://x")
    assert code == 2 and err.startswith("error: --database")
    assert not Path(tmp_path / "c").exists()  # nothing was trained or written


def test_jobs_prints_the_budget_in_units_a_person_reads():
    from rightsize.cli.jobs_cmd import _budget

    assert _budget({"cpu": 2.0, "memory": 6 * 2**30}) == "2 cpu, 6Gi"  # not 6442450944
    assert _budget({"cpu": 1.5, "memory": 512 * 2**20}) == "1.5 cpu, 512Mi"


def test_serve_on_a_port_in_use_is_one_line_before_anything_starts(tmp_path, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        database = tmp_path / "s.db"
        code, _, err = call(capsys, "serve", "--port", port, "--database", database, "--background")
    assert code == 2 and err.startswith(f"error: --port {port}") and err.count("\n") == 1
    assert not database.exists()  # refused before the store was opened


def test_the_services_cpu_books_are_the_machines_unless_overcommitted(capsys):
    from rightsize.cli.serve_cmd import capacity
    from rightsize.runtime.backends.local import machine_resources

    machine = machine_resources()
    assert capacity(None, None) == machine
    assert capacity(str(machine.cpu_cores * 5), None).cpu_cores == machine.cpu_cores  # capped
    doubled = capacity(None, "1Gi", cpu_overcommit=2)
    assert doubled.cpu_cores == 2 * machine.cpu_cores and doubled.memory_bytes == 2**30
    assert capacity(str(machine.cpu_cores * 5), None, 2).cpu_cores == 2 * machine.cpu_cores
    assert capacity(None, "1000Gi", 2).memory_bytes == machine.memory_bytes  # never memory
    code, _, err = call(capsys, "serve", "--cpu-overcommit", "0.5")
    assert code == 2 and err.count("\n") == 1 and "from 1 to 8" in err
