"""Parameter-server throughput: DLRover's eq. 1 with the PS network cap FC2's Scala-Opt uses.

DLRover §4.1 models one asynchronous worker's step as
``t_IO + W_compute / (r·min(w_i, ŵ)) + W_update / (r·min(s_total, ŝ))``: reading
and moving data, computing gradients on the cores the worker can use, and the
parameter servers applying the update on theirs; the job's throughput is the
sum over workers, ``R = Σ B / t_step,i`` (eq. 1). Two caps bound the sum:

- PS compute: ``N_w`` workers send ``N_w`` updates per step-time, which the PS
  cores must absorb (DLRover eq. 4, ``N_w·ŝ < s_total``);
- PS network: every step moves the gradients in and the parameters out, so the
  job cannot exceed ``p · B_ps / (2 · model bytes)`` steps per second, where
  ``B_ps`` is the PS bandwidth and ``p`` the headroom (FC2 §5.2.4, p = 0.95).

The bandwidth one worker puts on the PS, ``b_t = 2 · model bytes · steps/s``,
is what FC2's Scala-Opt divides the PS capacity by.

That model scales linearly until a cap, and it misses what saturates real PS
clusters (issue 18): the PS spends CPU on every byte it receives and sends
(deserialising, copying, the socket), not only on the update, and a link
carries less than its line rate. :func:`ps_throughput_queueing` adds both and
replaces the hard caps by exact mean-value analysis of the closed system real
PS training is: ``n`` workers each compute for ``Z`` seconds (the delay), then
queue at the PS's CPU (service demand ``D_cpu = (update + bytes · cpu_per_byte)
/ cores``) and its link (``D_net = bytes / (link · efficiency)``). Throughput
bends smoothly towards ``1 / max(D)`` as workers are added, as measured curves
do (benchmarks/ps/ps_scaling.py). One worker's step is DLRover's eq. 1 with the
transfer timed over the worker's link and then the PS's. Both models stay
selectable (:class:`PSModel`).

Co-located nodes share their host's CPU (``PSSpec.host_cores``, issue 18 item 4): on
one 2-core host with a 1-core PS and six 1/6-core workers, the PS never used more than
half a core, and benchmarks/ps/ps_ceiling.py found why: not its one serving thread (idle a
third of the time, never throttled) but the host — every process runnable and waiting
for a CPU (the PS 36% of its time, each worker 49%). With ``host_cores`` set, the
queueing model adds the host's CPU as a station every step queues at, with demand
``(PS CPU per step + the co-located nodes' CPU per step) / host_cores``, and eq. 1 a
cap ``host_cores`` over the same CPU per step. Unset (infinite), both are as before.

A worker on a CPU quota (``WorkerSpec.cores``, a cgroup's share of a core) cannot step faster
than its quota refills: its CPU per step over its cores bounds its step from below. On that
host a 1/6-core Wide & Deep worker spends 24 ms of CPU per step alone and 27 ms with five
others (benchmarks/ps/ps_ceiling.py: contended caches and the scheduler), so its CPU per step
grows with the workers beside it (``cpu_growth_s`` each). While it waits for the PS its quota
refills, so that wait hides under the bound: a worker's step is the larger of its quota bound
and its unthrottled step (its own time plus what it queues for), not their sum — at one worker
on a 0.25-core PS the measured step (128 ms) is below the sum (144 + 76 ms). Both models take
the bound (the queueing model inside its mean-value iteration, eq. 1 as a cap), and, on a
shared host, the workers' CPU per step as part of the host's demand. Unset (infinite cores, 0
CPU), both are as before.

A worker that pushes a step's gradients while it computes the next (``WorkerSpec.overlap``,
``rightsize run``'s default ``runtime.overlap``) waits at the PS only for its pull: the
parameters coming back and the PS's CPU serving them. The push's transfer and the update still
take the link's and the PS's time — the stations' utilisation counts them, and no station
works past 100% (:func:`at_most_saturated`) — but not the worker's. The queueing model takes
both; DLRover's eq. 1 keeps its serial step. Measured on a shaped kernel link
(benchmarks/ps/ps_link.py), a TCP link at an Ethernet MTU carries the model's bytes at 0.95 of its
line rate (:data:`PS_NETWORK_EFFICIENCY`): a segment's 1448 bytes of payload take 1514 on the
wire.

A framework's RPC layer can move fewer bytes per second than its link and its cores would allow:
TensorFlow 1.x's gRPC PS tops out at a few hundred MB/s per PS process whatever its cores
(``PSSpec.transfer_bytes_per_s``; perf/ps_profiles.py names where each framework's figure comes
from). Both models take it as one more station every step's bytes pass (``ps-transfer``): the
queueing model queues there, eq. 1 takes it as a cap and in the transfer time. Unset (infinite),
both are as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

FC2_HEADROOM = 0.95  # p in FC2's Scala-Opt: keep the PS link below 95% (FC2 §8.2 footnote 11)
#: CPU-seconds rightsize's own PS spends per byte pulled or pushed over TCP, fitted on this
#: machine's runtime (benchmarks/ps/ps_scaling.py; docs/benchmarks.md): ~1 ns/B.
PS_CPU_S_PER_BYTE = 1e-9
#: Goodput over line rate of a PS's TCP link at an Ethernet MTU, measured through this machine's
#: runtime on shaped links (benchmarks/ps/ps_link.py; docs/benchmarks.md "PS across a shaped
#: link"): 0.945-0.956 at saturation, 0.935-0.965 fitted held out.
PS_NETWORK_EFFICIENCY = 0.95


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: its compute time per step at its batch, and its own link.

    Attributes:
        batch: samples per step.
        compute_s: ``W_compute / (r·min(w, ŵ))`` — forward + backward on this worker.
        link_bytes_per_s: the worker's network bandwidth.
        io_s: data reading and preprocessing per step (0 for in-memory data).
        cores: the worker's CPU quota in cores (infinite: no quota, the default).
        cpu_s_per_step: CPU-seconds the worker spends per step when it runs alone.
        cpu_growth_s: what each co-located worker adds to ``cpu_s_per_step``.
        overlap: the worker pushes a step's gradients while it computes the next step
            (``rightsize run``'s ``runtime.overlap``): it waits for the pull only, and the
            push's transfer and the update run beside its compute (queueing model).
    """

    batch: int
    compute_s: float
    link_bytes_per_s: float
    io_s: float = 0.0
    cores: float = float("inf")
    cpu_s_per_step: float = 0.0
    cpu_growth_s: float = 0.0
    overlap: bool = False

    def __post_init__(self) -> None:
        if not self.cores > 0 or self.cpu_s_per_step < 0:
            raise ValueError(
                f"WorkerSpec: cores must be > 0 (got {self.cores}) and "
                f"cpu_s_per_step >= 0 (got {self.cpu_s_per_step})"
            )

    def cpu_s(self, workers: int) -> float:
        """CPU-seconds per step with ``workers`` workers on the host (this one included)."""
        return self.cpu_s_per_step + self.cpu_growth_s * (workers - 1)

    @property
    def bytes_waited_for(self) -> float:
        """The share of a step's bytes the worker waits for: all, or with ``overlap`` the pull's
        half (the push leaves while the next step computes)."""
        return 0.5 if self.overlap else 1.0

    def quota_step_s(self, workers: int) -> float:
        """The shortest step the worker's CPU quota allows (0 without a quota)."""
        return self.cpu_s(workers) / self.cores


