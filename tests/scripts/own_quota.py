"""Writes the CPU quota (cores) of this rank's cgroup and of the directory above it (the
job's) to OUT.RANK.json, read from the kernel (cgroup v1 or v2), after meeting the group."""

import json
import sys
from pathlib import Path

import torch.distributed as dist


def quota_cores(directory: Path) -> float | None:
    if (directory / "cpu.max").exists():
        quota, period = (directory / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    quota = int((directory / "cpu.cfs_quota_us").read_text())
    return None if quota < 0 else quota / int((directory / "cpu.cfs_period_us").read_text())


def own_cpu_cgroup() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") or controllers == "":
            for mount in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup"):
                if (Path(mount + path) / "cgroup.procs").exists():
                    return Path(mount + path)
    raise SystemExit("no cpu cgroup found")


dist.init_process_group("gloo")
dist.barrier()
rank_dir = own_cpu_cgroup()
with open(f"{sys.argv[1]}.{dist.get_rank()}.json", "w") as out:
    json.dump({"rank": quota_cores(rank_dir), "job": quota_cores(rank_dir.parent)}, out)
dist.barrier()
dist.destroy_process_group()
