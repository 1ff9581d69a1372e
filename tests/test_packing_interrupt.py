"""Interrupting ``rightsize tune --workers 2``: one line from the parent, no traceback, no orphan.

Each test starts the real CLI in its own session (its own process group, as a
shell job is), waits until a pool worker exists, signals, and then looks at what
is left: the exit status, stderr, and every process of that group. A terminal's
Ctrl-C sends SIGINT to the whole foreground group, so the workers get it too;
``kill PID`` sends SIGTERM to the parent alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads processes from Linux's /proc"
)

SPACE = Path(__file__).resolve().parents[1] / "examples" / "spaces" / "small.yaml"
#: 24 configurations, R = 81: ~9 s of training on 2 cores, far longer than the wait below
TUNE = [
    "-m", "rightsize", "tune", "--workload", "mlp3", "--dataset", "digits",
    "--space", str(SPACE), "--max-resource", "81", "--eta", "3", "--workers", "2", "--quiet",
]  # fmt: skip
#: CPU a worker must have used before the signal: a forked worker is training by then,
#: a spawned one is still importing torch (its start-up is interrupted instead)
WORKER_CPU_S = 0.3
START_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0


def _stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` after the command name (state first), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _processes() -> dict[int, list[str]]:
    stats = {int(d): _stat(int(d)) for d in os.listdir("/proc") if d.isdigit()}
    return {pid: fields for pid, fields in stats.items() if fields is not None}


def _worker_cpu_s(parent: int) -> float:
    """The most CPU time any child of ``parent`` has used (0 if it has none)."""
    ticks = os.sysconf("SC_CLK_TCK")
    children = [f for f in _processes().values() if int(f[1]) == parent]
    return max((int(f[11]) + int(f[12])) / ticks for f in children) if children else 0.0


def _running_in_group(group: int) -> list[int]:
    """Processes of the group that still run (a zombie has ended; only its entry is left)."""
    return [pid for pid, f in _processes().items() if int(f[2]) == group and f[0] != "Z"]


def _default_sigint() -> None:
    """Ctrl-C's default action, as a terminal's foreground job has it: a test run started in
    the background by a non-interactive shell ignores SIGINT, and its children inherit that
    (Python then keeps ignoring it), which would hide what a user gets."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(signum: int, whole_group: bool, threads: int) -> tuple[int, str, list[int]]:
    """Start a search, signal it once a worker runs; its exit status, stderr and survivors."""
    process = subprocess.Popen(
        [sys.executable, *TUNE, "--threads", str(threads)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a shell job
        preexec_fn=_default_sigint,
    )
    group = process.pid
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _worker_cpu_s(process.pid) < WORKER_CPU_S:
            assert process.poll() is None, "the search ended before a worker started"
            assert time.monotonic() < deadline, "no worker started"
            time.sleep(0.05)
        assert process.poll() is None, "the search ended before the signal"
        if whole_group:
            os.killpg(group, signum)
        else:
            os.kill(process.pid, signum)
        code = process.wait(timeout=EXIT_TIMEOUT_S)  # not its stderr: an orphan may hold it
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        while (survivors := _running_in_group(group)) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if process.poll() is None or _running_in_group(group):
            with contextlib.suppress(ProcessLookupError):  # never leave a search running
                os.killpg(group, signal.SIGKILL)
        _, stderr = process.communicate()
    return code, stderr, survivors


@pytest.mark.parametrize("threads", [1, 2], ids=["forked-workers", "spawned-workers"])
def test_ctrl_c_ends_the_search_with_one_line_and_stops_every_worker(threads):
    # one torch thread: workers are forked; two: spawned (pool.start_method)
    code, stderr, survivors = interrupt(signal.SIGINT, whole_group=True, threads=threads)
    assert "Traceback" not in stderr, stderr
    assert stderr.splitlines()[-1:] == ["error: interrupted"], stderr
    assert code == 130
    assert survivors == []


def test_sigterm_to_the_parent_alone_stops_its_workers():
    code, stderr, survivors = interrupt(signal.SIGTERM, whole_group=False, threads=1)
    assert "Traceback" not in stderr, stderr
    assert survivors == []  # the workers die with their parent, stopped by it or not
    assert stderr.splitlines()[-1:] == ["error: interrupted"], stderr
    assert code == 128 + signal.SIGTERM