@dataclass(frozen=True)
class PSSpec:
    """The parameter servers together.

    Attributes:
        count: number of PS nodes (parameters split evenly across them).
        update_core_s: CPU-seconds one step's update costs (``W_update / r``).
        cores: ``s_total``, CPU cores of all PS together.
        usable_cores: ``ŝ``, cores the update can actually use (MU bottleneck).
        link_bytes_per_s: network bandwidth of one PS node (``B_ps``).
        headroom: ``p``, the fraction of ``B_ps`` the workers may fill.
        cpu_s_per_byte: CPU-seconds the PS spends per byte pulled or pushed (queueing model).
        network_efficiency: goodput over line rate of the PS link (queueing model).
        host_cores: cores of the host the PS shares with co-located nodes, less what the
            OS and other processes take (infinite: a host of its own, the default).
        colocated_cpu_s_per_step: CPU-seconds the co-located workers and master spend per
            step on that host (benchmarks/ps/ps_ceiling.py measures both), beyond the workers'
            own ``WorkerSpec.cpu_s_per_step`` (which the host's demand adds where it is set).
        transfer_bytes_per_s: the most bytes per second one PS process's RPC layer moves,
            whatever its cores and link (infinite: no such ceiling, the default).
    """

    count: int
    update_core_s: float
    cores: float
    link_bytes_per_s: float
    usable_cores: float = float("inf")
    headroom: float = FC2_HEADROOM
    cpu_s_per_byte: float = 0.0
    network_efficiency: float = 1.0
    host_cores: float = float("inf")
    colocated_cpu_s_per_step: float = 0.0
    transfer_bytes_per_s: float = float("inf")

    def __post_init__(self) -> None:
        if not self.transfer_bytes_per_s > 0:
            raise ValueError(
                f"PSSpec: transfer_bytes_per_s must be > 0 (got {self.transfer_bytes_per_s})"
            )
        if not self.host_cores > 0 or self.colocated_cpu_s_per_step < 0:
            raise ValueError(
                f"PSSpec: host_cores must be > 0 (got {self.host_cores}) and "
                f"colocated_cpu_s_per_step >= 0 (got {self.colocated_cpu_s_per_step})"
            )

    def host_demand_s(self, model_bytes: int, worker_cpu_s: float = 0.0) -> float:
        """Seconds of the shared host's CPU one step takes (0 on a host of its own), given the
        CPU the stepping worker spends (``WorkerSpec.cpu_s``; 0 where unset)."""
        if self.host_cores == float("inf"):
            return 0.0
        ps_cpu = self.update_core_s + 2 * model_bytes * self.cpu_s_per_byte
        return (ps_cpu + self.colocated_cpu_s_per_step + worker_cpu_s) / self.host_cores

    @property
    def effective_cores(self) -> float:
        return min(self.cores, self.usable_cores)

    def transfer_s(self, moved_bytes: float) -> float:
        """Seconds the PS processes' RPC layer takes to move ``moved_bytes`` (0 without a
        ceiling)."""
        return moved_bytes / (self.count * self.transfer_bytes_per_s)


