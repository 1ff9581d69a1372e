"""JobSpec, Constraints and Objective: what a user asks for, loaded from YAML.

A job file names the workload, its batch and length, the training strategy, a
resource budget, an initial shape (or ``auto`` for a policy to fill), where
checkpoints go, and — for planning — constraints (deadline, dollar budget) and
the objective to minimise. For ``rightsize run`` it also names the optimizer,
the autoscaling policy and the runtime's knobs (metric interval, shard size,
isolation). Quantities use the unit grammar of :mod:`rightsize.core.units`.
Validation errors name the field path, e.g.
``job.yaml: budget.cpu: expected cores like 2 or 2.5, or millicores like 500m``.
Every field carries a description, from which :func:`job_spec_help` renders the
reference that ``rightsize run --help`` prints, so the two cannot drift.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from rightsize.core.errors import SpecError
from rightsize.core.files import read_yaml
from rightsize.core.limits import (
    MAX_BATCH,
    MAX_DATASET_SAMPLES,
    MAX_EPOCHS,
    MAX_INTERVAL_S,
    MAX_ITERATIONS,
    MAX_RESTARTS,
    MAX_SEED,
    MAX_WORKERS,
)
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.units import (
    format_duration,
    parse_cpu,
    parse_duration,
    parse_memory,
    parse_money,
)
from rightsize.core.validation import describe_validation_error, is_model

Cpu = Annotated[float, BeforeValidator(parse_cpu)]
Memory = Annotated[int, BeforeValidator(parse_memory)]
Seconds = Annotated[float, BeforeValidator(parse_duration)]
Dollars = Annotated[float, BeforeValidator(parse_money)]
#: A job's name names its files (``NAME.sqlite``, ``NAME-report.json``) inside checkpoint.dir.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _plain_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a plain name: use up to 100 letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (it names the job's files in checkpoint.dir), "
            "e.g. my-job"
        )
    return name


def _not_a_directory(path: Path | None) -> Path | None:
    if path is not None and path.is_dir():
        raise ValueError(f"{str(path)!r} is a directory; name a file inside it, e.g. "
                         f"{str(path / 'job.sqlite')!r}")  # fmt: skip
    return path


class Objective(StrEnum):
    """What a plan minimises: total dollars, or total wall time."""

    COST = "cost"
    TIME = "time"


class Strategy(StrEnum):
    """How gradients are exchanged: parameter servers, or collective allreduce."""

    PS = "ps"
    ALLREDUCE = "allreduce"


class Optimizer(StrEnum):
    """The optimizer parameter servers (or allreduce workers) apply.

    ``adam`` uses ``SparseAdam`` for embedding tables, whose gradients are sparse.
    """

    SGD = "sgd"
    ADAGRAD = "adagrad"
    ADAM = "adam"


class Isolation(StrEnum):
    """How the local backend confines each node: cgroups, or CPU affinity and thread limits."""

    AUTO = "auto"
    CGROUP = "cgroup"
    AFFINITY = "affinity"


class Backend(StrEnum):
    """Where the job's nodes run: processes on this machine, or on a Ray cluster's nodes."""

    LOCAL = "local"
    RAY = "ray"


class SharedMemoryMode(StrEnum):
    """Whether tensors between a PS worker and a server on the same host go through shared
    memory (``auto``) or always through sockets (``off``)."""

    AUTO = "auto"
    OFF = "off"


def _switch(value: Any) -> Any:
    """YAML 1.1 reads a bare ``off`` as false (and ``on`` as true): take them as written."""
    if isinstance(value, bool):
        return SharedMemoryMode.AUTO if value else SharedMemoryMode.OFF
    return value


class _Spec(BaseModel):
    # no NaN or infinity anywhere: a learning rate of .inf is a typo, not a setting
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )


class Constraints(_Spec):
    """Limits a plan must respect: a deadline and/or a dollar budget (either may be absent)."""

    deadline_s: Seconds | None = Field(
        default=None, alias="deadline", description="finish within this time, e.g. 2h (planning)"
    )
    budget_usd: Dollars | None = Field(
        default=None, alias="budget", description="spend at most this, e.g. $30 (planning)"
    )


class ResourceSpec(_Spec):
    cpu: Cpu = Field(description="CPU cores, e.g. 4, 2.5 or 500m")
    memory: Memory = Field(description="memory, e.g. 4Gi or 512Mi")
    gpus: int = Field(default=0, ge=0, description="whole GPUs")

    @property
    def resources(self) -> Resources:
        return Resources(self.cpu, self.memory, self.gpus)


class RoleSpec(ResourceSpec):
    """``count`` nodes of one role, each with ``cpu`` and ``memory``."""

    count: int = Field(ge=0, description="how many nodes of this role")


class ShapeSpec(_Spec):
    ps: RoleSpec | None = Field(
        default=None, description="parameter servers, each with cpu and memory (strategy ps)"
    )
    workers: RoleSpec = Field(description="workers, each with cpu and memory")

    def to_shape(self) -> ClusterShape:
        ps = self.ps or RoleSpec(count=0, cpu=0, memory=0)
        return ClusterShape.from_counts(
            ps.count, self.workers.count, ps.resources, self.workers.resources
        )


def _fsspec_url(value: str | None) -> str | None:
    """An fsspec URL whose protocol is installed (s3:// needs s3fs, gs:// gcsfs)."""
    if value is None:
        return None
    protocol, sep, _ = value.partition("://")
    if not sep or not protocol:
        raise ValueError(f"{value!r} is not a URL (scheme://location, e.g. file:///mnt/ckpt)")
    import fsspec

    try:
        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"no filesystem for {protocol}:// ({str(exc).splitlines()[0]})") from None
    return value


class CheckpointSpec(_Spec):
    dir: Path = Field(
        default=Path("checkpoints"),
        description="where checkpoints (and by default the job's state file) are written; "
        "node logs go there too",
    )
    url: Annotated[str | None, AfterValidator(_fsspec_url)] = Field(
        default=None,
        description="write checkpoints here instead of dir: an fsspec URL every host of a "
        "cluster reaches (file:///mnt/shared/ckpt, s3://bucket/ckpt with s3fs installed); "
        "the state file and node logs stay in dir",
    )
    interval_s: Seconds = Field(
        default=60.0,
        alias="interval",
        gt=0,
        le=MAX_INTERVAL_S,
        description="time between periodic checkpoints of parameters and shard queues (at most 1d)",
    )


class TrainingSpec(_Spec):
    optimizer: Optimizer = Field(default=Optimizer.ADAGRAD, description="sgd, adagrad or adam")
    lr: float = Field(default=0.01, gt=0, description="learning rate")
    momentum: float = Field(default=0.0, ge=0, lt=1, description="momentum (sgd only)")
    seed: int = Field(
        default=0, ge=0, le=MAX_SEED,
        description="seed of the model's initial weights and the shuffle (0 to 2^32 - 1)",
    )  # fmt: skip
    shuffle: bool = Field(default=True, description="visit samples in a new order every epoch")


class PolicySpec(_Spec):
    name: str = Field(default="static", description="autoscaling policy (see --policy)")
    params: dict[str, Any] = Field(
        default_factory=dict, description="the policy's parameters, e.g. {r_up: 0.5}"
    )
    min_workers: int = Field(
        default=1, ge=1, le=MAX_WORKERS,
        description="the fewest workers (ranks) a policy may choose",
    )  # fmt: skip
    max_workers: int | None = Field(
        default=None, ge=1, le=MAX_WORKERS,
        description="the most workers (ranks) a policy may choose; none: what the budget allows",
    )  # fmt: skip

    @model_validator(mode="after")
    def _check_range(self) -> PolicySpec:
        if self.max_workers is not None and self.max_workers < self.min_workers:
            raise ValueError(f"max_workers {self.max_workers} is below min_workers "
                             f"{self.min_workers}")  # fmt: skip
        return self


