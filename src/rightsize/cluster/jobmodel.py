"""A simulated parameter-server training job: its speed and per-node load for a given shape.

This is the performance model behind the simulator (``cluster.simulator``),
built on DLRover's per-worker step time (§4.1, eq. 1),
``t_step = t_IO + W_compute / min(w_i, ŵ) + W_update / min(s, ŝ)``, with two
changes for asynchronous training, both documented choices of ours:

- moving parameters and gradients overlaps the computation (TensorFlow reads
  variables as the forward pass needs them and sends each gradient as
  backprop produces it), so a worker's step takes
  ``max(t_transfer, t_compute)``. With the plain sum every worker on a 1-Gbps
  link would idle a fixed share of each step at any size, and NEARCHUS could
  never see ``e_job ≥ 0.95`` on its cluster A, which it does;
- a worker does not wait for the PS to apply its update: the PS's CPU caps
  the job's step rate when it is saturated (DLRover eq. 4, ``N_w·ŝ < s_total``)
  — NEARCHUS's PSC bottleneck — rather than adding latency to every step.

The bottlenecks NEARCHUS measures (§III-B) are explicit:

- **MU bottleneck**: a node uses at most ``mu_cores`` of its allocation, the
  level at which one TensorFlow process stagnates on a server of that size
  (NEARCHUS Fig. 3: 16, 21 and 37 vCPU on 20-, 32- and 64-core servers).
- **Worker link**: each asynchronous step pulls the parameters and pushes the
  gradients over the worker's link (DLRover's ``t_IO``); the link is full
  duplex, so the ``P`` bytes in and the ``P`` bytes out overlap and take
  ``P / link`` — as a PS link is modelled, so that a PS's link and its workers'
  saturate at different rates and adding a PS relieves a PSN bottleneck
  (NEARCHUS §III-B, Fig. 5).
- **Shared server links**: nodes are spread evenly over the cluster's ``S``
  servers (Kubernetes spreads pods; NEARCHUS Table I: 9 servers for A and B),
  and the nodes on one server share its link equally, so with ``n`` nodes
  training each gets ``link · min(1, S / n)``. :meth:`JobModel.evaluate`
  counts one job's nodes alone (the job as if alone on the cluster);
  :meth:`JobModel.evaluate_shared` counts every job's, which the simulator
  passes when its ``link_sharing`` is ``"cluster"``. An equal share is the
  fluid limit of even spreading; it ignores which pods a server hosts (a job's
  PS and workers on one server talk without the link, NEARCHUS §III-B's
  SameNode) and that a light flow leaves bandwidth to heavy ones.
- **PS compute (PSC)**: every worker step makes each PS apply its share of the
  update; a PS whose usable cores cannot keep up caps the job's step rate.
- **PS network (PSN)**: each PS link carries its share of every step's
  parameters out and gradients in; a full link caps the step rate.
- **Uneven partitions (hot PS)**: tensors are placed on PS nodes greedily by
  size, largest first, on the least-loaded PS (TensorFlow's
  ``GreedyLoadBalancingStrategy``), so a model with a few huge tensors leaves
  one PS hot however many are added (DLRover Fig. 6).

When a PS caps the rate, every worker slows by the same factor and waits with
its CPU idle — which is exactly what NEARCHUS's efficiency ``e_job`` and its
PSN check observe. CPU used is proportional to steps done (NEARCHUS Fig. 2:
speed is linear in CPU utilization). Measurement noise, warm-up and restart
costs belong to the simulator, not here: this model is deterministic.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from functools import lru_cache

from rightsize.core.errors import SpecError
from rightsize.core.frozen import remembered_property
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole

# NEARCHUS §III-B, Fig. 3: where one worker's CPU use stagnates, by server size.
MU_CORES_BY_SERVER = ((20, 16.0), (32, 21.0), (64, 37.0))
PS_BASE_MEMORY_BYTES = 256 * 2**20  # a PS process before it holds parameters (our estimate)
CACHE_SHAPES = 4096  # performances remembered per job model
PS_MEMORY_PER_PARAM_BYTE = 3  # a PS holds parameters, an optimizer slot and a gradient buffer


def mu_cores(server_cores: float) -> float:
    """The MU bottleneck on a server of ``server_cores``, interpolated from NEARCHUS Fig. 3.

    Between the measured server sizes the cap is interpolated linearly; outside
    them it keeps the nearest measured fraction of the server.
    """
    sizes = [size for size, _ in MU_CORES_BY_SERVER]
    caps = [cap for _, cap in MU_CORES_BY_SERVER]
    if server_cores <= sizes[0]:
        return server_cores * caps[0] / sizes[0]
    if server_cores >= sizes[-1]:
        return server_cores * caps[-1] / sizes[-1]
    i = bisect.bisect_right(sizes, server_cores) - 1
    frac = (server_cores - sizes[i]) / (sizes[i + 1] - sizes[i])
    return caps[i] + frac * (caps[i + 1] - caps[i])


@dataclass(frozen=True)
class SimModel:
    """What the simulator needs to know about one model's training.

    Attributes:
        name: the model's name in traces (``resnet50``).
        param_bytes: ``P``, bytes of all parameters (fp32).
        tensor_bytes: sizes of the parameter tensors, largest first, for PS placement.
        compute_core_s_per_sample: one core's seconds of forward + backward per sample.
        batch_size: samples per worker step.
        update_core_s: one core's seconds for a PS to apply a whole step's update.
        worker_memory_bytes: memory one worker needs (model, optimizer, activations).
        source: where the numbers come from.
        ps_base_memory_bytes: memory a PS needs before it holds parameters.
        ps_memory_per_param_byte: memory a PS needs per byte of parameters it holds.
    """

    name: str
    param_bytes: int
    tensor_bytes: tuple[int, ...]
    compute_core_s_per_sample: float
    batch_size: int
    update_core_s: float
    worker_memory_bytes: int
    source: str = ""
    ps_base_memory_bytes: int = PS_BASE_MEMORY_BYTES
    ps_memory_per_param_byte: float = PS_MEMORY_PER_PARAM_BYTE

    @property
    def step_core_s(self) -> float:
        """``W_compute``: one core's seconds of compute for one worker step."""
        return self.compute_core_s_per_sample * self.batch_size

    def ps_memory_bytes(self, share: float) -> int:
        """Memory a PS holding ``share`` of the parameters needs."""
        return int(self.ps_memory_per_param_byte * share * self.param_bytes) + (
            self.ps_base_memory_bytes
        )


