"""The clusters of NEARCHUS's evaluation, and user-defined ones.

NEARCHUS §V uses **cluster A** — 100 vCPUs of 20-core servers (2× Intel
E5-2660v3, 128 GB) on 1 Gbps Ethernet, resource-constrained — and **cluster B**
— 300 vCPUs of 64-core servers (2× Xeon 8375C, 256 GB) on 50 Gbps,
resource-abundant (Table I). Memory for jobs is the servers' memory per core
times the vCPUs. Both span 9 servers (Table I), whose links a job's nodes
share. ``parse_cluster`` also accepts ``cpu=200,net_gbps=10,server_cores=32``
for a cluster of your own (servers: the pool over the server size, rounded up,
unless ``servers=N`` is given).
"""

from __future__ import annotations

import math

from rightsize.cluster.jobmodel import ClusterSpec
from rightsize.core.errors import SpecError, unknown_name
from rightsize.core.limits import Bound
from rightsize.core.resources import Resources
from rightsize.core.units import parse_cpu, parse_memory

GB = 10**9
GBPS = 1e9 / 8  # bytes per second in one Gbit/s

CLUSTERS = {
    "A": ClusterSpec(
        "A", 100, 100 * 128 * GB // 20, 20, 128 * GB, 1 * GBPS,
        "NEARCHUS cluster A: 100 vCPU of 9 20-core servers, 1 Gbps (Table I, §V)", 9,
    ),
    "B": ClusterSpec(
        "B", 300, 300 * 256 * GB // 64, 64, 256 * GB, 50 * GBPS,
        "NEARCHUS cluster B: 300 vCPU of 9 64-core servers, 50 Gbps (Table I, §V)", 9,
    ),
}  # fmt: skip

#: A localhost "link" the simulated transfers never saturate: on one machine moving tensors
#: costs CPU, which the per-step core-seconds hold.
LOOPBACK_BYTES_PER_S = 1e12


def machine_cluster(budget: Resources) -> ClusterSpec:
    """This machine as the simulator's cluster: the budget's CPU and memory, one server of
    the budget's cores (the node limit), a link that never binds."""
    return ClusterSpec("this-machine", budget.cpu_cores, budget.memory_bytes, budget.cpu_cores,
                       budget.memory_bytes, LOOPBACK_BYTES_PER_S, "one machine")  # fmt: skip


_KEYS = ("cpu", "memory", "net_gbps", "server_cores", "server_memory", "servers")
#: A custom cluster's vCPUs: a million, far beyond the papers' clusters (NEARCHUS: 300), and
#: a bound on the simulator's per-core bookkeeping.
CLUSTER_CPU = Bound(0, 10**6, low_open=True)
#: A server link: at most 10 Tbit/s, beyond any NIC made.
NET_GBPS = Bound(0, 10**4, low_open=True)


def parse_cluster(text: str, flag: str = "--cluster") -> ClusterSpec:
    """``A``, ``B``, or ``cpu=N,net_gbps=G[,server_cores=C,memory=M,server_memory=M,servers=S]``.

    ``flag`` is what errors call the value (the service's form has fields, not flags: "").

    Raises:
        UnknownNameError: an unknown cluster name.
        SpecError: a malformed or impossible custom cluster.
    """
    if "=" not in text:
        if text.upper() not in CLUSTERS:
            raise unknown_name("cluster", text, CLUSTERS)
        return CLUSTERS[text.upper()]
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key.strip() not in _KEYS:
            raise unknown_name("cluster field", key.strip(), _KEYS)
        fields[key.strip()] = value.strip()
    for needed in ("cpu", "net_gbps"):
        if needed not in fields:
            raise SpecError(f"{_named(flag, repr(text))}: give {needed}=..., e.g. "
                            "cpu=200,net_gbps=10")  # fmt: skip
    return _custom(text, fields, flag)


def _named(flag: str, what: str) -> str:
    return f"{flag} {what}" if flag else what


def _custom(text: str, fields: dict[str, str], flag: str) -> ClusterSpec:
    cpu = CLUSTER_CPU.check(parse_cpu(fields["cpu"], _named(flag, "cpu")), _named(flag, "cpu"))
    server_cores = int(parse_cpu(fields.get("server_cores", "32"), "cluster server_cores"))
    try:
        gbps = float(fields["net_gbps"])
    except ValueError:
        raise SpecError(f"{_named(flag, 'net_gbps=' + repr(fields['net_gbps']))} must be a "
                        "number") from None  # fmt: skip
    NET_GBPS.check(gbps, _named(flag, "net_gbps"))
    memory = parse_memory(fields.get("memory", f"{int(cpu * 4)}Gi"), "cluster memory")
    server_memory = parse_memory(fields.get("server_memory", f"{server_cores * 4}Gi"))
    if cpu <= 0 or gbps <= 0 or server_cores < 1 or memory <= 0:
        raise SpecError(f"{_named(flag, repr(text))}: cpu, net_gbps, server_cores and memory "
                        "must be > 0")  # fmt: skip
    servers = fields.get("servers", str(math.ceil(cpu / server_cores)))
    if not servers.isdigit() or int(servers) < 1:
        raise SpecError(f"{_named(flag, 'servers=' + repr(servers))} must be a whole number >= 1")
    return ClusterSpec(
        "custom", cpu, memory, server_cores, server_memory, gbps * GBPS, text, int(servers)
    )