class RuntimeSpec(_Spec):
    metric_interval_s: Seconds = Field(
        default=2.0,
        alias="metric_interval",
        gt=0,
        le=MAX_INTERVAL_S,
        description=(
            "how often node metrics are sampled and the policy is asked; policies count "
            "their own durations in it (at most 1d)"
        ),
    )
    shard_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DATASET_SAMPLES,
        description="samples per data shard (DLRover §5.2: many small ones); none means 8 batches",
    )
    backend: Backend = Field(
        default=Backend.LOCAL,
        description="local (node processes on this machine) or ray (each node held by an "
        "actor on a Ray cluster's node, its resources reserved by a placement group)",
    )
    ray_address: str = Field(
        default="auto",
        min_length=1,
        description="the Ray cluster to join with backend ray: auto (the one this host "
        "belongs to, ray start), or host:port of its head",
    )
    curve: bool | None = Field(
        default=None,
        description="ZeroMQ CURVE on the job's sockets (keys made per job, handed to its "
        "nodes; only they can connect, and traffic is encrypted); none: on with backend ray, "
        "off on one machine, where servers listen on loopback only",
    )
    isolation: Isolation = Field(
        default=Isolation.AUTO,
        description="auto (cgroups if permitted, else affinity), cgroup, or affinity",
    )
    max_restarts: int = Field(
        default=3,
        ge=0,
        le=MAX_RESTARTS,
        description=f"relaunches of one failed node before the job fails (at most {MAX_RESTARTS})",
    )
    ps_bandwidth: Memory | None = Field(
        default=None,
        gt=0,
        description="cap each parameter server's sends at this many bytes/s, e.g. 20Mi "
        "(none: no cap)",
    )
    overlap: bool = Field(
        default=True,
        description="PS workers pull the next step's parameters before this step's "
        "gradients are applied (one step stale, overlapped with compute); false: "
        "every pull sees the worker's own last push",
    )
    shared_memory: Annotated[SharedMemoryMode, BeforeValidator(_switch)] = Field(
        default=SharedMemoryMode.AUTO,
        description="auto: a PS worker and a server on the same host pass tensors through "
        "shared memory (/dev/shm), only descriptors through the socket; off: always sockets",
    )
    startup_allowance: bool = Field(
        default=True,
        description="a starting node borrows the budget's idle CPU until it trains "
        "(docs/runtime.md); false: it starts at its planned quota",
    )
    straggler_ratio: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="a worker slower than this fraction of the median is a straggler (§5.4)",
    )
    straggler_shard_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="fraction of a shard a straggler is leased at a time (§5.4)",
    )
    startup_timeout_s: Seconds = Field(
        default=180.0,
        alias="startup_timeout",
        gt=0,
        le=MAX_INTERVAL_S,
        description="how long a launched node may take to register",
    )
    liveness_timeout_s: Seconds | None = Field(
        default=None,
        alias="liveness_timeout",
        gt=0,
        le=MAX_INTERVAL_S,
        description="a running node silent this long is killed and replaced; none means "
        "max(10s, 20 x the slowest worker's step time)",
    )
    oversubscribe: bool = Field(
        default=False,
        description="allow nodes, shapes and budgets larger than this machine",
    )
    cpu_burst: bool | None = Field(
        default=None,
        description="a node may spend CPU quota it left unused in earlier periods, up to one "
        "period's worth (its average stays within its quota): a rank's communication threads "
        "run beside its compute without being throttled; none: on for a script's ranks, off "
        "for a workload's nodes",
    )
    cpu_pool: bool | None = Field(
        default=None,
        description="the job's nodes share the sum of their CPU quotas: a rank may run on "
        "what its siblings leave idle while they wait in a collective, the job's total stays "
        "within the sum, and each rank's threads follow its own share (local backend); none: "
        "on for a script's ranks, off for a workload's nodes",
    )
    restart_payback: bool = Field(
        default=True,
        description="a plan that restarts a script's ranks (a new world size) is carried out "
        "only if its predicted gain pays back the measured restart cost; false: always",
    )
    state: Annotated[Path | None, AfterValidator(_not_a_directory)] = Field(
        default=None,
        description="the master's SQLite state file; none means CHECKPOINT_DIR/NAME.sqlite",
    )


