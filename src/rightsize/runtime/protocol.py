"""Every message between the master, parameter servers, workers and ranks: one typed protocol.

Nodes ask, the master answers at once (its commands travel in the answers, so
it never blocks on a node). A request is a :class:`Message`: who sends it
(:class:`Sender`: name, pid, the cluster generation it works in, its counters)
and a body — :class:`Register`, :class:`Heartbeat`, :class:`LeaseRequest` or
:class:`Progress`. The answer is a :class:`Reply`: commands in order, and where
they apply the node's configuration, a cluster to switch to, a lease, or
whether a progress report was accepted. Workers and parameter servers speak
:class:`Pull` / :class:`Push` to each other, each tagged with the sender's
generation, and are answered :class:`Pulled`, :class:`Pushed` or :class:`Refused`
(a server on another generation answers ``stale`` and applies nothing).

Generations are explicit about absence: a worker that has not been given a
cluster yet works in generation ``None`` (:data:`NO_CLUSTER`), not in some
number that one side reads as "current" and the other as "none" (issue 16:
a worker registering during a restore was told ``-1`` while its context took
the master's generation, so it trained against no parameter server at all).

On the wire every message is a JSON header (:meth:`to_header`) plus tensor
frames (:mod:`transport`); the decoders here are the only readers of headers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar

from rightsize.runtime.shards import Key, Task

#: The generation of a node that has no cluster (a worker not yet given one).
NO_CLUSTER = None


class Role(StrEnum):
    PS = "ps"
    WORKER = "worker"
    RANK = "rank"
    SCRIPT = "script"  # a rank running the user's own script (rightsize torchrun)


# -- what nodes report --------------------------------------------------------------------
@dataclass(frozen=True)
class Stats:
    """A node's cumulative counters, sent with every message (the master's metrics)."""

    bytes_in: float = 0.0
    bytes_out: float = 0.0
    steps: int = 0
    samples: int = 0
    updates: int = 0
    loss_sum: float = 0.0
    loss_n: int = 0
    busy_s: float = 0.0  # seconds spent inside training steps (a step's length, idle time aside)
    # how long before this message the last counted step (a server: update) ended; the
    # master dates the counts by it (metrics.work_span_s), not by when they were reported
    counted_age_s: float | None = None


class AckKind(StrEnum):
    READY = "ready"  # a parameter server serves its launch generation
    LOADED = "loaded"  # a parameter server serves the generation it was told to load
    CHECKPOINTED = "checkpointed"  # a checkpoint version is on disk
    EXPORTED = "exported"  # a repartition's export is on disk


@dataclass(frozen=True)
class Ack:
    """The end of a long command, reported in a later heartbeat."""

    kind: AckKind
    generation: int | None = None
    version: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ack:
        return cls(AckKind(data["kind"]), data.get("generation"), data.get("version"))


# -- commands (master -> node) ---------------------------------------------------------------
class Cmd(StrEnum):
    THREADS = "threads"
    CHECKPOINT = "checkpoint"
    EXPORT = "export"
    LOAD = "load"
    PAUSE = "pause"
    RESUME = "resume"
    RESET = "reset"
    STOP = "stop"


@dataclass(frozen=True)
class Threads:
    """Use ``n`` torch intra-op threads (the node's CPU quota changed)."""

    cmd: ClassVar[Cmd] = Cmd.THREADS
    n: int


@dataclass(frozen=True)
class Checkpoint:
    """Save state as ``version`` (a parameter server: to ``path``; ranks agree on a step)."""

    cmd: ClassVar[Cmd] = Cmd.CHECKPOINT
    version: int
    path: str | None = None


@dataclass(frozen=True)
class Export:
    """Write state to ``path`` now: workers are halted for a repartition."""

    cmd: ClassVar[Cmd] = Cmd.EXPORT
    path: str
    generation: int


@dataclass(frozen=True)
class Load:
    """Serve ``names``, read from ``paths`` (none: freshly initialised), as ``generation``."""

    cmd: ClassVar[Cmd] = Cmd.LOAD
    generation: int
    names: tuple[str, ...]
    paths: tuple[str, ...]


@dataclass(frozen=True)
class Pause:
    """Halt at the next batch boundary, keeping the lease."""

    cmd: ClassVar[Cmd] = Cmd.PAUSE


@dataclass(frozen=True)
class Resume:
    cmd: ClassVar[Cmd] = Cmd.RESUME


@dataclass(frozen=True)
class Reset:
    """Drop the lease now: the master rolled the shard queues back to a checkpoint."""

    cmd: ClassVar[Cmd] = Cmd.RESET


@dataclass(frozen=True)
class Stop:
    cmd: ClassVar[Cmd] = Cmd.STOP


Command = Threads | Checkpoint | Export | Load | Pause | Resume | Reset | Stop
_COMMANDS: dict[Cmd, type] = {c.cmd: c for c in (Threads, Checkpoint, Export, Load, Pause,
                                                 Resume, Reset, Stop)}  # fmt: skip


def command_json(command: Command) -> dict[str, Any]:
    return {"cmd": str(command.cmd), **asdict(command)}


def command_from_json(data: dict[str, Any]) -> Command:
    kind = _COMMANDS[Cmd(data["cmd"])]
    values = {f.name: data[f.name] for f in fields(kind)}
    for name in ("names", "paths"):
        if name in values:
            values[name] = tuple(values[name])
    return kind(**values)


# -- the cluster a worker trains against --------------------------------------------------------
@dataclass(frozen=True)
class ClusterView:
    """One generation's parameter servers: their addresses and which tensors each holds."""

    generation: int
    servers: dict[str, str]  # ps name -> address
    placement: dict[str, str]  # tensor name -> ps name

    def __post_init__(self) -> None:
        if not self.servers or set(self.placement.values()) - set(self.servers):
            raise ValueError(f"a cluster needs a server for every tensor: {self}")

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ClusterView | None:
        return None if data is None else cls(data["generation"], data["servers"], data["placement"])


# -- node configuration, sent in the answer to Register -------------------------------------------
@dataclass(frozen=True)
class PSConfig:
    """A parameter server's share: serve ``names`` from ``paths`` as ``generation``."""

    generation: int
    names: tuple[str, ...]
    paths: tuple[str, ...]


@dataclass(frozen=True)
class RankConfig:
    """An allreduce rank's place in its group, started from checkpoint file ``checkpoint``."""

    generation: int
    rank: int
    world: int
    rendezvous: str
    checkpoint: str | None
    timeout_s: float
    checkpoint_root: str


@dataclass(frozen=True)
class ScriptConfig:
    """A script rank's place in its group: what torchrun would tell it (its environment).

    ``generation`` counts the group's starts (each restart or resize makes a new group with a
    fresh store); ``restart_count`` only the restarts after failures, as torchrun's
    ``TORCHELASTIC_RESTART_COUNT`` does.
    """

    generation: int
    rank: int
    world: int
    store_host: str
    store_port: int
    restart_count: int
    max_restarts: int
    run_id: str
    timeout_s: float
    error_file: str = ""  # torchrun's TORCHELASTIC_ERROR_FILE: where @record writes a failure


@dataclass(frozen=True)
class NodeConfig:
    """What a node learns on registering. A worker gets no role config: its cluster comes in
    :attr:`Reply.cluster`, now or in a later answer."""

    spec: dict[str, Any]
    threads: int
    ps: PSConfig | None = None
    rank: RankConfig | None = None
    script: ScriptConfig | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeConfig:
        ps, rank, script = data.get("ps"), data.get("rank"), data.get("script")
        return cls(
            data["spec"], data["threads"],
            PSConfig(ps["generation"], tuple(ps["names"]), tuple(ps["paths"])) if ps else None,
            RankConfig(**rank) if rank else None,
            ScriptConfig(**script) if script else None,
        )  # fmt: skip


# -- requests (node -> master) -------------------------------------------------------------------
class Op(StrEnum):
    REGISTER = "register"
    HEARTBEAT = "heartbeat"
    LEASE = "lease"
    PROGRESS = "progress"
    SAMPLES = "samples"  # a script rank's ElasticSampler asks for a step's indices
    FILE = "file"  # a script rank saved or loaded a checkpoint file
    MARK = "mark"  # a script rank timed part of its start (rendezvous, reload)


@dataclass(frozen=True)
class Register:
    op: ClassVar[Op] = Op.REGISTER
    role: Role
    address: str | None = None  # a parameter server's data-plane address


@dataclass(frozen=True)
class Heartbeat:
    op: ClassVar[Op] = Op.HEARTBEAT
    acks: tuple[Ack, ...] = ()
    paused: bool = False  # a worker halted at a batch boundary


@dataclass(frozen=True)
class LeaseRequest:
    op: ClassVar[Op] = Op.LEASE


@dataclass(frozen=True)
class Progress:
    """Batches before ``next_batch`` of ``task`` are applied on every server (``done``: all)."""

    op: ClassVar[Op] = Op.PROGRESS
    task: Task
    next_batch: int

    @property
    def done(self) -> bool:
        return self.next_batch >= self.task.end


@dataclass(frozen=True)
class SampleRequest:
    """An :class:`rightsize.torch.ElasticSampler` asks for its rank's indices of ``step`` of
    ``epoch`` in stream ``stream`` (the process's ElasticSamplers in creation order); the
    rest describes the sampler, the same on every rank."""

    op: ClassVar[Op] = Op.SAMPLES
    stream: int
    epoch: int
    step: int
    dataset_size: int
    batch_size: int
    seed: int
    shuffle: bool


class FileEvent(StrEnum):
    SAVING = "saving"  # torch.save is about to write ``path``
    SAVED = "saved"  # ... and has written it (``mtime_ns``, ``size``: the file now)
    LOADED = "loaded"  # torch.load read ``path`` (as it is: ``mtime_ns``, ``size``)
    ENDED = "ended"  # the script returned (no file): what the rank applied in all


@dataclass(frozen=True)
class FileReport:
    """A script rank's checkpoint file. ``applied``: per stream, per epoch, how many of this
    group's steps the rank had applied (optimizer-stepped) when it saved."""

    op: ClassVar[Op] = Op.FILE
    event: FileEvent
    path: str
    mtime_ns: int | None = None
    size: int | None = None
    applied: dict[str, dict[str, int]] = field(default_factory=dict)


class MarkKind(StrEnum):
    RENDEZVOUS = "rendezvous"  # init_process_group returned
    RELOADED = "reloaded"  # the script's torch.load returned


@dataclass(frozen=True)
class Mark:
    """A script rank timed part of its start: ``kind`` took ``duration_s``."""

    op: ClassVar[Op] = Op.MARK
    kind: MarkKind
    duration_s: float


Body = Register | Heartbeat | LeaseRequest | Progress | SampleRequest | FileReport | Mark


@dataclass(frozen=True)
class Sender:
    name: str
    pid: int
    generation: int | None
    stats: Stats = field(default_factory=Stats)


@dataclass(frozen=True)
class Message:
    sender: Sender
    body: Body

    def to_header(self) -> dict[str, Any]:
        body = asdict(self.body)
        if isinstance(self.body, Heartbeat):
            body["acks"] = [{**asdict(a), "kind": str(a.kind)} for a in self.body.acks]
        if isinstance(self.body, Progress):
            body["task"] = self.body.task.to_list()
        return {"op": str(self.body.op), "sender": asdict(self.sender), "body": body}

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> Message:
        """Raises ``ValueError`` (or ``KeyError``/``TypeError``) for a malformed header."""
        sender = header["sender"]
        who = Sender(sender["name"], sender["pid"], sender["generation"], Stats(**sender["stats"]))
        data, op = header["body"], Op(header["op"])
        if op == Op.REGISTER:
            body: Body = Register(Role(data["role"]), data.get("address"))
        elif op == Op.HEARTBEAT:
            body = Heartbeat(tuple(Ack.from_json(a) for a in data["acks"]), data["paused"])
        elif op == Op.LEASE:
            body = LeaseRequest()
        elif op == Op.SAMPLES:
            body = SampleRequest(**data)
        elif op == Op.FILE:
            body = FileReport(FileEvent(data["event"]), data["path"], data.get("mtime_ns"),
                              data.get("size"), data.get("applied") or {})  # fmt: skip
        elif op == Op.MARK:
            body = Mark(MarkKind(data["kind"]), float(data["duration_s"]))
        else:
            body = Progress(Task.from_list(data["task"]), int(data["next_batch"]))
        return cls(who, body)


# -- answers (master -> node) ----------------------------------------------------------------------
@dataclass(frozen=True)
class Grant:
    """A leased task, from ``next_batch``; its sample indices travel as the reply's tensor."""

    task: Task
    next_batch: int


@dataclass(frozen=True)
class Samples:
    """The answer to a :class:`SampleRequest`: the step's indices travel as the reply's
    tensor; ``steps`` is how many steps every rank of the group takes in the epoch (the
    sampler's length), ``end`` that the epoch has no step ``step`` for this group."""

    steps: int
    end: bool


@dataclass(frozen=True)
class Reply:
    commands: tuple[Command, ...] = ()
    config: NodeConfig | None = None  # only in the answer to Register
    cluster: ClusterView | None = None  # a worker should switch to this cluster
    lease: Grant | None = None
    accepted: bool | None = None  # the answer to Progress
    samples: Samples | None = None  # the answer to SampleRequest

    @property
    def stop(self) -> bool:
        return any(isinstance(c, Stop) for c in self.commands)

    def to_header(self) -> dict[str, Any]:
        """Only the fields that are set (a reply goes out for every step of every worker)."""
        header: dict[str, Any] = {}
        if self.commands:
            header["commands"] = [command_json(c) for c in self.commands]
        if self.config is not None:
            header["config"] = self.config.to_json()
        if self.cluster is not None:
            header["cluster"] = asdict(self.cluster)
        if self.lease is not None:
            header["lease"] = [*self.lease.task.to_list(), self.lease.next_batch]
        if self.accepted is not None:
            header["accepted"] = self.accepted
        if self.samples is not None:
            header["samples"] = [self.samples.steps, self.samples.end]
        return header

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> Reply:
        lease = header.get("lease")
        config = header.get("config")
        samples = header.get("samples")
        return cls(
            tuple(command_from_json(c) for c in header.get("commands", [])),
            NodeConfig.from_json(config) if config else None,
            ClusterView.from_json(header.get("cluster")),
            Grant(Task.from_list(lease[:4]), int(lease[4])) if lease else None,
            header.get("accepted"),
            Samples(int(samples[0]), bool(samples[1])) if samples else None,
        )  # fmt: skip


#: The answer to a process the master does not know (a predecessor of a relaunched node).
STOP_REPLY = Reply(commands=(Stop(),))


# -- the data plane (worker <-> parameter server) ---------------------------------------------------
class DataOp(StrEnum):
    PULL = "pull"
    PUSH = "push"


@dataclass(frozen=True)
class Pull:
    """Dense tensors, and the rows of ``tables`` whose ids travel as tensors."""

    generation: int
    tables: tuple[str, ...]

    def to_header(self) -> dict[str, Any]:
        return {"op": str(DataOp.PULL), "gen": self.generation, "tables": list(self.tables)}


@dataclass(frozen=True)
class Push:
    """One batch's gradients under ``key``: indices, then ``dense``, then (ids, rows) per table."""

    generation: int
    key: Key
    dense: tuple[str, ...]
    tables: tuple[str, ...]

    def to_header(self) -> dict[str, Any]:
        return {"op": str(DataOp.PUSH), "gen": self.generation, "key": list(self.key),
                "dense": list(self.dense), "tables": list(self.tables)}  # fmt: skip


def data_request(header: dict[str, Any]) -> Pull | Push:
    """Raises ValueError: the header names an operation the data plane does not have."""
    tables = tuple(header["tables"])
    if DataOp(header["op"]) == DataOp.PULL:
        return Pull(header["gen"], tables)
    key = tuple(int(k) for k in header["key"])
    return Push(header["gen"], key, tuple(header["dense"]), tables)  # type: ignore[arg-type]


class Refusal(StrEnum):
    """Why a parameter server applied and sent nothing."""

    STALE = "stale"  # it serves another generation than the request's
    LOST = "lost"  # the request's tensors were in a shared-memory slot it could not open


@dataclass(frozen=True)
class Refused:
    why: Refusal

    def to_header(self) -> dict[str, Any]:
        return {str(self.why): True}


@dataclass(frozen=True)
class Pulled:
    """The answer to a :class:`Pull`: the dense tensors' names, in the order their values
    travel; the rows of the tables asked for follow them."""

    dense: tuple[str, ...]

    def to_header(self) -> dict[str, Any]:
        return {"dense": list(self.dense)}


@dataclass(frozen=True)
class Pushed:
    """The answer to a :class:`Push`: ``applied`` is False for a key the server had applied
    already (a retried batch changes nothing)."""

    applied: bool

    def to_header(self) -> dict[str, Any]:
        return {"applied": self.applied}


DataReply = Refused | Pulled | Pushed


def data_reply(header: dict[str, Any]) -> DataReply:
    """A server's answer, from its header (which also carries the transport's own keys).

    Raises:
        ValueError: the header is no data-plane answer.
    """
    for why in Refusal:
        if header.get(str(why)):
            return Refused(why)
    if "dense" in header:
        return Pulled(tuple(header["dense"]))
    if "applied" in header:
        return Pushed(bool(header["applied"]))
    raise ValueError(f"not a parameter server's answer: {sorted(header)}")
