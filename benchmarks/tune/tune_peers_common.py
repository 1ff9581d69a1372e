"""What every tool of ``tune_peers.py`` shares: the problem, one trial's training, the meters.

Not a benchmark itself. The point of the side-by-side benchmark is that the
tools differ only in how they schedule trials, so everything a trial computes
comes from here or from rightsize itself:

- :func:`build_problem` makes the search's workload, data stream and rung
  units with the runner's own helpers, so the stream has exactly the width
  and seed of ``rightsize tune``'s (step ``k`` gives every tool the same
  batch);
- :class:`TrialRun` trains one configuration with rightsize's own plain-PyTorch
  trainer (:class:`~rightsize.packing.alone.AloneTrainer`, ``torch.optim`` with
  ``fused=True``, what ``--pack none`` runs) and scores it with rightsize's
  :func:`~rightsize.packing.alone.validation_loss`;
- :class:`Meter` counts the steps a training loop really took and the seconds
  spent inside training and validation, for the framework-overhead figure;
- :func:`run_measured` runs one variant in a fresh process and charges it the
  CPU time of its whole process tree.
"""

from __future__ import annotations

import ctypes
import math
import multiprocessing
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rightsize.packing import runner
from rightsize.packing.alone import AloneTrainer, validation_loss
from rightsize.packing.data import DataStream
from rightsize.packing.executor import RungExecutor
from rightsize.packing.hyperband import sampled
from rightsize.packing.pack import PackSettings
from rightsize.packing.runner import TuneSettings, model_option_names
from rightsize.packing.space import Config, SearchSpace, load_space
from rightsize.packing.trial import (
    Architectures,
    TrialSpec,
    TrialState,
    initial_rng_state,
    spec_from_config,
)
from rightsize.workloads.registry import WorkloadRegistry

#: Validation chunk rows: the pack settings' default, which ``rightsize tune`` evaluates with.
EVAL_ROWS = PackSettings().eval_rows


@dataclass(frozen=True)
class Problem:
    """The search every tool runs: the space, the trials' models and data, Hyperband's shape.

    Attributes:
        settings: rightsize's settings for the unpacked search (R, eta, steps per unit, seed).
        executor: that search's rung executor: its stream and its units-to-steps rule.
    """

    settings: TuneSettings
    space: SearchSpace
    architectures: Architectures
    executor: RungExecutor

    @property
    def stream(self) -> DataStream:
        return self.executor.stream

    @property
    def max_units(self) -> int:
        return int(self.settings.max_resource)

    @property
    def rung_units(self) -> tuple[int, ...]:
        """Units at which some Hyperband rung ends (1, 3, 9, 27, 81 for R = 81, eta = 3)."""
        schedule = self.settings.schedule()
        return tuple(sorted({int(rung.r) for b in schedule for rung in b.rungs}))

    @property
    def configurations(self) -> int:
        """How many configurations rightsize's Hyperband samples: every peer gets as many."""
        return sampled(self.settings.schedule())

    def steps(self, units: float) -> int:
        """Training steps for ``units`` of resource, by rightsize's own rule."""
        return self.executor.steps(units)

    def config(self, values: dict[str, Any]) -> Config:
        """A rightsize configuration from a tool's drawn values (numpy scalars made plain)."""
        return Config(tuple((name, plain(values[name])) for name in self.space.names))


def build_problem(settings: TuneSettings, space_path: str) -> Problem:
    """The problem wired as ``prepare_search`` wires it: the same stream and models as
    ``rightsize tune``, from the runner's own helpers.

    Not ``prepare_search`` itself: its checks (every option value builds, the largest
    trial fits the memory limit, measured) take ~2 s that a peer would not spend.
    """
    registry = WorkloadRegistry()
    space = load_space(space_path, model_option_names(registry, settings.workload))
    architectures = runner.search_architectures(settings, registry)
    width = max(space.values("batch_size"))  # as prepare_search: the largest batch
    executor = runner.search_executor(settings, architectures, width, time.perf_counter)
    return Problem(settings, space, architectures, executor)


#: Problems built in this process, by settings and space: a Ray worker reused for
#: several trials builds its problem once, as a user's trainable would cache its data.
_PROBLEMS: dict[str, Problem] = {}


def cached_problem(settings: TuneSettings, space_path: str) -> Problem:
    key = repr((settings, space_path))
    if key not in _PROBLEMS:
        _PROBLEMS[key] = build_problem(settings, space_path)
    return _PROBLEMS[key]


def hyperband_trial_steps(problem: Problem, algorithm: str = "hyperband") -> int:
    """Trial-steps ``algorithm`` (Algorithm 1, or its one-bracket successive halving over as
    many trials) trains with resuming: what rightsize's searches must count."""
    schedule = replace(problem.settings, algorithm=algorithm).schedule()
    total = 0
    for bracket in schedule:
        done = 0
        for rung in bracket.rungs:
            total += rung.n * (problem.steps(rung.r) - done)
            done = problem.steps(rung.r)
    return total