class JobSpec(_Spec):
    """One training job as the user describes it."""

    name: Annotated[str, AfterValidator(_plain_name)] = Field(
        default="job",
        description="the job's name: letters, digits, '.', '_' and '-' (it names its files)",
    )
    workload: str | None = Field(
        default=None, min_length=1,
        description="zoo model name (rightsize workloads) or package.module:function; "
        "or give script instead",
    )  # fmt: skip
    script: str | None = Field(
        default=None, min_length=1,
        description="the user's own training script (a torchrun script: DDP, its own optimizer "
        "and checkpoints), run unchanged by every rank instead of a workload; a relative path "
        "is beside the job file; see rightsize torchrun",
    )  # fmt: skip
    args: list[str] = Field(
        default_factory=list, description="the script's command-line arguments"
    )
    module: bool = Field(
        default=False, description="script names a module to run as python -m would (torchrun -m)"
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="model options, e.g. {embed_dim: 8}"
    )
    dataset: str | None = Field(
        default=None, description="dataset name; none means the model's own"
    )
    dataset_size: int | None = Field(
        default=None, ge=1, le=MAX_DATASET_SAMPLES,
        description="samples in a synthetic dataset (at most 10^8: the runtime holds an epoch's "
        "order in memory); none means its own size",
    )  # fmt: skip
    batch_size: int | None = Field(
        default=None, ge=1, le=MAX_BATCH,
        description="samples per training step on one worker (at most 2^24); required with "
        "workload (a script decides its own)",
    )  # fmt: skip
    epochs: int | None = Field(
        default=None, ge=1, le=MAX_EPOCHS,
        description="passes over the dataset (at most 10^5); none (and no steps) means 1",
    )  # fmt: skip
    steps: int | None = Field(
        default=None, ge=1, le=MAX_ITERATIONS,
        description="train this many steps instead of whole epochs (at most 10^9); with a "
        "script: the optimizer steps it takes in all, if known (weighs a restart's cost)",
    )  # fmt: skip
    strategy: Strategy = Field(
        default=Strategy.PS, description="ps (parameter servers) or allreduce (torch DDP)"
    )
    budget: ResourceSpec = Field(description="the most the job may hold at once (R_max)")
    initial_shape: Literal["auto"] | ShapeSpec = Field(
        default="auto", description="nodes to start with, or auto to let the policy choose"
    )
    checkpoint: CheckpointSpec = Field(default=CheckpointSpec(), description="checkpointing")
    training: TrainingSpec = Field(default=TrainingSpec(), description="the optimizer")
    policy: PolicySpec = Field(default=PolicySpec(), description="the autoscaling policy")
    runtime: RuntimeSpec = Field(default=RuntimeSpec(), description="the runtime's knobs")
    constraints: Constraints = Field(
        default=Constraints(), description="deadline and dollar budget (planning)"
    )
    objective: Objective = Field(
        default=Objective.TIME, description="cost or time: what planning minimises"
    )

    @model_validator(mode="before")
    @classmethod
    def _script_is_allreduce(cls, data: Any) -> Any:
        """A script trains data-parallel ranks: its strategy is allreduce unless it says."""
        if isinstance(data, dict) and data.get("script") is not None:
            return {"strategy": Strategy.ALLREDUCE, **data}
        return data

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        if (self.workload is None) == (self.script is None):
            raise ValueError("give either workload (a zoo model or factory) or script "
                             "(your own training script), not both")  # fmt: skip
        if self.script is not None:
            self._check_script()
        elif self.batch_size is None:
            raise ValueError("batch_size: required field is missing (a workload needs it)")
        elif self.args or self.module:
            raise ValueError("args and module go with script, not workload")
        if self.epochs is not None and self.steps is not None:
            raise ValueError("give either epochs or steps, not both")
        if isinstance(self.initial_shape, ShapeSpec):
            self._check_shape(self.initial_shape)
        return self

    def _check_script(self) -> None:
        if self.strategy != Strategy.ALLREDUCE:
            raise ValueError("a script trains allreduce ranks: strategy must be allreduce")
        given = [k for k in ("options", "dataset", "dataset_size", "batch_size", "epochs")
                 if getattr(self, k)]  # fmt: skip
        if given:
            raise ValueError(f"workload settings ({', '.join(given)}) do not apply to a script, "
                             "which decides its own (pass them in args)")  # fmt: skip

    @property
    def is_script(self) -> bool:
        return self.script is not None

    @property
    def program(self) -> str:
        """What the job trains, in words: the workload's name or ``script train.py``."""
        return self.workload if self.script is None else f"script {self.script}"

    def _check_shape(self, shape: ShapeSpec) -> None:
        total = shape.to_shape().total()
        if not total.fits_within(self.budget.resources):
            raise ValueError(
                f"initial_shape needs {total} but budget is {self.budget.resources}; "
                "raise the budget or shrink the initial shape"
            )
        has_ps = shape.ps is not None and shape.ps.count > 0
        if self.strategy == Strategy.PS and not has_ps:
            raise ValueError(
                "strategy ps needs initial_shape.ps with count >= 1 (or initial_shape: auto)"
            )
        if self.strategy == Strategy.ALLREDUCE and has_ps:
            raise ValueError("strategy allreduce has no parameter servers; remove initial_shape.ps")
        if shape.workers.count < 1:
            raise ValueError("initial_shape.workers.count must be >= 1")

    @property
    def length(self) -> tuple[str, int]:
        """``("steps", n)`` or ``("epochs", n)``; one epoch when neither is given."""
        if self.steps is not None:
            return "steps", self.steps
        return "epochs", self.epochs or 1

    @property
    def state_path(self) -> Path:
        """The master's SQLite file: ``runtime.state`` or ``CHECKPOINT_DIR/NAME.sqlite``."""
        return self.runtime.state or self.checkpoint.dir / f"{self.name}.sqlite"


