"""The local backend: each node a process on this machine, in its own cgroup "container".

Isolation modes (``runtime.isolation``):

- ``cgroup`` — cgroup v1 or v2 (detected): a CPU quota and a memory limit per
  node; CPU usage from cpuacct (v2: ``cpu.stat``), memory from the cgroup, OOM
  kills from its counter. A resize writes the new quota and limit; the process
  keeps running.
- ``affinity`` — without permission for cgroups (a non-root user): the node is
  pinned to ``ceil(cpu)`` CPUs and its torch threads are limited; usage comes
  from ``/proc``; memory is measured but not enforced.
- ``auto`` — cgroups if they can be created, else affinity with a one-line warning.

Either way torch's intra-op threads follow the CPU allocation
(:func:`threads_for`). Nodes start in their own session, so a Ctrl-C reaches
only the master, which then stops them; they also die with the master
(``node.die_with_parent``). Output goes to ``LOG_DIR/<node>.log``.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rightsize.core.errors import ResourceError
from rightsize.core.resources import Resources
from rightsize.core.shape import NodeSpec
from rightsize.core.spec import Isolation
from rightsize.runtime.backends.cgroups import (
    NO_SHARING,
    CgroupUnavailable,
    JobCgroups,
    NodeCgroup,
    QuotaSharing,
    detect,
)
from rightsize.runtime.backends.isolation import IsolationMode
from rightsize.runtime.segments import remove_segments, sweep_stale

#: Threads for an allocation of ``c`` cores: ``floor(c + THREAD_ROUNDING)``, at least 1 and
#: at most the machine's CPUs. Rounding down: a thread for a fractional core runs out of
#: quota each CFS period and every parallel region then waits for it (on this shared
#: host, 2 threads on 1.5 cores trained wide-deep up to 10x slower than 1 thread).
THREAD_ROUNDING = 0.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def threads_for(cpu_cores: float, machine_cpus: int) -> int:
    return max(1, min(machine_cpus, math.floor(cpu_cores + THREAD_ROUNDING)))


def machine_resources() -> Resources:
    """The CPUs this process may run on and the machine's memory."""
    cpus = len(os.sched_getaffinity(0))
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return Resources(cpus, mem_kb * 1024)


