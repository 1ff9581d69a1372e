"""What the torchrun benchmarks share: running a script under plain torchrun or rightsize
torchrun, reading the epoch times the script prints itself, and reading a run's report.

The scripts time themselves ("Epoch N | ... | 0.6s" on rank 0, as PyTorch's DDP tutorial
prints), so the comparison does not read rightsize's own measurements.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EPOCH_LINE = re.compile(r"Epoch (\d+) \|.*\| ([0-9.]+)s")


@dataclass(frozen=True)
class Run:
    """One run of a script: its wall time (start to exit) and the epoch times it printed."""

    wall_s: float
    epoch_s: tuple[float, ...]
    returncode: int
    output: str

    def steady_epoch_s(self) -> list[float]:
        """The epochs after the first (start-up, first allocations)."""
        return list(self.epoch_s[1:]) or list(self.epoch_s)


def epoch_times(text: str) -> tuple[float, ...]:
    return tuple(float(m.group(2)) for m in EPOCH_LINE.finditer(text))


def plain_torchrun(script: Path, args: list[str], nproc: int, cwd: Path,
                   timeout_s: float = 1800) -> Run:  # fmt: skip
    argv = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(nproc), str(script),
            *args]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    wall = time.monotonic() - started
    return Run(wall, epoch_times(done.stdout), done.returncode, done.stdout + done.stderr)


def rightsize_torchrun(script: Path, args: list[str], options: list[str], cwd: Path,
                       name: str = "bench", timeout_s: float = 1800) -> tuple[Run, dict | None]:  # fmt: skip
    """``rightsize torchrun OPTIONS SCRIPT ARGS`` in ``cwd``; the run (epoch times from rank
    0's log) and its report."""
    argv = [str(BIN / "rightsize"), "torchrun", "--quiet", "--fresh", "--name", name,
            "--database", str(cwd / "store.db"), *options, str(script), *args]  # fmt: skip
    shutil.rmtree(cwd / "checkpoints" / name, ignore_errors=True)  # logs are appended to
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    wall = time.monotonic() - started
    log = cwd / "checkpoints" / name / "logs" / "worker-0.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    report_path = cwd / "checkpoints" / f"{name}-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return Run(wall, epoch_times(text), done.returncode, done.stdout + done.stderr), report


def clean(cwd: Path, *names: str) -> None:
    """Remove a script's snapshots and the last run's state, so the next run starts fresh."""
    for name in names:
        path = cwd / name
        if path.exists():
            os.remove(path)