def load_job_spec(path: str | Path) -> JobSpec:
    """Read and validate a job YAML file. A script named by a relative path is the one beside
    the job file (as a Dockerfile's are), wherever the command runs.

    Raises:
        SpecError: unreadable file, bad YAML, or a field that fails validation.
    """
    spec = parse_job_spec(read_yaml(path, "job file"), str(path))
    script = spec.script
    if script is None or spec.module or ":" in script or Path(script).is_absolute():
        return spec
    return spec.model_copy(update={"script": str(Path(path).parent / script)})


def parse_job_spec(data: Any, label: str = "job") -> JobSpec:
    """Validate an already-parsed mapping (from YAML or an API request)."""
    if not isinstance(data, dict):
        raise SpecError(f"{label}: expected a mapping of fields at the top level")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{label}: {describe_validation_error(exc, JobSpec)}") from None


def job_spec_help() -> str:
    """The job file's fields, one per line, rendered from the models' field descriptions."""
    lines = []
    for path, name, info in _walk_fields(JobSpec):
        default = _default_text(name, info)
        suffix = " (required)" if default is None else f" (default: {default})" if default else ""
        lines.append(f"  {path:<34} {info.description or ''}{suffix}")
    return "\n".join(lines)


def _walk_fields(model: type[BaseModel], prefix: str = ""):
    for name, info in model.model_fields.items():
        path = prefix + (info.alias or name)
        yield path, name, info
        annotation = info.annotation
        for sub in getattr(annotation, "__args__", (annotation,)):
            if is_model(sub):
                yield from _walk_fields(sub, path + ".")


def _default_text(name: str, info: Any) -> str | None:
    """``None`` for a required field, ``""`` for a section, else the default as typed."""
    if info.is_required():
        return None
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and name.endswith("_s"):
        return format_duration(value)
    return "none" if value is None else str(value)