def append_note(log_dir: Path, name: str, text: str) -> None:
    """One line of the master's in node ``name``'s log, marked as the master's."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{name}.log", "a") as log:
        log.write(f"[rightsize] {text}\n")


@dataclass(frozen=True)
class Exit:
    """A node process that ended: its exit code (negative: killed by that signal)."""

    name: str
    returncode: int
    oom_killed: bool


@dataclass
class _Process:
    node: NodeSpec
    popen: subprocess.Popen
    log: IO
    cgroup: NodeCgroup | None = None
    first_cpu: int = 0


class LocalBackend:
    """Launches, resizes, measures and stops node processes on this machine."""

    #: every node is on this machine: servers listen on loopback only
    bind_host = "127.0.0.1"

    def __init__(self, isolation: Isolation, log_dir: Path, warn: Callable[[str], None],
                 sharing: QuotaSharing = NO_SHARING) -> None:  # fmt: skip
        self.log_dir = log_dir
        self.sharing = sharing  # how quotas lend unused time (burst, pool)
        self._pooled = 0.0  # the job directory's quota in cores, while pooled
        self.machine = machine_resources()
        self.cpus = sorted(os.sched_getaffinity(0))
        self.procs: dict[str, _Process] = {}
        self.cgroups: JobCgroups | None = None
        self._next_cpu = 0
        sweep_stale()  # shared memory left by the nodes of a master that was killed
        if isolation != Isolation.AFFINITY:
            try:
                hierarchy = detect()
                self.cgroups = JobCgroups(hierarchy, uuid.uuid4().hex[:8])
                self.cgroups.prepare()
            except CgroupUnavailable as exc:
                if isolation == Isolation.CGROUP:
                    raise ResourceError(f"runtime.isolation cgroup: {exc}") from None
                self.cgroups = None
                warn(f"warning: {exc}; nodes get CPU affinity and thread limits instead")
        self.mode = IsolationMode.of_cgroups(self.cgroups.hierarchy.version if self.cgroups else None)

    @property
    def host_cpus(self) -> int:
        return len(self.cpus)

    def placements(self) -> list[dict]:
        """Where nodes ran: every one on this machine."""
        return []

    # -- lifecycle ------------------------------------------------------------------
    def launch(self, node: NodeSpec, argv: list[str], env: dict[str, str],
               startup: Resources | None = None) -> int:  # fmt: skip
        """Start ``argv`` as ``node`` inside its limits (``startup``'s, larger, until the master
        resizes it: :mod:`allowance`); returns the pid. The node dies with this process
        (``--parent``: Linux's parent-death signal)."""
        if startup is not None:
            node = NodeSpec(node.name, node.role, startup)
        argv = [*argv, "--parent", str(os.getpid())]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.note(node.name, f"launching {node.name}: {node.resources} ({self.mode})")
        log = open(self.log_dir / f"{node.name}.log", "ab")  # noqa: SIM115 (closed on exit)
        threads = threads_for(node.resources.cpu_cores, len(self.cpus))
        env = {**os.environ, **env, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
        self._pool(self._total_cpu() + node.resources.cpu_cores)
        cgroup = self._cgroup_for(node)
        command = argv if cgroup is None else _enter(cgroup.procs_files) + argv
        popen = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        proc = _Process(node, popen, log, cgroup, self._next_cpu)
        self.procs[node.name] = proc
        if cgroup is None:
            self._next_cpu += math.ceil(node.resources.cpu_cores)
            self._pin(proc)
        return popen.pid

    def note(self, name: str, text: str) -> None:
        """Append one line of the master's to ``name``'s log (what ended it, say: a process
        the kernel kills writes nothing of its own)."""
        append_note(self.log_dir, name, text)

    def resize(self, name: str, resources: Resources) -> int:
        """Give the running node new limits in place; returns its new thread count.

        Raises:
            OSError: the kernel refused (e.g. memory below what the node uses).
        """
        proc = self.procs[name]
        proc.node = NodeSpec(proc.node.name, proc.node.role, resources)
        if proc.cgroup is not None:
            if self._pooling:
                self._pool(self._total_cpu())
            else:
                proc.cgroup.set_cpu(resources.cpu_cores, self.sharing.burst)
            proc.cgroup.set_memory(resources.memory_bytes)
        else:
            self._pin(proc)
        return threads_for(resources.cpu_cores, len(self.cpus))

    def exits(self) -> list[Exit]:
        """Nodes that ended since the last call (reaped, their cgroups removed)."""
        ended = []
        for name, proc in list(self.procs.items()):
            code = proc.popen.poll()
            if code is not None:
                oom = proc.cgroup is not None and proc.cgroup.oom_kills() > 0
                self._cleanup(name)
                ended.append(Exit(name, code, oom))
        return ended

    def signal(self, name: str, sig: int) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.popen.poll() is None:
            proc.popen.send_signal(sig)

    def stop(self, name: str, timeout_s: float = 10.0) -> int | None:
        """End a node (SIGTERM, then SIGKILL after ``timeout_s``) and remove its cgroup."""
        proc = self.procs.get(name)
        if proc is None:
            return None
        if proc.popen.poll() is None:
            proc.popen.send_signal(signal.SIGTERM)
            try:
                proc.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
        code = proc.popen.returncode
        self._cleanup(name)
        return code

    def close(self) -> None:
        """Stop every node and remove the job's cgroups (every exit path comes here)."""
        for name in list(self.procs):
            self.signal(name, signal.SIGKILL)
        for name in list(self.procs):
            self.stop(name, timeout_s=5.0)
        if self.cgroups is not None:
            self.cgroups.remove()
        sweep_stale()

    # -- measurement ------------------------------------------------------------------
    def reading(self, name: str) -> tuple[float, int]:
        """(CPU seconds used so far, memory bytes now) of a running node."""
        proc = self.procs[name]
        if proc.cgroup is not None:
            return proc.cgroup.cpu_seconds(), proc.cgroup.memory_bytes()
        return _proc_reading(proc.popen.pid)

    def pid(self, name: str) -> int | None:
        proc = self.procs.get(name)
        return proc.popen.pid if proc else None

    # -- internals --------------------------------------------------------------------
    @property
    def _pooling(self) -> bool:
        return self.sharing.pool and self.cgroups is not None

    def _total_cpu(self) -> float:
        return sum(proc.node.resources.cpu_cores for proc in self.procs.values())

    def _node_quota(self, node: NodeSpec) -> float:
        """A node's own CFS quota: its share, or pooled the job's whole (at most this machine)."""
        if self._pooling:
            return min(self._pooled, len(self.cpus))
        return node.resources.cpu_cores

    def _pool(self, total: float) -> None:
        """Set a pooled job's quota to ``total`` cores and each node's to match. cgroup v1
        refuses a child's quota above its parent's: grow the job first, shrink it last."""
        if not self._pooling or total <= 0:
            return
        growing = total >= self._pooled
        self._pooled = total
        if growing:
            self.cgroups.job.set_cpu(total, self.sharing.burst)
        for proc in self.procs.values():
            if proc.cgroup is not None:
                proc.cgroup.set_cpu(self._node_quota(proc.node), self.sharing.burst)
        if not growing:
            self.cgroups.job.set_cpu(total, self.sharing.burst)

    def _cgroup_for(self, node: NodeSpec) -> NodeCgroup | None:
        if self.cgroups is None:
            return None
        cgroup = self.cgroups.node(node.name)
        cgroup.set_cpu(self._node_quota(node), self.sharing.burst)
        cgroup.set_memory(node.resources.memory_bytes)
        return cgroup

    def _pin(self, proc: _Process) -> None:
        count = max(1, min(len(self.cpus), math.ceil(proc.node.resources.cpu_cores)))
        cpus = {self.cpus[(proc.first_cpu + i) % len(self.cpus)] for i in range(count)}
        for tid in _threads(proc.popen.pid):
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:  # the thread ended meanwhile
                pass

    def _cleanup(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.log.close()
        remove_segments(proc.popen.pid)  # what a node killed mid-way could not unlink
        if proc.cgroup is not None:
            # a node's own children (a user script's DataLoader workers) outlive it by up to
            # their watchdog's 5 s, and a cgroup with a process in it cannot be removed
            for pid in proc.cgroup.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if self._pooling:  # the kernel frees a removed cgroup later, and until then still
                proc.cgroup.set_cpu(0)  # holds the job's quota to its own (v1 checks it)
            proc.cgroup.remove()
            self._pool(self._total_cpu())  # the job's quota no longer counts this node


def _enter(procs_files: list[Path]) -> list[str]:
    """A shell prefix that moves itself into the cgroups, then execs the node (pid unchanged),
    so everything the node does is accounted and limited from its first instruction."""
    moves = "; ".join(f'echo $$ > "${i + 1}"' for i in range(len(procs_files)))
    script = f'set -e; {moves}; shift {len(procs_files)}; exec "$@"'
    return ["/bin/sh", "-c", script, "rightsize-node", *map(str, procs_files)]


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _proc_reading(pid: int) -> tuple[float, int]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0, 0
    fields = stat.rsplit(")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime
    rss_kb = next(
        (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0
    )
    return cpu_s, rss_kb * 1024
