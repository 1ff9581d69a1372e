"""Chaos: seeded schedules of SIGKILL and SIGSTOP against a real job, judged by its weights.

A :class:`Schedule` is a list of strikes — what (SIGKILL, or SIGSTOP for a
while and then SIGCONT), at whom (the master, a parameter server, a worker)
and when (seconds after the previous strike) — drawn from a seed, so a failing
schedule can be run again. :func:`run_schedule` runs ``rightsize run`` on a
job file as a user would, carries out the strikes on the real processes, runs
the command again whenever the master was killed (a rerun resumes), and judges
the outcome without trusting the runtime's bookkeeping: the job trains
:mod:`rightsize.workloads.counter`, whose final weights are the number of times
each sample's gradient was applied. A run passes when it ends with exit 0 and
every sample was applied exactly ``epochs`` times in every tensor, or when it
ends with a non-zero exit and one ``error:`` line (a loud failure). It fails
when it exits 0 with a sample missing or applied twice, prints a traceback,
or hangs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import torch

from rightsize.core.spec import JobSpec
from rightsize.runtime.state import StateReader, StateUnreadable
from rightsize.workloads.counter import applied_counts

#: Seconds between looks at the processes while a schedule runs.
POLL_S = 0.05
#: How long a strike waits for its target to exist (a node still being launched).
STRIKE_PATIENCE_S = 5.0


class Target(StrEnum):
    MASTER = "master"
    PS = "ps"
    WORKER = "worker"


class Fault(StrEnum):
    KILL = "kill"  # SIGKILL
    FREEZE = "freeze"  # SIGSTOP, then SIGCONT after ``freeze_s``


class Verdict(StrEnum):
    """How a schedule ended; the first two are passes."""

    EXACTLY_ONCE = "exactly_once"
    FAILED_LOUDLY = "failed_loudly"
    SILENT_LOSS = "silent_loss"
    DUPLICATED = "duplicated"
    CRASHED = "crashed"
    HUNG = "hung"

    @property
    def passed(self) -> bool:
        return self in (Verdict.EXACTLY_ONCE, Verdict.FAILED_LOUDLY)


@dataclass(frozen=True)
class Strike:
    """One fault: ``delay_s`` after the previous strike (the first: after the start)."""

    delay_s: float
    target: Target
    index: int = 0  # which node of the role, modulo how many are running
    fault: Fault = Fault.KILL
    freeze_s: float = 0.0

    def describe(self) -> str:
        who = self.target if self.target == Target.MASTER else f"{self.target}[{self.index}]"
        what = f"freeze {self.freeze_s:.1f}s" if self.fault == Fault.FREEZE else "kill"
        return f"+{self.delay_s:.2f}s {what} {who}"


class Anchor(StrEnum):
    """What the first strike's delay counts from: the start of ``rightsize run``, the moment
    the state file holds the job (its launch has begun), or the first applied step the
    state file records. The last two are moments of the job, however long the master takes
    to get there on a loaded machine (a fixed 3 s after the start can still be the
    interpreter importing torch)."""

    START = ""
    LAUNCH = "launch+"
    TRAINING = "training+"


@dataclass(frozen=True)
class Schedule:
    """Strikes in order, the first ``delay_s`` after ``after`` (see :class:`Anchor`)."""

    seed: int
    strikes: tuple[Strike, ...]
    after: Anchor = Anchor.START

    def describe(self) -> str:
        return str(self.after) + "; ".join(s.describe() for s in self.strikes)


@dataclass(frozen=True)
class ScheduleShape:
    """What random schedules look like.

    Attributes:
        strikes: the fewest and most strikes.
        first_s: the first strike comes uniformly within this many seconds of the
            start (early ones land while the job launches).
        close_probability: chance that a strike follows the previous one within
            ``close_s`` (two faults within seconds: one lands in the other's
            recovery); otherwise within ``apart_s``.
        weights: relative chances of hitting a worker, a PS, the master.
        freeze_probability: chance that a strike is a SIGSTOP for ``freeze_s``.
    """

    strikes: tuple[int, int] = (1, 3)
    first_s: float = 20.0
    close_probability: float = 0.5
    close_s: tuple[float, float] = (0.2, 2.0)
    apart_s: tuple[float, float] = (2.0, 10.0)
    weights: tuple[float, float, float] = (0.45, 0.35, 0.2)
    freeze_probability: float = 0.15
    freeze_s: tuple[float, float] = (5.0, 40.0)


def random_schedule(seed: int, shape: ScheduleShape = ScheduleShape()) -> Schedule:
    """The schedule of ``seed`` (the same seed always gives the same schedule)."""
    rng = random.Random(seed)
    strikes = []
    for i in range(rng.randint(*shape.strikes)):
        if i == 0:
            delay = rng.uniform(0.0, shape.first_s)
        else:
            close = rng.random() < shape.close_probability
            delay = rng.uniform(*(shape.close_s if close else shape.apart_s))
        target = rng.choices((Target.WORKER, Target.PS, Target.MASTER), shape.weights)[0]
        freeze = rng.random() < shape.freeze_probability
        strikes.append(Strike(
            round(delay, 2), target, rng.randint(0, 3), Fault.FREEZE if freeze else Fault.KILL,
            round(rng.uniform(*shape.freeze_s), 1) if freeze else 0.0,
        ))  # fmt: skip
    return Schedule(seed, tuple(strikes))


@dataclass
class Landed:
    """A strike as carried out: when (seconds after the start), on which process."""

    time_s: float | None  # None: the job ended before the strike was due
    strike: str
    node: str | None
    pid: int | None

    @property
    def hit(self) -> bool:
        return self.pid is not None


@dataclass
class Outcome:
    """What a schedule did to the job, and the verdict."""

    seed: int
    schedule: str
    verdict: Verdict
    exit_codes: list[int] = field(default_factory=list)
    landed: list[Landed] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    message: str = ""
    wall_s: float = 0.0
    report_exactly_once: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = str(self.verdict)
        data["passed"] = self.verdict.passed
        return data

    def explain(self) -> str:
        """The verdict and its message first, then everything else, whole (a test's failure
        message: a repr of the dict would be cut before the message)."""
        rest = {k: v for k, v in self.to_dict().items() if k not in ("verdict", "message")}
        return f"{self.verdict}: {self.message}\n{json.dumps(rest, default=str)}"


# -- the job under test ------------------------------------------------------------------------
def counter_job(directory: Path, epochs: int = 40, samples: int = 4096, batch_size: int = 32,
                **runtime: Any) -> tuple[Path, JobSpec]:  # fmt: skip
    """A job file in ``directory`` training the counting workload with 2 PS and 2 workers.

    Small shards (8 batches) and a 2 s checkpoint interval put many leases and
    checkpoints in a short job, so random strikes land in all of them; ``runtime``
    adds fields to the job file's ``runtime`` section.
    """
    import yaml

    from rightsize.core.spec import parse_job_spec

    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "name": "chaos",
        "workload": "rightsize.workloads.counter:sample_counter",
        "options": {"samples": samples},
        "batch_size": batch_size,
        "epochs": epochs,
        "strategy": "ps",
        "budget": {"cpu": 2, "memory": "6Gi"},
        "initial_shape": {"ps": {"count": 2, "cpu": 0.5, "memory": "1Gi"},
                          "workers": {"count": 2, "cpu": 0.5, "memory": "1Gi"}},
        "checkpoint": {"dir": str(directory / "ckpt"), "interval": "2s"},
        "training": {"optimizer": "sgd", "lr": 1},
        "runtime": {"metric_interval": "1s", "shard_size": 8 * batch_size, "max_restarts": 20,
                    **runtime},
    }  # fmt: skip
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, parse_job_spec(data, str(path))


def script_counter_job(directory: Path, epochs: int = 8, samples: int = 2048, batch_size: int = 16,
                       ranks: int = 2, step_sleep_s: float = 0.02,
                       **runtime: Any) -> tuple[Path, JobSpec]:  # fmt: skip
    """A job file in ``directory`` running the counting workload as a user's torchrun script
    (:mod:`rightsize.workloads.counter_script`: DDP, an ElasticSampler, its own checkpoint
    every 10 steps and at each epoch's end) on ``ranks`` ranks, judged by the counts it
    writes to ``directory/counts.pt``. The counter's steps take microseconds: each step
    sleeps ``step_sleep_s`` so that strikes land while it trains (16 s or so at the defaults)."""
    import yaml

    from rightsize.core.spec import parse_job_spec

    directory.mkdir(parents=True, exist_ok=True)
    data = {
        "name": "chaos-script",
        "script": "rightsize.workloads.counter_script",
        "module": True,
        "args": ["--samples", str(samples), "--batch-size", str(batch_size), "--epochs",
                 str(epochs), "--save-every", "10", "--checkpoint", str(directory / "counter.pt"),
                 "--out", str(directory / COUNTS_FILE), "--step-sleep", str(step_sleep_s)],
        "budget": {"cpu": 2, "memory": "6Gi"},
        "initial_shape": {"workers": {"count": ranks, "cpu": 2 / ranks, "memory": "1Gi"}},
        "checkpoint": {"dir": str(directory / "ckpt")},
        "runtime": {"metric_interval": "1s", "max_restarts": 20, **runtime},
    }  # fmt: skip
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, parse_job_spec(data, str(path))


#: Where :func:`script_counter_job`'s script writes its final counts (beside the job file).
COUNTS_FILE = "counts.pt"
#: A script job has no parameter servers: strikes fall on ranks and the master.
SCRIPT_SCHEDULES = ScheduleShape(weights=(0.75, 0.0, 0.25))


# -- finding the job's processes ------------------------------------------------------------
def node_processes(master_pid: int) -> dict[str, int]:
    """``{node name: pid}`` of the master's node processes (from /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) != master_pid:
            continue
        if b"rightsize.runtime.node" in argv and b"--name" in argv:
            found[argv[argv.index(b"--name") + 1].decode()] = int(entry.name)
    return found


def reached(spec: JobSpec, anchor: Anchor) -> bool:
    """Whether the job has reached ``anchor``, read from its state file."""
    if anchor == Anchor.LAUNCH:
        return _job_row(spec)
    return anchor == Anchor.START or steps_done(spec) > 0


def _job_row(spec: JobSpec) -> bool:
    try:
        with StateReader(spec.state_path, timeout_s=1) as state:
            return state.job() is not None
    except StateUnreadable:  # not created yet, or being created
        return False


def steps_done(spec: JobSpec) -> int:
    """Steps the job had done at its last metric sample (0 before the state file has one)."""
    try:
        with StateReader(spec.state_path, timeout_s=1) as state:
            sample = state.last_sample()
    except StateUnreadable:  # not created yet, or being created
        return 0
    return sample["steps_done"] if sample else 0


def _pick(nodes: dict[str, int], strike: Strike) -> tuple[str, int] | None:
    names = sorted(n for n in nodes if n.startswith(f"{strike.target}-"))
    if not names:
        return None
    name = names[strike.index % len(names)]
    return name, nodes[name]


# -- running a schedule -------------------------------------------------------------------------
class _Run:
    """One ``rightsize run`` process at a time, rerun after a master kill."""

    def __init__(self, job: Path, fresh: bool, log: Path) -> None:
        self.job, self.log = job, log
        self.proc = self._start(fresh)

    def _start(self, fresh: bool) -> subprocess.Popen:
        argv = [sys.executable, "-m", "rightsize", "run", str(self.job), "--quiet"]
        with open(self.log, "ab") as log:
            return subprocess.Popen(argv + (["--fresh"] if fresh else []), stdout=log,
                                    stderr=log, start_new_session=True)  # fmt: skip

    def restart(self) -> None:
        self.proc = self._start(fresh=False)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def run_schedule(job: Path, spec: JobSpec, schedule: Schedule, timeout_s: float = 300.0,
                 max_reruns: int = 8) -> Outcome:  # fmt: skip
    """Run ``job`` under ``schedule`` and judge it by the trained weights.

    ``spec`` is the job file's spec: it must train :mod:`rightsize.workloads.counter` with
    SGD at learning rate 1, and its checkpoint directory should be empty (the first run is
    ``--fresh``).
    """
    log = spec.checkpoint.dir / "chaos.log"
    spec.checkpoint.dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    run = _Run(job, fresh=True, log=log)
    outcome = Outcome(schedule.seed, schedule.describe(), Verdict.HUNG)
    pending = list(schedule.strikes)
    first = pending[0].delay_s if pending else 0.0
    next_at = start + first if schedule.after == Anchor.START else None
    thaw: list[tuple[float, int]] = []
    reruns = 0
    while True:
        now = time.monotonic()
        for at, pid in [t for t in thaw if t[0] <= now]:
            _signal(pid, signal.SIGCONT)
            thaw.remove((at, pid))
        code = run.proc.poll()
        if code is not None:
            outcome.exit_codes.append(code)
            if code == -signal.SIGKILL and reruns < max_reruns:  # our master kill: resume
                reruns += 1
                run.restart()
                continue
            break
        if next_at is None and reached(spec, schedule.after):
            next_at = now + first
        if pending and next_at is not None and now >= next_at:
            landed = _strike(run, pending[0], now - start, thaw)
            if landed.hit or now >= next_at + STRIKE_PATIENCE_S:  # else: not started yet
                outcome.landed.append(landed)
                pending.pop(0)
                next_at = now + (pending[0].delay_s if pending else 0.0)
        if now - start > timeout_s:
            run.kill()
            outcome.wall_s = time.monotonic() - start
            outcome.message = f"no end within {timeout_s:g}s"
            return outcome
        time.sleep(POLL_S)
    outcome.landed += [Landed(None, s.describe(), None, None) for s in pending]  # too late
    for _at, pid in thaw:
        _signal(pid, signal.SIGCONT)
    outcome.wall_s = time.monotonic() - start
    _judge(outcome, spec, log)
    return outcome


def _strike(run: _Run, strike: Strike, time_s: float, thaw: list) -> Landed:
    if strike.target == Target.MASTER:
        name, pid = "master", run.proc.pid
    else:
        picked = _pick(node_processes(run.proc.pid), strike)
        if picked is None:
            return Landed(round(time_s, 2), strike.describe(), None, None)
        name, pid = picked
    if strike.fault == Fault.FREEZE:
        if _signal(pid, signal.SIGSTOP):
            thaw.append((time.monotonic() + strike.freeze_s, pid))
    else:
        _signal(pid, signal.SIGKILL)
    return Landed(round(time_s, 2), strike.describe(), name, pid)


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def _judge(outcome: Outcome, spec: JobSpec, log: Path) -> None:
    text = log.read_text(errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    outcome.message = lines[-1] if lines else ""
    code = outcome.exit_codes[-1]
    if "Traceback" in text:
        outcome.verdict = Verdict.CRASHED
        return
    if code != 0:
        loud = outcome.message.startswith("error: ")
        outcome.verdict = Verdict.FAILED_LOUDLY if loud else Verdict.CRASHED
        return
    epochs = int(spec.args[spec.args.index("--epochs") + 1]) if spec.is_script else spec.length[1]
    counts = trained_counts(spec)
    outcome.counts = {name: _summary(c, epochs) for name, c in counts.items()}
    outcome.report_exactly_once = _report_says(spec)
    if any(s["missing"] for s in outcome.counts.values()) or not counts:
        outcome.verdict = Verdict.SILENT_LOSS
    elif any(s["duplicated"] for s in outcome.counts.values()):
        outcome.verdict = Verdict.DUPLICATED
    else:
        outcome.verdict = Verdict.EXACTLY_ONCE


def trained_counts(spec: JobSpec) -> dict[str, torch.Tensor]:
    """How often each sample was applied, from the weights of the job's last checkpoint (a
    script's: from the counts its rank 0 wrote at the end)."""
    if spec.is_script:
        path = Path(spec.args[spec.args.index("--out") + 1])
        if not path.exists():
            return {}
        return applied_counts(torch.load(path, map_location="cpu"))
    with StateReader(spec.state_path) as state:
        row = state.latest_checkpoint()
    if row is None:
        return {}
    params: dict[str, torch.Tensor] = {}
    for path in row.files.values():
        state = torch.load(path, map_location="cpu", weights_only=False)
        params.update(state["params"] if "params" in state else state["model"])
    return applied_counts(params)


def _summary(counts: torch.Tensor, epochs: int) -> dict[str, int]:
    """Sample-epochs never applied and applied more than once, against ``epochs`` each."""
    return {
        "samples": int(counts.numel()),
        "min": int(counts.min()),
        "max": int(counts.max()),
        "missing": int((epochs - counts).clamp(min=0).sum()),
        "duplicated": int((counts - epochs).clamp(min=0).sum()),
    }


def _report_says(spec: JobSpec) -> bool | None:
    path = spec.checkpoint.dir / f"{spec.name}-report.json"
    try:
        return json.loads(path.read_text())["accounting"].get("exactly_once")
    except (OSError, ValueError, KeyError):
        return None