class PSModel(StrEnum):
    DLROVER = "dlrover"  # DLRover eq. 1 summed over workers, FC2's network cap (faithful)
    QUEUEING = "queueing"  # PS CPU per byte, link efficiency, mean-value analysis


@dataclass(frozen=True)
class PSThroughput:
    """Predicted throughput of a parameter-server job and what limits it."""

    steps_per_s: float
    samples_per_s: float
    worker_step_s: tuple[float, ...]
    bottleneck: str  # "workers", "worker-cpu", "ps-network", "ps-compute", "ps-transfer", "host-cpu"
    ps_bytes_per_s_per_worker: tuple[float, ...]  # FC2's b_t of each worker


def worker_step_time(worker: WorkerSpec, ps: PSSpec, model_bytes: int) -> float:
    """DLRover eq. 1's denominator for one worker: ``t_IO + t_compute + t_update``.

    ``t_IO`` includes pushing gradients and pulling parameters, ``2·model bytes``,
    over the slower of the worker's link, its share of the PS links and the PS's RPC ceiling.
    """
    transfer = 2 * model_bytes / min(worker.link_bytes_per_s, ps.count * ps.link_bytes_per_s,
                                     ps.count * ps.transfer_bytes_per_s)  # fmt: skip
    update = ps.update_core_s / min(ps.cores, ps.usable_cores)
    return worker.io_s + transfer + worker.compute_s + update


def ps_throughput(workers: Sequence[WorkerSpec], ps: PSSpec, model_bytes: int) -> PSThroughput:
    """The job's steps per second: DLRover's sum over workers, capped by the PS."""
    if not workers:
        raise ValueError("a parameter-server job needs at least one worker")
    n = len(workers)
    step_times = tuple(worker_step_time(w, ps, model_bytes) for w in workers)
    rates = [1 / t for t in step_times]
    host = ps.host_demand_s(model_bytes, mean_worker_cpu_s(workers))
    caps = {
        "workers": sum(rates),
        "worker-cpu": sum(
            1 / w.quota_step_s(n) if w.quota_step_s(n) else float("inf") for w in workers
        ),
        "ps-network": ps.headroom * ps.count * ps.link_bytes_per_s / (2 * model_bytes),
        "ps-transfer": ps.count * ps.transfer_bytes_per_s / (2 * model_bytes),
        "ps-compute": min(ps.cores, ps.usable_cores) / ps.update_core_s
        if ps.update_core_s
        else float("inf"),
        "host-cpu": 1 / host if host else float("inf"),
    }
    bottleneck = min(caps, key=caps.get)
    steps = caps[bottleneck]
    scale = steps / caps["workers"]  # every worker slows alike when the PS or a quota is the limit
    samples = sum(w.batch * r * scale for w, r in zip(workers, rates, strict=True))
    per_worker = tuple(2 * model_bytes * r * scale for r in rates)
    return PSThroughput(steps, samples, step_times, bottleneck, per_worker)


