"""docs/planning.md's commands for precision and for the SkyPilot launcher, run as printed.

The commands are read from the sections "The precision a plan assumes" and "Giving
SkyPilot the time" and run in a scratch directory holding a stand-in for the profile
they name (a hand-made profile: no workload is profiled here); ``python launch.py`` runs
against a stand-in ``sky`` package that records what it would launch.
"""

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from profile_factory import linear_profile
from rightsize.cli.main import main

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[1] / "docs" / "planning.md"

# a stand-in `sky`: resources priced per node-hour as srift-2020's on-demand rows; launch
# writes what it was given to launched.json
FAKE_SKY = textwrap.dedent("""\
    import json
    PRICES = {"g4dn.8xlarge": 2.176, "g3.8xlarge": 2.28, "p3.2xlarge": 3.06}

    class Resources:
        def __init__(self, infra=None, instance_type=None, use_spot=False, accelerators=None):
            self.infra, self.instance_type, self.use_spot = infra, instance_type, use_spot
            self.accelerators = accelerators

        def get_cost(self, seconds):
            return PRICES[self.instance_type] * seconds / 3600

    class Task:
        @classmethod
        def from_yaml(cls, path):
            import yaml
            task = cls()
            task.num_nodes = yaml.safe_load(open(path))["num_nodes"]
            return task

        def set_resources(self, resources):
            self.resources = set(resources) if isinstance(resources, set) else {resources}

        def set_time_estimator(self, func):
            self.estimator = func

    def launch(task, cluster_name=None):
        (resources,) = task.resources
        json.dump({"cluster": cluster_name, "instance_type": resources.instance_type,
                   "num_nodes": task.num_nodes}, open("launched.json", "w"))

    def stream_and_get(request):
        return request
""")


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"### {title}")
    end = text.find("\n#", start + 1)
    return text[start:end]


def blocks(text: str, lang: str) -> list[str]:
    """The fenced blocks of ``text`` opened with ```` ```lang ```` (``""``: no language)."""
    found, fence, lines = [], None, []
    for line in text.splitlines():
        if not line.startswith("```"):
            lines.append(line)
        elif fence is None:
            fence, lines = line[3:].strip(), []
        else:
            if fence == lang:
                found.append("\n".join(lines) + "\n")
            fence = None
    return found


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, trailing comments dropped."""
    joined = block.replace("\\\n", " ")
    return [shlex.join(shlex.split(line, comments=True)) for line in joined.splitlines()
            if line.strip()]  # fmt: skip


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    (tmp_path / "profiles").mkdir()
    linear_profile().save(tmp_path / "profiles" / "resnet50.json")
    (tmp_path / "sky.py").write_text(FAKE_SKY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def rightsize(capsys, command: str) -> tuple[str, str]:
    argv = shlex.split(command)
    assert argv[0] == "rightsize"
    code = main(argv[1:])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def test_the_precision_example_prints_what_the_doc_says(scratch, capsys):
    text = section("The precision a plan assumes")
    ((block,),) = [blocks(text, "sh")]
    (command,) = commands(block)
    out, _ = rightsize(capsys, command)
    printed = [b for b in blocks(text, "") if b.startswith("precision ")]
    assert printed and printed[0].strip() in out.splitlines()


def test_the_launcher_example_runs_as_printed(scratch, capsys):
    (block,) = blocks(section("Giving SkyPilot the time"), "sh")
    plan, dry_run, launch = commands(block)
    rightsize(capsys, plan)
    assert (scratch / "task.yaml").is_file() and (scratch / "launch.py").is_file()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scratch), *sys.path])}
    for command in (dry_run, launch):
        argv = shlex.split(command)
        assert argv[0] == "python"
        done = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        if command == dry_run:
            assert "chosen: " in done.stdout and not (scratch / "launched.json").exists()
    launched = json.loads((scratch / "launched.json").read_text())
    assert launched["cluster"] == "rs"
    assert done.stdout.strip().endswith(f"chosen: 1 x {launched['instance_type']}")
