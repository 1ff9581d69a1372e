"""What a framework's parameter server spends per step: a named, selectable PS cost profile.

The PS models (perf/ps.py) take a PS's costs as numbers: CPU per update, CPU per byte moved, the
link's efficiency. Those numbers belong to the framework that runs the PS, not to the model:

- ``rightsize``: this project's own PS runtime, measured on this machine (``PS_CPU_S_PER_BYTE``
  from benchmarks/ps/ps_scaling.py, ``PS_NETWORK_EFFICIENCY`` from benchmarks/ps/ps_link.py).
  It is what every plan used before profiles existed, and stays the default.
- ``tensorflow1-grpc``: TensorFlow 1.x's gRPC parameter server (``tf.train.replica_device_setter``,
  between-graph replication). Each variable is its own tensor on the wire: a worker's read of a
  variable is one ``RecvTensor`` RPC to the PS, and the PS's apply op fetches each gradient with
  another (TensorFlow's rendezvous: the receiving side asks). So a step costs the PS a fixed CPU
  per tensor, and its bytes pass through gRPC's per-process transfer path, which published
  measurements put at a few hundred MB/s whatever the cores (constants below, each with its
  source). Nothing here was fitted to a cluster this project checks against (CM-DARE's rows are
  reserved; benchmarks/data/measured/README.md).

A profile turns into a :class:`~rightsize.perf.ps.PSSpec` with :meth:`PSCostProfile.spec`; the
optimizer's own arithmetic (``update_core_s``) is the caller's, timed on the model's parameters,
as before. ``rightsize plan --strategy ps --ps-framework`` chooses one (:class:`PSFramework`);
a framework that pays per variable needs the model's tensor counts
(:attr:`PSCostProfile.per_variable`, profiling/tensor_counts.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from rightsize.perf.ps import FC2_HEADROOM, PS_CPU_S_PER_BYTE, PS_NETWORK_EFFICIENCY, PSSpec

#: Bytes/s one TensorFlow PS process moves through gRPC ``RecvTensor``: the median of the three
#: rates published after TensorFlow's gRPC upgrade in tensorflow/tensorflow#6116 (2017-08-09 and
#: 2017-08-14, yaroslavvb's local_distributed_benchmark, a worker adding a large tensor into a
#: variable on a PS process): 800 MB/s (one reporter, 10 GbE), 500 MB/s and 288 MB/s (another, three
#: machines). TF 1.10 (2018-08, what CM-DARE ran) postdates that upgrade. Before it the same
#: benchmark gave 100-200 MB/s (same thread), so the figure is the framework's, not the link's.
TF1_GRPC_BYTES_PER_S = 500e6
#: The published spread of that rate (slowest, fastest), for the sensitivity the check reports.
TF1_GRPC_BYTES_PER_S_RANGE = (288e6, 800e6)
#: CPU-seconds per tensor moved by one ``RecvTensor`` RPC, lower bound: TensorFlow's own
#: rpcbench (tensorflow/core/distributed_runtime/rpcbench_test.cc) as published in
#: tensorflow/tensorflow#7466 (2017-02-13): ``BM_ShardedProgram/30/5`` 20.62 ms against
#: ``/30/2`` 6.17 ms, three more stages of 30 nodes each receiving the 30 previous outputs
#: (871 cross-process 8-byte recvs a stage): (20.62 - 6.17) ms / 2613 = 5.5 µs a recv, with 60
#: server processes working in parallel on one host, so the CPU per RPC is at least this.
TF1_GRPC_CPU_S_PER_TENSOR = 5.5e-6
#: Upper bound of the same: the benchmark's dependent chain ``BM_ShardedProgram/1/60``
#: (5.010 ms) against ``/1/1`` (0.126 ms), 59 more hops in series: 83 µs a hop, the whole
#: latency of one RPC, which no CPU cost can exceed.
TF1_GRPC_CPU_S_PER_TENSOR_RANGE = (5.5e-6, 83e-6)


class PSFramework(StrEnum):
    """The framework whose PS a plan assumes (``plan --ps-framework``)."""

    RIGHTSIZE = "rightsize"  # this project's runtime (the default)
    TENSORFLOW1_GRPC = "tensorflow1-grpc"  # TensorFlow 1.x's gRPC PS, between-graph replication


#: Messages rightsize's PS handles per worker step: one pull and one push (runtime/psclient.py).
RIGHTSIZE_MESSAGES_PER_STEP = 2


@dataclass(frozen=True)
class PSCostProfile:
    """One framework's PS service costs.

    Attributes:
        name: the profile's name (``rightsize``, ``tensorflow1-grpc``).
        cpu_s_per_byte: PS CPU-seconds per byte pulled or pushed, spread over its cores.
        cpu_s_per_tensor: PS CPU-seconds per tensor moved (one RPC each), spread over its cores.
        transfer_bytes_per_s: the most bytes/s one PS process's RPC layer moves (infinite: none).
        network_efficiency: goodput over line rate of the PS's link.
        source: where the numbers come from, in words.
        per_variable: every variable is its own RPC, so a step's tensors are counted from
            the model (:func:`tf1_tensors_per_step`); otherwise one pull and one push message.
        summary: what a plan assuming this framework assumes, in one phrase.
    """

    name: str
    cpu_s_per_byte: float
    cpu_s_per_tensor: float
    transfer_bytes_per_s: float
    network_efficiency: float
    source: str
    per_variable: bool = False
    summary: str = ""

    def spec(self, *, update_core_s: float, cores: float, link_bytes_per_s: float,
             tensors_per_step: int, count: int = 1,
             headroom: float = FC2_HEADROOM) -> PSSpec:  # fmt: skip
        """The PS these costs make: the update's CPU plus this framework's per-tensor CPU per
        step, its per-byte CPU, its RPC ceiling and its link's efficiency."""
        if tensors_per_step < 0:
            raise ValueError(f"tensors_per_step must be >= 0 (got {tensors_per_step})")
        per_step = update_core_s + tensors_per_step * self.cpu_s_per_tensor
        return PSSpec(count=count, update_core_s=per_step, cores=cores,
                      link_bytes_per_s=link_bytes_per_s, headroom=headroom,
                      cpu_s_per_byte=self.cpu_s_per_byte,
                      network_efficiency=self.network_efficiency,
                      transfer_bytes_per_s=self.transfer_bytes_per_s)  # fmt: skip

    def tensors_per_step(self, trainable: int | None, state: int | None) -> int:
        """Tensors (RPCs) the PS serves per worker step, from the model's trainable and state
        tensor counts (read only by a ``per_variable`` framework, which needs them).

        Raises:
            ValueError: a ``per_variable`` framework and a count is None.
        """
        if not self.per_variable:
            return RIGHTSIZE_MESSAGES_PER_STEP
        if trainable is None or state is None:
            raise ValueError(f"the {self.name} PS costs per tensor: it needs the model's "
                             "trainable and state tensor counts")  # fmt: skip
        return tf1_tensors_per_step(trainable, state)

    def bounded(self, transfer_bytes_per_s: float, cpu_s_per_tensor: float) -> PSCostProfile:
        """The same framework at one end of its published spread."""
        return replace(self, name=f"{self.name}@{transfer_bytes_per_s / 1e6:.0f}MB/s,"
                                  f"{cpu_s_per_tensor * 1e6:.1f}us",
                       transfer_bytes_per_s=transfer_bytes_per_s,
                       cpu_s_per_tensor=cpu_s_per_tensor)  # fmt: skip