def plain(value: Any) -> Any:
    """A numpy scalar (Ray's ``tune.choice`` may draw one) as the Python value."""
    return value.item() if hasattr(value, "item") else value


class Meter:
    """Steps trained and seconds inside training and validation code, summed.

    Shared memory, so threads (Optuna's ``n_jobs``) and worker processes forked
    after it was made (rightsize's ``--workers``) add to the same counters.
    """

    def __init__(self) -> None:
        self._values = multiprocessing.get_context("fork").Array("d", 2)

    def add(self, steps: int, seconds: float) -> None:
        with self._values.get_lock():
            self._values[0] += steps
            self._values[1] += seconds

    @property
    def steps(self) -> int:
        return int(self._values[0])

    @property
    def busy_s(self) -> float:
        return self._values[1]


class TrialRun:
    """One trial trained step by step with rightsize's plain-PyTorch trainer, on the shared stream.

    The loop and the validation are those of :func:`~rightsize.packing.alone.train_alone`
    (its trainer, the trial's own random-number state around the steps, its
    validation loss), without its checkpoint copy after every call: a peer that
    reports every unit would otherwise pay a copy that rightsize's unpacked search
    pays only once per rung.
    """

    def __init__(self, spec: TrialSpec, problem: Problem, meter: Meter) -> None:
        start = time.perf_counter()
        self.spec, self.problem, self.meter = spec, problem, meter
        self.trainer = AloneTrainer(
            TrialState(spec), problem.architectures, problem.stream, fused_optimizer=True
        )
        self.rng = initial_rng_state(spec.seed)
        meter.add(0, time.perf_counter() - start)  # building the model is training code too

    @property
    def step(self) -> int:
        return self.trainer.step

    def train_to(self, target_step: int) -> None:
        start, first = time.perf_counter(), self.trainer.step
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.rng)
            while self.trainer.step < target_step:
                self.trainer.train_step()
            self.rng = torch.get_rng_state()
        self.meter.add(self.trainer.step - first, time.perf_counter() - start)

    def validate(self) -> float:
        start = time.perf_counter()
        trainer = self.trainer
        loss = validation_loss(trainer.workload, trainer.model, self.problem.stream, EVAL_ROWS)
        self.meter.add(0, time.perf_counter() - start)
        return loss

    def snapshot(self) -> dict[str, Any]:
        """What a framework that pauses trials must save (the usual PyTorch checkpoint)."""
        trainer = self.trainer
        return {
            "model": trainer.model.state_dict(),
            "optimizer": trainer.optimizer.state_dict(),
            "step": trainer.step,
            "rng": self.rng,
        }

    def restore(self, saved: dict[str, Any]) -> None:
        self.trainer.model.load_state_dict(saved["model"])
        self.trainer.optimizer.load_state_dict(saved["optimizer"])
        self.trainer.step, self.rng = saved["step"], saved["rng"]


@contextmanager
def metered_groups(meter: Meter) -> Iterator[None]:
    """Meter every group rightsize trains, here and in the workers its pool forks meanwhile.

    The executor's ``train_group`` is where a group (a pack, or one trial alone)
    loads, trains, validates and checkpoints, so its seconds are rightsize's
    training-and-validation time, as a peer's objective around its own training.
    Steps are those the returned checkpoints advanced.
    """
    train_group = RungExecutor.train_group

    def metered(self, members, target):
        start = time.perf_counter()
        results, switch_s = train_group(self, members, target)
        steps = sum(results[m.spec.trial_id].state.step - m.step for m in members)
        meter.add(steps, time.perf_counter() - start)
        return results, switch_s

    RungExecutor.train_group = metered
    try:
        yield
    finally:
        RungExecutor.train_group = train_group


def trial_spec(problem: Problem, values: dict[str, Any], trial_id: str, seed: int) -> TrialSpec:
    return spec_from_config(problem.config(values), trial_id, seed)


def retrain_loss(problem: Problem, config: dict[str, Any], seed: int) -> float:
    """Validation loss of ``config`` trained for the full budget (R units): the common judge."""
    run = TrialRun(trial_spec(problem, config, "retrain", seed), problem, Meter())
    run.train_to(problem.steps(problem.max_units))
    return run.validate()


# --- running a variant in its own process, charged the CPU of its whole process tree ---

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
#: How long descendants a variant left behind get to exit before they are killed.
ORPHAN_GRACE_S = 30.0
#: How often the process tree is sampled for processes whose CPU no wait will report.
SAMPLE_S = 0.2
SIGCHLD_MASK = 1 << (signal.SIGCHLD - 1)  # its bit in /proc/PID/status's SigIgn
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux), so that they are waited for here.

    A process's CPU time reaches its ancestors only when someone waits for it; a
    descendant whose parent dies first is re-parented, to this process once it is
    a subreaper (instead of init), and :func:`run_measured` waits for it.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