@dataclass(frozen=True)
class ClusterSpec:
    """A shared cluster as the simulator sees it: a CPU pool and the servers' size and links.

    Attributes:
        name: ``A``, ``B`` or a user's name.
        cpu_cores: vCPUs jobs may be given in all.
        memory_bytes: memory jobs may be given in all.
        server_cores: cores of one server — the largest node, and what sets the MU cap.
        server_memory_bytes: memory of one server — the largest node's memory.
        link_bytes_per_s: each server's network link, per direction.
        description: where the numbers come from.
        servers: how many servers the pool spans (0: a link per node, however many).
    """

    name: str
    cpu_cores: float
    memory_bytes: int
    server_cores: int
    server_memory_bytes: int
    link_bytes_per_s: float
    description: str = ""
    servers: int = 0

    # Cached (a spec is frozen): the simulator hands the node limit to every decision.
    @remembered_property
    def capacity(self) -> Resources:
        return Resources(self.cpu_cores, self.memory_bytes)

    @remembered_property
    def node_limit(self) -> Resources:
        return Resources(self.server_cores, self.server_memory_bytes)

    @property
    def mu_cores(self) -> float:
        return mu_cores(self.server_cores)


@dataclass(frozen=True)
class NodeLoad:
    """One node's true load under the model (before measurement noise)."""

    name: str
    role: NodeRole
    cpu_allocated_cores: float
    cpu_used_cores: float
    net_bytes_per_s: float  # each direction: pulls out = pushes in for a PS, and vice versa
    steps_per_s: float
    memory_needed_bytes: int
    memory_allocated_bytes: int

    @property
    def oom(self) -> bool:
        """True if the node was given memory and not enough of it."""
        return 0 < self.memory_allocated_bytes < self.memory_needed_bytes