RIGHTSIZE = PSCostProfile(
    name="rightsize",
    cpu_s_per_byte=PS_CPU_S_PER_BYTE,
    cpu_s_per_tensor=0.0,  # one pull and one push message per PS a step (runtime/psclient.py)
    transfer_bytes_per_s=float("inf"),
    network_efficiency=PS_NETWORK_EFFICIENCY,
    source="measured on this machine's runtime (benchmarks/ps/ps_scaling.py, ps_link.py)",
    summary="this project's PS runtime, one pull and one push message a step, its CPU per "
    "byte measured here",
)

TENSORFLOW1_GRPC = PSCostProfile(
    name="tensorflow1-grpc",
    cpu_s_per_byte=0.0,  # gRPC's per-byte work is the transfer ceiling, not spread over cores
    cpu_s_per_tensor=TF1_GRPC_CPU_S_PER_TENSOR,
    transfer_bytes_per_s=TF1_GRPC_BYTES_PER_S,
    network_efficiency=PS_NETWORK_EFFICIENCY,  # TCP at an Ethernet MTU, as for any PS
    source="tensorflow/tensorflow#6116 (RecvTensor MB/s after the gRPC upgrade) and #7466 "
    "(rpcbench per-recv cost)",
    per_variable=True,
    summary="TensorFlow 1.x's gRPC PS, one RPC per variable and per gradient at "
    f"{TF1_GRPC_CPU_S_PER_TENSOR * 1e6:g} us of PS CPU each, at most "
    f"{TF1_GRPC_BYTES_PER_S / 1e6:.0f} MB/s through each PS process",
)

PROFILES = {PSFramework(p.name): p for p in (RIGHTSIZE, TENSORFLOW1_GRPC)}


def profile(name: str) -> PSCostProfile:
    """The profile of that name; a ValueError naming the known ones otherwise."""
    try:
        return PROFILES[PSFramework(name)]
    except ValueError:
        raise ValueError(
            f"unknown PS cost profile {name!r}; known: {', '.join(PROFILES)}"
        ) from None


def tf1_tensors_per_step(trainable: int, state_updates: int = 0) -> int:
    """Tensors a TensorFlow 1.x PS moves per worker step: every trainable variable read by the
    worker and its gradient fetched for the apply op, each assigned state variable (batch norm's
    moving mean and variance) pushed once, and the global step's increment."""
    return 2 * trainable + state_updates + 1
