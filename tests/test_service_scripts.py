"""A user's own training script through the service (issue 37): `rightsize submit` uploads the
job file's script, the service runs it on ranks in cgroups, stores the run, and a second
submission starts from the shape the first one measured fastest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rightsize.service.store import Store
from service_helpers import free_port, serve

pytestmark = pytest.mark.integration
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rightsize", *args], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip


def wait_for(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s}s"
        time.sleep(1.0)


def finished(name: str, env: dict) -> dict:
    def done() -> bool:
        shown = json.loads(cli("job", name, "--json", env=env).stdout)
        return shown["job"]["phase"] in ("finished", "failed", "cancelled")

    wait_for(done, 300)
    return json.loads(cli("job", name, "--json", env=env).stdout)


def test_a_script_is_uploaded_run_stored_and_its_fastest_shape_starts_the_next(tmp_path):
    database, port, log = tmp_path / "store.db", free_port(), tmp_path / "serve.log"
    store = Store(str(database))
    env = {**os.environ, "RIGHTSIZE_SERVER": f"http://127.0.0.1:{port}",
           "RIGHTSIZE_TOKEN": store.create_token("tester")}  # fmt: skip
    script = tmp_path / "slow_data.py"
    script.write_text((SCRIPTS / "slow_data.py").read_text())  # a user's file, beside its job
    job = {"name": "slow", "script": "slow_data.py", "args": ["--epochs", "14", "--snapshot",
           str(tmp_path / "slow.pt")], "budget": {"cpu": 2, "memory": "4Gi"},
           "policy": {"name": "goodput", "max_workers": 2},
           "initial_shape": {"workers": {"count": 1, "cpu": 1, "memory": "1Gi"}}}  # fmt: skip
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    again = {**job, "name": "slow-again", "initial_shape": "auto"}  # the same script and args
    (tmp_path / "again.yaml").write_text(yaml.safe_dump(again))
    service = serve(database, port, log, cpu=2)
    try:
        wait_for(lambda: cli("jobs", env=env).returncode == 0, 60)
        # a script that does not parse is refused before anything is uploaded or queued
        bad = tmp_path / "bad.yaml"
        bad.write_text(yaml.safe_dump({**job, "script": "broken.py"}))
        (tmp_path / "broken.py").write_text("def broken(:\n")
        said = cli("submit", str(bad), env=env)
        assert said.returncode == 2 and "broken.py line 1: invalid syntax" in said.stderr
        first = cli("submit", str(tmp_path / "job.yaml"), "--json", env=env)
        assert first.returncode == 0, first.stderr
        shown = finished(json.loads(first.stdout)["name"], env)
        os.remove(tmp_path / "slow.pt")  # the second run trains from the start
        second = cli("submit", str(tmp_path / "again.yaml"), "--json", env=env)
        assert second.returncode == 0, second.stderr
        shown_again = finished(json.loads(second.stdout)["name"], env)
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(90)
    view = shown["job"]
    assert view["phase"] == "finished", (view["error"], log.read_text()[-3000:])
    assert view["workload"].startswith("script:slow_data.py@")
    report = store.report(view["id"])
    assert report["script"]["args"][:2] == ["--epochs", "14"] and report["steps"] > 0
    moved = [m for m in report["moves"] if m["taken"] and m["action"] == "add_worker"]
    assert moved, report["moves"]  # goodput grew the waiting rank into two
    then = shown_again["job"]
    assert then["phase"] == "finished", then["error"]
    assert then["launch_source"] == "history", then
    assert then["launch_note"].startswith(f"{view['name']} ran "), then  # not "history: history:"
    first_shape = store.shapes(shown_again["job"]["id"])[0]
    assert len(first_shape.shape["nodes"]) == 2  # started from the first run's fastest shape
    store.close()