@dataclass(frozen=True)
class Performance:
    """The job's true speed under one shape, what limits it, and every node's load."""

    steps_per_s: float
    samples_per_s: float
    bottleneck: str  # "workers", "ps-compute" or "ps-network"
    nodes: tuple[NodeLoad, ...]

    def __hash__(self) -> int:
        # The hash dataclass would compute, but remembered: the simulator looks each job's
        # performance up (its sample template) at every restart, and hashing every node's
        # load each time cost more than the lookup.
        return self._hash

    @remembered_property
    def _hash(self) -> int:
        return hash((self.steps_per_s, self.samples_per_s, self.bottleneck, self.nodes))

    @remembered_property  # the simulator sums it over the running jobs at every change
    def cpu_used_cores(self) -> float:
        return sum(n.cpu_used_cores for n in self.nodes)

    @remembered_property  # asked twice at every (re)start
    def oom_nodes(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes if n.oom)


@lru_cache(maxsize=4096)
def partition_shares(tensor_bytes: tuple[int, ...], n_ps: int) -> tuple[float, ...]:
    """Fraction of the parameters each of ``n_ps`` PS nodes holds.

    Tensors go, largest first, to the PS holding the fewest bytes so far
    (TensorFlow's greedy load balancing); ties go to the lowest index.
    """
    if n_ps < 1:
        raise ValueError("a parameter-server job needs at least one PS")
    loads = [(0, i) for i in range(n_ps)]
    held = [0] * n_ps
    for size in sorted(tensor_bytes, reverse=True):
        load, i = heapq.heappop(loads)
        held[i] += size
        heapq.heappush(loads, (load + size, i))
    total = sum(held)
    return tuple(h / total for h in held) if total else tuple(1 / n_ps for _ in held)


