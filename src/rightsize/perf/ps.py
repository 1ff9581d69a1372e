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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FC2_HEADROOM = 0.95  # p in FC2's Scala-Opt: keep the PS link below 95% (FC2 §8.2 footnote 11)


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: its compute time per step at its batch, and its own link.

    Attributes:
        batch: samples per step.
        compute_s: ``W_compute / (r·min(w, ŵ))`` — forward + backward on this worker.
        link_bytes_per_s: the worker's network bandwidth.
        io_s: data reading and preprocessing per step (0 for in-memory data).
    """

    batch: int
    compute_s: float
    link_bytes_per_s: float
    io_s: float = 0.0


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
    """

    count: int
    update_core_s: float
    cores: float
    link_bytes_per_s: float
    usable_cores: float = float("inf")
    headroom: float = FC2_HEADROOM


@dataclass(frozen=True)
class PSThroughput:
    """Predicted throughput of a parameter-server job and what limits it."""

    steps_per_s: float
    samples_per_s: float
    worker_step_s: tuple[float, ...]
    bottleneck: str  # "workers", "ps-network" or "ps-compute"
    ps_bytes_per_s_per_worker: tuple[float, ...]  # FC2's b_t of each worker


def worker_step_time(worker: WorkerSpec, ps: PSSpec, model_bytes: int) -> float:
    """DLRover eq. 1's denominator for one worker: ``t_IO + t_compute + t_update``.

    ``t_IO`` includes pushing gradients and pulling parameters, ``2·model bytes``,
    over the slower of the worker's link and its share of the PS links.
    """
    transfer = 2 * model_bytes / min(worker.link_bytes_per_s, ps.count * ps.link_bytes_per_s)
    update = ps.update_core_s / min(ps.cores, ps.usable_cores)
    return worker.io_s + transfer + worker.compute_s + update


def ps_throughput(workers: Sequence[WorkerSpec], ps: PSSpec, model_bytes: int) -> PSThroughput:
    """The job's steps per second: DLRover's sum over workers, capped by the PS."""
    if not workers:
        raise ValueError("a parameter-server job needs at least one worker")
    step_times = tuple(worker_step_time(w, ps, model_bytes) for w in workers)
    rates = [1 / t for t in step_times]
    caps = {
        "workers": sum(rates),
        "ps-network": ps.headroom * ps.count * ps.link_bytes_per_s / (2 * model_bytes),
        "ps-compute": min(ps.cores, ps.usable_cores) / ps.update_core_s
        if ps.update_core_s
        else float("inf"),
    }
    bottleneck = min(caps, key=caps.get)
    steps = caps[bottleneck]
    scale = steps / caps["workers"]  # every worker slows alike when the PS is the limit
    samples = sum(w.batch * r * scale for w, r in zip(workers, rates, strict=True))
    per_worker = tuple(2 * model_bytes * r * scale for r in rates)
    return PSThroughput(steps, samples, step_times, bottleneck, per_worker)
