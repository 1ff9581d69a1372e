"""The device a workload is profiled on: resolving ``cpu``/``cuda``, describing it, and its memory.

On a GPU the memory capacity is the device's total memory. On a CPU it is what
this process may still use: the cgroup limit (v1 ``memory.limit_in_bytes`` or v2
``memory.max``) or the machine's available memory, whichever is smaller, minus a
headroom for the interpreter and libraries that a GPU's memory would not hold.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from rightsize.core.errors import ResourceError
from rightsize.core.units import format_bytes
from rightsize.profiling.peaks import measure_peaks
from rightsize.profiling.profile import DeviceInfo

CPU_HEADROOM_BYTES = 1 * 2**30  # kept free for Python, torch's libraries and the OS
#: Memory a local process with torch loaded holds before its own tensors (a probe's rank).
PROCESS_BYTES = 300 * 2**20
#: Local ranks per CPU a probe may start: past this it times the scheduler, not the link
#: (the default probe runs up to 4 ranks on 2 cores).
RANKS_PER_CPU = 8


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:N``; asking for CUDA without a GPU is a user error."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ResourceError(f"unknown device {name!r}; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ResourceError(
            "device cuda was asked for but no CUDA GPU is available; use --device cpu"
        )
    if device.type not in ("cpu", "cuda"):
        raise ResourceError(f"device {name!r} is not supported; use cpu or cuda")
    return device


def device_memory_bytes(device: torch.device) -> int:
    """Memory the device offers a workload: a GPU's total, or what this process may use."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return cpu_memory_capacity()


def check_memory_limit(limit_bytes: int, device: torch.device, flag: str) -> int:
    """A ``--memory-limit`` must be above zero and within the device's memory: zero would be
    read as "no limit", and a limit beyond the memory there is lets a search allocate until
    the machine swaps or the kernel kills it.

    Raises:
        ResourceError: naming ``flag``, the value and the device's memory.
    """
    capacity = device_memory_bytes(device)
    if not 0 < limit_bytes <= capacity:
        raise ResourceError(
            f"{flag} {format_bytes(limit_bytes)}: must be above 0 and at most the "
            f"{format_bytes(capacity)} {device} has free; omit it to use all of that"
        )
    return limit_bytes


def check_local_ranks(world: int, buffer_bytes: int) -> None:
    """Refuse a probe of ``world`` local processes, each holding ``buffer_bytes`` of tensors,
    that this machine cannot run: it would fork until memory runs out.

    Raises:
        ResourceError: naming the world size and the limit it broke.
    """
    cpus = len(os.sched_getaffinity(0))
    free = cpu_memory_capacity()
    per_rank = PROCESS_BYTES + buffer_bytes
    if world > RANKS_PER_CPU * cpus:
        raise ResourceError(
            f"world size {world} (--world-sizes): this machine runs at most "
            f"{RANKS_PER_CPU * cpus} local ranks ({RANKS_PER_CPU} per CPU on its {cpus} CPUs); "
            "probe larger worlds on a larger machine"
        )
    if world * per_rank > free:
        raise ResourceError(
            f"world size {world} (--world-sizes): {world} ranks of {format_bytes(per_rank)} "
            f"each (a process and its buffers, --max-size) need more than the "
            f"{format_bytes(free)} this machine has free; lower either"
        )


def describe_device(device: torch.device) -> DeviceInfo:
    """Name, parallelism, memory, and the measured peak rates of ``device``."""
    peaks = measure_peaks(device)
    rates = {"peak_flops_per_s": peaks.flops_per_s, "peak_mem_bytes_per_s": peaks.mem_bytes_per_s}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return DeviceInfo(
            kind="cuda", name=props.name, threads=props.multi_processor_count,
            memory_bytes=device_memory_bytes(device), torch_version=torch.__version__, **rates,
        )  # fmt: skip
    return DeviceInfo(
        kind="cpu", name=cpu_model(), threads=torch.get_num_threads(),
        memory_bytes=cpu_memory_capacity(), torch_version=torch.__version__, **rates,
    )  # fmt: skip


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return os.uname().machine


def cpu_memory_capacity() -> int:
    """Bytes this process could use for tensors on the CPU (see module docstring)."""
    available = meminfo("MemAvailable") or meminfo("MemTotal") or 0
    limit = _cgroup_memory_limit()
    if limit is not None:
        available = min(available, limit - _cgroup_memory_usage())
    return max(0, available - CPU_HEADROOM_BYTES)


def meminfo(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup directory for ``controller`` (v1), or its v2 unified one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return Path("/sys/fs/cgroup", controller) / path.lstrip("/")
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / path.lstrip("/")
    return None


def _cgroup_memory_limit() -> int | None:
    group = _own_cgroup("memory")
    if group is None:
        return None
    limit = _read_int(group / "memory.limit_in_bytes") or _read_int(group / "memory.max")
    # v1 reports "no limit" as a huge page-aligned number
    return limit if limit and limit < 2**60 else None


def _cgroup_memory_usage() -> int:
    group = _own_cgroup("memory")
    if group is None:
        return 0
    return _read_int(group / "memory.usage_in_bytes") or _read_int(group / "memory.current") or 0