@dataclass
class Measured:
    """One variant process: its exit status and what its whole process tree cost.

    ``cpu_s`` = ``waited_cpu_s`` (every descendant someone waited for) +
    ``unwaited_cpu_s`` (those whose parent ignores SIGCHLD, sampled).
    """

    returncode: int
    wall_s: float
    waited_cpu_s: float
    unwaited_cpu_s: float
    unwaited_processes: int
    orphans: int = 0
    killed: list[int] = field(default_factory=list)

    @property
    def cpu_s(self) -> float:
        return self.waited_cpu_s + self.unwaited_cpu_s


def run_measured(command: list[str], timeout_s: float | None = None) -> Measured:
    """Run ``command`` and charge it every descendant's CPU seconds (user + system).

    ``RUSAGE_CHILDREN`` grows by a process's seconds, and those of all it waited
    for, when it is waited for. The variant process waits for its own children;
    anything re-parented to this (subreaper) process is waited for here, after a
    grace period in which daemons finish on their own, killed past it. A process
    whose parent ignores SIGCHLD is reaped by the kernel with nobody waiting, and
    its seconds reach no ancestor: Ray's raylet does this to its workers, which do
    all of a Ray search's training. Those are sampled from /proc while the
    variant runs (:class:`TreeSampler`); only their last ``SAMPLE_S`` is missed.
    """
    before = _children_cpu_s()
    start = time.perf_counter()
    process = subprocess.Popen(command)
    sampler = TreeSampler(process.pid)
    sampler.start()
    try:
        returncode = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        returncode = process.wait()
    wall = time.perf_counter() - start
    sampler.stop()
    reaped, killed = _reap_orphans(ORPHAN_GRACE_S)
    # an orphan waited for here is in RUSAGE_CHILDREN already
    unwaited = {k: v for k, v in sampler.unwaited.items() if k[0] not in reaped}
    return Measured(
        returncode, wall, _children_cpu_s() - before, sum(unwaited.values()), len(unwaited),
        len(reaped), killed,
    )  # fmt: skip


class TreeSampler(threading.Thread):
    """Samples the CPU seconds of a process tree's members that no wait will report.

    Every ``SAMPLE_S`` it walks the tree from ``root`` (/proc/PID/task/TID/children)
    and, for each process whose parent ignores SIGCHLD, keeps its latest CPU
    seconds: its own and its waited-for children's (``utime + stime + cutime +
    cstime``), by (pid, start time) so a reused pid is another process.
    """

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.unwaited = root, {}
        self._done = threading.Event()  # not _stop: Thread has its own

    def run(self) -> None:
        while not self._done.wait(SAMPLE_S):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self.join()

    def sample(self) -> None:
        ignores: dict[int, bool] = {}
        for pid in _descendants(self.root):
            stat = _stat(pid)
            if stat is None:
                continue
            ppid, cpu, started = stat
            if ppid not in ignores:
                ignores[ppid] = _ignores_sigchld(ppid)
            key = (pid, started)
            if ignores[ppid]:
                self.unwaited[key] = cpu
            else:  # re-parented to a parent that waits: its seconds arrive that way
                self.unwaited.pop(key, None)


def _descendants(root: int) -> list[int]:
    found, todo = [], _children(root)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += _children(pid)
    return found


def _children(pid: int) -> list[int]:
    """``pid``'s children (of every thread), from /proc; none once it has exited."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        return [
            int(child)
            for task in tasks
            for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        ]
    except OSError:
        return []


def _stat(pid: int) -> tuple[int, float, int] | None:
    """(parent pid, CPU seconds with waited-for children, start time in ticks) of ``pid``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # after "pid (comm) ": state ppid ... utime stime cutime cstime (fields 14-17) ... starttime (22)
    fields = text[text.rindex(")") + 2 :].split()
    ticks = sum(int(f) for f in fields[11:15])
    return int(fields[1]), ticks * TICK_S, int(fields[19])


def _ignores_sigchld(pid: int) -> bool:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & SIGCHLD_MASK)
    except OSError:
        pass
    return False


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reap_orphans(grace_s: float) -> tuple[set[int], list[int]]:
    """Wait for adopted descendants; kill (by pid) those still alive after ``grace_s``."""
    reaped, killed = set(), []
    deadline = time.monotonic() + grace_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no children left
            return reaped, killed
        if pid:
            reaped.add(pid)
            continue
        if time.monotonic() > deadline:
            for child in _children(os.getpid()):
                os.kill(child, signal.SIGKILL)
                killed.append(child)
            deadline = math.inf  # killed: now wait for them without a limit
        time.sleep(0.1)


def self_cpu_s() -> float:
    """This process's own CPU seconds so far (its imports, before a variant starts)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
