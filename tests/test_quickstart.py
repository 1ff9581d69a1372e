"""The README's service quick-start, run word for word as a new user would type it.

The commands are read from README.md (the block after **`rightsize serve`**) and run by
bash in the repository, with a fresh home: its own default store, no token, no config.
docs/service.md prints the same block (checked here too), so one run checks both.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PORT = 8765  # the README's (the default)


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    after = text[text.index("**`rightsize serve`**"):]
    return re.search(r"```sh\n(.*?)```", after, re.S).group(1)


def test_the_docs_print_the_readmes_quickstart():
    assert readme_block() in (ROOT / "docs" / "service.md").read_text()


@pytest.mark.integration
def test_the_readmes_service_commands_work_as_printed(tmp_path):
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", PORT)) == 0:
            pytest.skip(f"something already listens on port {PORT}")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIGHTSIZE_")}
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),  # fmt: skip
            # what `source .venv/bin/activate` (the README's tour) puts first on PATH
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["bash", "-e", "-c", readme_block()], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    started = re.search(r"process (\d+)", ran.stdout)
    if started:  # the background service outlives the block: stopped as its line says
        os.kill(int(started.group(1)), signal.SIGTERM)
    assert ran.returncode == 0, (ran.stdout[-3000:], ran.stderr[-3000:])
    assert started, ran.stdout
    out = ran.stdout
    assert "wide-deep-ps: waiting (rightsize job wide-deep-ps --follow to follow it)" in out
    assert "wide-deep-ps: running" in out and "wide-deep-ps: finished" in out  # followed
    assert "every sample trained exactly once per epoch: yes" in out
    assert re.search(r"wide-deep-ps\s+finished\s+wide-deep", out), out[-2000:]  # `jobs`
    assert "6Gi" in out  # the budget's memory in units, not 6442450944
    # one time, the launch shown within it
    assert re.search(r"measured: \S+, \S+ CPU core-hours \(launch \S+ of it\)", out), out[-2000:]