def ps_throughput_queueing(workers: Sequence[WorkerSpec], ps: PSSpec,
                           model_bytes: int) -> PSThroughput:  # fmt: skip
    """The job's steps per second by exact mean-value analysis (module docstring).

    Workers are taken as alike at their mean step (FC2 provisions one type); each step moves
    ``2 · model_bytes`` through the PS: gradients in, parameters out.
    """
    if not workers:
        raise ValueError("a parameter-server job needs at least one worker")
    moved = 2 * model_bytes
    think = [w.io_s + w.compute_s + moved * w.bytes_waited_for / w.link_bytes_per_s
             for w in workers]  # fmt: skip
    z = sum(think) / len(think)
    queue: dict[str, float] = {}
    steps, quota_bound = 0.0, False
    for k in range(1, len(workers) + 1):
        demands = station_demands(workers, ps, model_bytes, k)
        waits = station_waits(workers, ps, model_bytes, demands)
        response = {s: d * (1 + queue.get(s, 0.0)) for s, d in demands.items()}
        waiting = sum(w * (1 + queue.get(s, 0.0)) for s, w in waits.items())
        # a quota'd worker's wait for the PS and host hides under its quota bound (docstring)
        quota = sum(w.quota_step_s(k) for w in workers) / len(workers)
        cycle = max(quota, z + waiting)
        steps = at_most_saturated(k / cycle, demands)
        quota_bound = quota > z + waiting
        queue = {s: steps * r for s, r in response.items()}
    busiest = max(demands, key=demands.get)
    # the PS limits the job once it is busy most of the time; before that, the workers do
    if steps * demands[busiest] >= SATURATED:
        bottleneck = busiest
    else:
        bottleneck = "worker-cpu" if quota_bound else "workers"
    step_s = len(workers) / steps
    samples = steps * sum(w.batch for w in workers) / len(workers)
    per_worker = tuple(moved * steps / len(workers) for _ in workers)
    return PSThroughput(steps, samples, tuple(step_s for _ in workers), bottleneck, per_worker)


def overlap_share(workers: Sequence[WorkerSpec]) -> float:
    """The share of the workers that push while computing their next step."""
    return sum(w.overlap for w in workers) / len(workers)


def station_waits(workers: Sequence[WorkerSpec], ps: PSSpec, model_bytes: int,
                  demands: dict[str, float]) -> dict[str, float]:  # fmt: skip
    """The part of each station's demand a worker waits for: without overlap all of it; with
    it, the pull's bytes on the link (and through the PS's RPC layer) and the PS's CPU serving them — not the push's, nor the
    update, which the PS applies while the worker computes. The host's CPU is all waited for."""
    share = overlap_share(workers)
    if not share:
        return demands
    waited = sum(w.bytes_waited_for for w in workers) / len(workers)
    return {
        **demands,
        "ps-compute": (ps.update_core_s * (1 - share) + 2 * model_bytes * waited
                       * ps.cpu_s_per_byte) / ps.effective_cores,
        "ps-network": demands["ps-network"] * waited,
        "ps-transfer": demands["ps-transfer"] * waited,
    }  # fmt: skip


def at_most_saturated(steps: float, demands: dict[str, float]) -> float:
    """``steps`` capped where the busiest station is busy all the time: what the workers do
    not wait for (an overlapped push) or wait for hidden under a quota bound still takes the
    station's time. Exact MVA alone never passes the cap."""
    busiest = max(demands.values(), default=0.0)
    return min(steps, 1 / busiest) if busiest > 0 else steps


SATURATED = 0.8  # utilisation from which a PS resource is named the bottleneck


def mean_worker_cpu_s(workers: Sequence[WorkerSpec], active: int | None = None) -> float:
    """The CPU a step takes on its worker with ``active`` (default: all) of ``workers`` on the
    host (0 where unset)."""
    return sum(w.cpu_s(active or len(workers)) for w in workers) / len(workers)


def station_demands(workers: Sequence[WorkerSpec], ps: PSSpec, model_bytes: int,
                    active: int) -> dict[str, float]:  # fmt: skip
    """Seconds per step at each shared station with ``active`` workers running (the host's
    demand grows with them where the workers' CPU per step does)."""
    moved = 2 * model_bytes
    return {
        "ps-compute": (ps.update_core_s + moved * ps.cpu_s_per_byte) / ps.effective_cores,
        "ps-network": moved / (ps.count * ps.link_bytes_per_s * ps.network_efficiency),
        "ps-transfer": ps.transfer_s(moved),
        "host-cpu": ps.host_demand_s(model_bytes, mean_worker_cpu_s(workers, active)),
    }


def predict_ps(workers: Sequence[WorkerSpec], ps: PSSpec, model_bytes: int,
               model: PSModel = PSModel.QUEUEING) -> PSThroughput:  # fmt: skip
    """Throughput by the chosen model."""
    if model is PSModel.DLROVER:
        return ps_throughput(workers, ps, model_bytes)
    return ps_throughput_queueing(workers, ps, model_bytes)