class JobModel:
    """The performance of one model on one cluster, as a function of the job's shape."""

    def __init__(self, model: SimModel, cluster: ClusterSpec) -> None:
        self.model = model
        self.cluster = cluster
        self._mu = cluster.mu_cores
        self._cache: dict[ClusterShape, Performance] = {}
        self._shared_cache: dict[tuple[ClusterShape, int], Performance] = {}
        self._link_limits: dict[ClusterShape, tuple[float, float]] = {}

    def speed(self, shape: ClusterShape) -> float:
        """True steps per second of ``shape`` (a cached :meth:`evaluate`)."""
        return self.evaluate(shape).steps_per_s

    def evaluate(self, shape: ClusterShape) -> Performance:
        """True speed and per-node load of ``shape`` (at least one PS and one worker).

        Raises:
            SpecError: the shape has no PS or no worker.
        """
        return remembered(self._cache, shape, lambda: self._evaluate(shape))

    def memory_floors(self, shape: ClusterShape) -> dict[str, int]:
        """The memory each node of ``shape`` must hold, below which it is OOM-killed
        (:attr:`NodeLoad.oom`): a PS's for its share of the parameters, a worker's
        ``worker_memory_bytes`` — the floors the simulator raises every plan to
        (:mod:`scaling.floors`). A node given no memory (a budget that does not limit
        memory, as NEARCHUS's CPU budgets) is not limited in this model and has no floor."""
        if not shape.node_extremes[1]:  # no node was given memory (remembered per shape)
            return {}
        model, floors = self.model, {}
        ps = shape.ps
        if ps:
            for node, share in zip(ps, partition_shares(model.tensor_bytes, len(ps)), strict=True):
                if node.resources.memory_bytes:
                    floors[node.name] = model.ps_memory_bytes(share)
        for node in shape.workers:
            if node.resources.memory_bytes:
                floors[node.name] = model.worker_memory_bytes
        return floors

    def evaluate_shared(self, shape: ClusterShape, sharing_nodes: int) -> Performance:
        """True speed and load of ``shape`` when ``sharing_nodes`` training nodes in all (this
        job's among them) spread over the cluster's servers and share their links.

        The same object as :meth:`evaluate` whenever the smaller link share changes nothing
        (fewer nodes than servers, or a job that neither its workers' transfers nor its PS
        links limit at that share); otherwise cached per (shape, ``sharing_nodes``).
        """
        perf = self.evaluate(shape)
        if sharing_nodes <= max(len(shape.nodes), self.cluster.servers):
            return perf
        link = self.node_link_bytes_per_s(sharing_nodes)
        if not self._link_binds(shape, perf, link):
            return perf
        key = (shape, sharing_nodes)
        return remembered(self._shared_cache, key, lambda: self._evaluate(shape, link))

    def _link_binds(self, shape: ClusterShape, perf: Performance, link: float) -> bool:
        """Whether ``shape`` at a node link of ``link`` is slower than ``perf`` (its speed on
        a larger link): a worker's transfer outlasts its compute, or a PS link caps the rate.
        The same float comparisons as :meth:`_evaluate` (a correctly rounded division is
        monotone, so the smallest quotient has the largest divisor): "no" means the identical
        result."""
        limits = remembered(self._link_limits, shape, lambda: self._limits(shape))
        fastest_compute_s, busiest_ps_bytes = limits
        return fastest_compute_s < self.model.param_bytes / link or (
            busiest_ps_bytes > 0 and link / busiest_ps_bytes < perf.steps_per_s
        )

    def _limits(self, shape: ClusterShape) -> tuple[float, float]:
        """The shortest worker compute time per step, and the most bytes one PS moves per step
        (``inf`` and 0 when there are none) — what :meth:`_link_binds` compares with a link."""
        model = self.model
        usable = [min(n.resources.cpu_cores, self._mu) for n in shape.workers]
        compute_s = min((model.step_core_s / u for u in usable if u > 0), default=float("inf"))
        shares = partition_shares(model.tensor_bytes, len(shape.ps))
        busiest = max((s * model.param_bytes for s in shares if s), default=0.0)
        return compute_s, busiest

    def _evaluate(self, shape: ClusterShape, link: float | None = None) -> Performance:
        ps_nodes, workers = shape.ps, shape.workers
        if not ps_nodes or not workers:
            raise SpecError(f"a simulated job needs a PS and a worker, got {shape.describe()}")
        model = self.model
        link = self.node_link_bytes_per_s(len(shape.nodes)) if link is None else link
        shares = partition_shares(model.tensor_bytes, len(ps_nodes))
        ps_usable = [min(n.resources.cpu_cores, self._mu) for n in ps_nodes]
        transfer_s = model.param_bytes / link  # full duplex: pull and push overlap
        rates = [self._worker_rate(n.resources.cpu_cores, transfer_s) for n in workers]
        wanted = sum(rates)
        caps = {"workers": wanted}
        caps["ps-compute"] = min(
            (u / (s * model.update_core_s) if s * model.update_core_s else float("inf"))
            for s, u in zip(shares, ps_usable, strict=True)
        )
        caps["ps-network"] = min(
            (link / (s * model.param_bytes) if s else float("inf")) for s in shares
        )
        bottleneck = min(caps, key=lambda k: caps[k])
        steps = caps[bottleneck]
        scale = steps / wanted if wanted else 0.0
        nodes = [self._ps_load(n, s, steps) for n, s in zip(ps_nodes, shares, strict=True)] + [
            self._worker_load(n, r * scale) for n, r in zip(workers, rates, strict=True)
        ]
        by_name = {n.name: n for n in nodes}
        ordered = tuple(by_name[n.name] for n in shape.nodes)
        return Performance(steps, steps * model.batch_size, bottleneck, ordered)

    def node_link_bytes_per_s(self, nodes: int) -> float:
        """One node's share of its server's link when ``nodes`` nodes spread over the servers."""
        servers, link = self.cluster.servers, self.cluster.link_bytes_per_s
        return link * min(1.0, servers / nodes) if servers and nodes else link

    def _worker_rate(self, cores: float, transfer_s: float) -> float:
        usable = min(cores, self._mu)
        if usable <= 0:
            return 0.0
        return 1.0 / max(self.model.step_core_s / usable, transfer_s)

    def _ps_load(self, node, share: float, steps: float) -> NodeLoad:
        model = self.model
        memory = model.ps_memory_bytes(share)
        return NodeLoad(
            node.name,
            NodeRole.PS,
            node.resources.cpu_cores,
            steps * share * model.update_core_s,
            steps * share * model.param_bytes,
            steps if share else 0.0,
            memory,
            node.resources.memory_bytes,
        )

    def _worker_load(self, node, rate: float) -> NodeLoad:
        return NodeLoad(
            node.name,
            NodeRole.WORKER,
            node.resources.cpu_cores,
            rate * self.model.step_core_s,
            rate * self.model.param_bytes,
            rate,
            self.model.worker_memory_bytes,
            node.resources.memory_bytes,
        )


def remembered(cache: dict, key, compute):
    """``cache[key]``, computed once by ``compute()``; a full cache (``CACHE_SHAPES``) starts
    over. One lookup on a hit: comparing equal shapes (or performances) is not free."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= CACHE_SHAPES:
            cache.clear()
        value = cache[key] = compute()
    return value
