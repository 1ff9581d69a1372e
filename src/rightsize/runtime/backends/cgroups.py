"""Linux control groups as node "containers": CPU quota, memory limit, usage, OOM kills.

cgroup v1 (separate ``cpu``, ``cpuacct`` and ``memory`` hierarchies, possibly
co-mounted) and v2 (one unified hierarchy) are both detected from
``/proc/self/mountinfo`` and ``/proc/self/cgroup``. A job's cgroups are
created under the master's own cgroup in each hierarchy, in
``rightsize/<master pid>-<token>/<node>``, so they nest inside whatever limits
the master already runs under, and a later master can sweep directories left
by one that was killed (their master pid is dead).

A CPU limit of ``c`` cores is a CFS quota of ``c * period`` per period (the
Kubernetes way: a cap on CPU time, not pinned cores); memory is a hard limit
whose breach invokes the OOM killer inside the cgroup. Resizing is writing the
new numbers: the process keeps running.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from rightsize.core.processes import pid_alive

#: CFS period; the quota is ``cpu_cores * CFS_PERIOD_US`` (the kernel's and Kubernetes' default).
CFS_PERIOD_US = 100_000
#: The smallest quota the kernel accepts.
MIN_QUOTA_US = 1_000
_V1_CONTROLLERS = ("cpu", "cpuacct", "memory")


class CgroupUnavailable(Exception):
    """No usable cgroup hierarchy, or no permission to create cgroups."""


@dataclass(frozen=True)
class QuotaSharing:
    """How a job's CPU quotas may lend time that goes unused; either way every node's
    average stays within its own quota, or the job's within the sum of its nodes'.

    - ``burst``: a node may spend quota it left unused in earlier periods, up to one
      period's worth (:meth:`NodeCgroup.set_cpu`).
    - ``pool``: the job's directory holds the sum of its nodes' quotas and each node may
      run up to that sum (at most the machine), so one rank runs on what its siblings
      leave idle while they wait in a collective. Threads still follow each node's own
      share, and what a node is "allocated" stays its own share.
    """

    burst: bool = False
    pool: bool = False


#: Every node held to its own quota, period by period.
NO_SHARING = QuotaSharing()


@dataclass(frozen=True)
class Hierarchy:
    """Where the controllers live: per-controller base directories (the master's own cgroups)."""

    version: int
    bases: dict[str, Path]  # controller -> the master's cgroup directory in its hierarchy


def detect(proc: Path = Path("/proc/self")) -> Hierarchy:
    """Find cgroup v1 (cpu, cpuacct, memory) or v2 with cpu and memory.

    Raises:
        CgroupUnavailable: neither is mounted with the needed controllers.
    """
    mounts = _mounts(proc / "mountinfo")
    membership = _membership(proc / "cgroup")
    v1 = {}
    for controller in _V1_CONTROLLERS:
        for mount_point, root, fstype, options in mounts:
            if fstype == "cgroup" and controller in options.split(","):
                v1[controller] = _join(mount_point, root, membership.get(controller, "/"))
                break
    if len(v1) == len(_V1_CONTROLLERS):
        return Hierarchy(1, v1)
    for mount_point, root, fstype, _ in mounts:
        if fstype == "cgroup2":
            base = _join(mount_point, root, membership.get("", "/"))
            controllers = _read(base / "cgroup.controllers", "").split()
            if {"cpu", "memory"} <= set(controllers):
                return Hierarchy(2, {"unified": base})
    raise CgroupUnavailable("no cgroup v1 cpu/cpuacct/memory or v2 cpu+memory hierarchy mounted")


def held_by_masters(hierarchy: Hierarchy) -> dict[int, tuple[float, int]]:
    """What the kernel enforces now on every rightsize job's node cgroups beside this
    process's (``rightsize/<master pid>-<token>/<node>``, each with a live process): CPU
    quota in cores and memory limit in bytes, summed by master pid (a pooled job's at most
    its directory's quota: :class:`QuotaSharing`). What is applied, read from the kernel,
    whoever started it (a service's jobs, a standalone ``rightsize run``)."""
    cpu_base = hierarchy.bases.get("cpu") or hierarchy.bases.get("unified")
    memory_base = hierarchy.bases.get("memory") or hierarchy.bases.get("unified")
    held: dict[int, tuple[float, int]] = {}
    root = cpu_base / "rightsize" if cpu_base else None
    for job in root.glob("*") if root is not None and root.is_dir() else []:
        owner = job.name.split("-", 1)[0]
        if not owner.isdigit() or not job.is_dir():
            continue  # a service runner's own cgroup (job-N), not a master's
        cores, memory = 0.0, 0
        for node in (d for d in job.iterdir() if d.is_dir()):
            try:
                if not (node / "cgroup.procs").read_text().split():
                    continue
                node_cores = _quota_cores(hierarchy, node)
                memory += _memory_limit(hierarchy, memory_base / node.relative_to(cpu_base))
            except (OSError, ValueError):
                continue  # removed while read
            cores += node_cores or 0.0
        try:  # a pooled job's nodes each may run up to the job's quota: the job holds that
            pooled = _quota_cores(hierarchy, job)
        except (OSError, ValueError):
            pooled = None
        cores = cores if pooled is None else min(cores, pooled)
        before = held.get(int(owner), (0.0, 0))
        held[int(owner)] = (before[0] + cores, before[1] + memory)
    return held


def _quota_cores(hierarchy: Hierarchy, cpu_dir: Path) -> float | None:
    """The CFS quota of a cgroup in cores; None without one."""
    if hierarchy.version == 2:
        quota, period = (cpu_dir / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    quota = int((cpu_dir / "cpu.cfs_quota_us").read_text())
    return None if quota < 0 else quota / int((cpu_dir / "cpu.cfs_period_us").read_text())


def _memory_limit(hierarchy: Hierarchy, memory_dir: Path) -> int:
    """A cgroup's memory limit in bytes; 0 without one."""
    if hierarchy.version == 2:
        limit = (memory_dir / "memory.max").read_text().strip()
        return 0 if limit == "max" else int(limit)
    limit = int((memory_dir / "memory.limit_in_bytes").read_text())
    return 0 if limit >= 2**62 else limit  # v1's "no limit"


def _mounts(path: Path) -> list[tuple[Path, str, str, str]]:
    result = []
    for line in _read(path, "").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            result.append((Path(fields[4]), fields[3], tail[0], tail[2] + "," + fields[5]))
    return result


def _membership(path: Path) -> dict[str, str]:
    members = {}
    for line in _read(path, "").splitlines():
        _, controllers, cgroup_path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            members[controller] = cgroup_path
    return members


def _join(mount_point: Path, root: str, cgroup_path: str) -> Path:
    relative = (
        cgroup_path[len(root) :] if cgroup_path.startswith(root) and root != "/" else cgroup_path
    )
    return mount_point / relative.lstrip("/")


def _read(path: Path, default: str | None = None) -> str:
    try:
        return path.read_text()
    except OSError:
        if default is None:
            raise
        return default


class NodeCgroup:
    """The cgroup(s) of one node, in either version."""

    def __init__(self, hierarchy: Hierarchy, relative: Path) -> None:
        self.version = hierarchy.version
        self.dirs = {c: base / relative for c, base in hierarchy.bases.items()}

    def create(self) -> None:
        for path in set(self.dirs.values()):
            path.mkdir(parents=True, exist_ok=True)

    @property
    def procs_files(self) -> list[Path]:
        return sorted({d / "cgroup.procs" for d in self.dirs.values()})

    def _dir(self, controller: str) -> Path:
        return self.dirs["unified"] if self.version == 2 else self.dirs[controller]

    def set_cpu(self, cores: float, burst: bool = False) -> None:
        """A CFS quota of ``cores``; with ``burst``, the node may also spend quota it left
        unused in earlier periods, up to one period's worth (``cpu.cfs_burst_us``, Linux
        5.14+; ignored where the kernel has none): its average stays within ``cores``."""
        quota = max(MIN_QUOTA_US, round(cores * CFS_PERIOD_US))
        cpu = self._dir("cpu")
        burst_file = cpu / ("cpu.max.burst" if self.version == 2 else "cpu.cfs_burst_us")
        has_burst = burst_file.exists()
        if has_burst:  # the kernel refuses a quota below the burst: shrink the burst first
            burst_file.write_text("0")
        if self.version == 2:
            (cpu / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
        else:
            (cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (cpu / "cpu.cfs_quota_us").write_text(str(quota))
        if has_burst and burst:
            burst_file.write_text(str(quota))

    def set_memory(self, limit_bytes: int) -> None:
        """Raises OSError (EBUSY) if the cgroup cannot be shrunk below what it uses."""
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        (self._dir("memory") / name).write_text(str(int(limit_bytes)))

    def cpu_seconds(self) -> float:
        if self.version == 2:
            stat = _keyed(_read(self._dir("cpu") / "cpu.stat"))
            return stat.get("usage_usec", 0) / 1e6
        return int(_read(self._dir("cpuacct") / "cpuacct.usage")) / 1e9

    def memory_bytes(self) -> int:
        """Working set: usage less inactive file cache (what docker and kubelet report)."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        usage = int(_read(self._dir("memory") / name))
        stat = _keyed(_read(self._dir("memory") / "memory.stat", ""))
        inactive = stat.get("inactive_file", stat.get("total_inactive_file", 0))
        return max(0, usage - inactive)

    def oom_kills(self) -> int:
        if self.version == 2:
            return _keyed(_read(self._dir("memory") / "memory.events", "")).get("oom_kill", 0)
        return _keyed(_read(self._dir("memory") / "memory.oom_control", "")).get("oom_kill", 0)

    def pids(self) -> list[int]:
        found = set()
        for path in self.procs_files:
            found |= {int(p) for p in _read(path, "").split()}
        return sorted(found)

    def remove(self) -> None:
        for path in set(self.dirs.values()):
            _rmdir(path)


def _rmdir(path: Path, attempts: int = 50, wait_s: float = 0.05) -> None:
    """Delete a cgroup directory; the kernel refuses (EBUSY) while a process, even a zombie,
    is inside, so retry briefly while the last one is reaped."""
    for attempt in range(attempts):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or attempt == attempts - 1:
                raise
            time.sleep(wait_s)


def _keyed(text: str) -> dict[str, int]:
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values


class JobCgroups:
    """All cgroups of one job: ``rightsize/<master pid>-<token>/<node>`` in each hierarchy."""

    def __init__(self, hierarchy: Hierarchy, token: str) -> None:
        self.hierarchy = hierarchy
        self.relative = Path("rightsize") / f"{os.getpid()}-{token}"
        self.job = NodeCgroup(hierarchy, self.relative)

    def prepare(self) -> None:
        """Create the job's directory (v2: and enable cpu and memory for its children).

        Raises:
            CgroupUnavailable: no permission, or a v2 parent that cannot delegate.
        """
        try:
            sweep_stale(self.hierarchy)
            self.job.create()
            if self.hierarchy.version == 2:
                for path in (self.job.dirs["unified"].parent, self.job.dirs["unified"]):
                    (path / "cgroup.subtree_control").write_text("+cpu +memory")
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create cgroups: {exc.strerror or exc}") from None

    def node(self, name: str) -> NodeCgroup:
        cgroup = NodeCgroup(self.hierarchy, self.relative / name)
        cgroup.create()
        return cgroup

    def remove(self) -> None:
        self.job.remove()
        for base in set(self.hierarchy.bases.values()):
            try:  # the shared parent goes too once no job uses it
                (base / "rightsize").rmdir()
            except OSError:
                pass


def sweep_stale(hierarchy: Hierarchy) -> None:
    """Remove job directories whose master is dead (left by a master that was killed)."""
    for base in set(hierarchy.bases.values()):
        root = base / "rightsize"
        for job_dir in root.glob("*-*") if root.is_dir() else []:
            owner = job_dir.name.split("-", 1)[0]
            if owner.isdigit() and not pid_alive(int(owner)):
                for node_dir in (d for d in job_dir.iterdir() if d.is_dir()):
                    _kill_all(node_dir)
                    _rmdir(node_dir)
                _rmdir(job_dir)



def _kill_all(cgroup_dir: Path) -> None:
    for pid in _read(cgroup_dir / "cgroup.procs", "").split():
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass
