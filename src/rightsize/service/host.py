"""What other rightsize jobs on this host hold: the service's capacity is the machine's
less what it does not run itself.

A standalone ``rightsize run`` (or ``rightsize torchrun``, or a second service) on the
same machine puts its nodes in cgroups of their own, with CPU quotas and memory limits the
kernel enforces; the service reads those from the kernel (runtime/backends/cgroups.py,
``held_by_masters``) every turn and admits and grows its own jobs only into what is left.
Without cgroups nothing is read (nothing is enforced either).
"""

from __future__ import annotations

from rightsize.core.processes import pid_alive
from rightsize.core.resources import Resources
from rightsize.runtime.backends.cgroups import CgroupUnavailable, detect, held_by_masters


def held_beside(own: set[int]) -> Resources:
    """The quotas and limits of every live rightsize master's nodes on this host but the
    masters in ``own`` (the service's runners)."""
    try:
        hierarchy = detect()
    except CgroupUnavailable:
        return Resources()
    cores, memory = 0.0, 0
    for pid, (pid_cores, pid_memory) in held_by_masters(hierarchy).items():
        if pid not in own and pid_alive(pid):
            cores, memory = cores + pid_cores, memory + pid_memory
    return Resources(cores, memory)
