"""The Profile: what the profiler measured about one workload on one device, as versioned JSON.

It holds what Srift's performance models need (§4.1): B_max, forward/backward
latency at the sampled batches with their spread, each layer's parameter bytes
and gradient-ready time (normalised to the backward pass), activation bytes per
sample; plus per-layer FLOPs and output bytes for scaling to other devices. A
profile is written atomically and re-loaded with validation; a file from a newer
schema version is refused with a message rather than misread.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rightsize.core.errors import SpecError
from rightsize.core.files import atomic_write_text, read_json
from rightsize.core.limits import MAX_BATCH
from rightsize.core.validation import describe_validation_error

PROFILE_SCHEMA = "rightsize.profile"
#: 2: the process's memory bound, B_max limited by "time", noisy batches and falling segments.
PROFILE_VERSION = 2


def srift_sample_batches(bmax: int, min_batch: int = 1) -> list[int]:
    """Srift's sampled batch sizes: 1, B_max/3, 2·B_max/3, B_max (rounded, distinct).

    ``min_batch`` replaces 1 for models that cannot train on one sample.
    """
    thirds = (round(bmax / 3), round(2 * bmax / 3))
    return sorted({min_batch, bmax, *(max(min_batch, b) for b in thirds)})


SAMPLINGS = ("srift", "dense")


def sample_batches(sampling: str, bmax: int, min_batch: int = 1) -> list[int]:
    """The batch sizes a profile times.

    ``srift``: Srift's four. ``dense``: those plus every power of two between
    them — the denser curve that ``benchmarks/plan/compute_model.py`` measured to
    follow models whose per-sample cost is not piecewise-linear in three pieces
    (docs/benchmarks.md).
    """
    batches = set(srift_sample_batches(bmax, min_batch))
    if sampling == "dense":
        batches |= {2**k for k in range(bmax.bit_length()) if min_batch < 2**k < bmax}
    elif sampling != "srift":
        raise SpecError(f"unknown sampling {sampling!r}; choose one of {', '.join(SAMPLINGS)}")
    return sorted(batches)


# What a measurement can be. A profile is re-read from a file a user may have edited: a NaN,
# a negative or a zero time would otherwise plan at 0 s/iter or crash deep in a model.
Positive = Annotated[float, Field(gt=0)]
Amount = Annotated[float, Field(ge=0)]
Bytes = Annotated[int, Field(ge=0)]
Count = Annotated[int, Field(ge=0)]
Batch = Annotated[int, Field(ge=1, le=MAX_BATCH)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class DeviceInfo(_Frozen):
    """The device a profile was measured on."""

    kind: str  # "cpu" or "cuda"
    name: str  # CPU model or GPU name
    threads: int = Field(ge=1)  # torch intra-op threads (CPU) or SM count (CUDA)
    memory_bytes: Bytes  # the device's memory capacity as seen by the profiler
    torch_version: str
    peak_flops_per_s: Positive | None = None  # measured fp32 matmul rate (profiling/peaks.py)
    peak_mem_bytes_per_s: Positive | None = None  # measured copy bandwidth


class LatencySample(_Frozen):
    """Latency at one batch size: medians over repetitions, their spread, and raw runs."""

    batch: Batch
    forward_s: Positive
    backward_s: Positive
    total_s: Positive  # forward + backward, per repetition then median
    optimizer_s: Amount
    forward_cv: Amount
    backward_cv: Amount
    total_cv: Amount
    peak_memory_bytes: Bytes
    grad_ready: tuple[Amount, ...]  # per layer: gradient-ready time / backward time
    forward_runs_s: tuple[Amount, ...]
    backward_runs_s: tuple[Amount, ...]


class LayerProfile(_Frozen):
    """Static costs of one trainable layer (per sample where it scales with the batch)."""

    name: str
    param_count: Count
    param_bytes: Bytes
    forward_flops_per_sample: Amount
    backward_flops_per_sample: Amount
    output_bytes_per_sample: Amount
    op_class: str | None = None  # perf/precision.py OpClass; None in profiles made before it


class OpCostProfile(_Frozen):
    """One kind of operation a training step dispatches (perf/op_costs.py ``OpCost``), ``count``
    times; each cost a line in the batch, ``(fixed, per_sample)``."""

    name: str
    kind: str
    phase: str  # "forward" or "backward"
    count: int = Field(ge=1)
    flops: tuple[float, float]
    bytes: tuple[float, float]
    gemm: tuple[tuple[float, float], tuple[float, float], tuple[float, float],
                tuple[float, float]]  # batch, M, N, K  # fmt: skip


class TensorCounts(_Frozen):
    """The model's tensors as a parameter server holds them (perf/ps_profiles.py): a framework
    that moves every variable as its own RPC (TensorFlow 1.x) costs its PS per tensor, not only
    per byte. Counted from the model when it is profiled (profiling/tensor_counts.py)."""

    parameters: Count  # trainable parameter tensors: each read by a worker, its gradient sent
    state: Count  # running statistics training assigns every step (batch norm's mean, variance)


class MemoryProfile(_Frozen):
    """Memory facts: the limit searched under, and what a step needs."""

    limit_bytes: Bytes
    limit_source: str  # "--memory-limit" or "device"
    resident_bytes: Bytes  # parameters + optimizer state + framework buffers held between steps
    activation_bytes_per_sample: Amount  # tensors saved for backward, per sample
    probes: tuple[tuple[Count, Bytes], ...]  # (batch, measured peak bytes) of the B_max search
    # CPU: the bound on the profiler's resident memory, enforced on every probe, and what the
    # process held before any step (interpreter, libraries, model); limit = process - overhead
    process_limit_bytes: Bytes | None = None
    process_overhead_bytes: Bytes | None = None


class Profile(_Frozen):
    """Everything measured about one workload on one device."""

    schema_: str = Field(default=PROFILE_SCHEMA, alias="schema")
    version: int = PROFILE_VERSION
    workload: str
    dataset: str
    options: dict[str, Any] = {}
    device: DeviceInfo
    bmax: Batch
    min_batch: Batch = 1  # 2 when BatchNorm cannot train on one sample
    bmax_limited_by: str  # "memory", "cap" or "time" (profiling/bmax.py)
    memory: MemoryProfile
    samples: tuple[LatencySample, ...] = Field(min_length=1)
    layers: tuple[LayerProfile, ...]
    forward_flops_per_sample: Amount = 0.0  # whole model, including ops outside parameter layers
    backward_flops_per_sample: Amount = 0.0
    # the operations one step dispatches (perf/op_costs.py); None in profiles made before them
    op_costs: tuple[OpCostProfile, ...] | None = None
    # the model's parameter and state tensors (issue 40); None in profiles made before them
    tensors: TensorCounts | None = None
    settings: dict[str, Any] = {}
    # timing problems left after re-measuring (profiling/noise.py)
    noisy_batches: tuple[Batch, ...] = ()  # fwd+bwd spread above settings["noisy_cv"]
    falling_segments: tuple[tuple[Batch, Batch], ...] = ()  # fwd+bwd time falls between them
    created_at: str
    rightsize_version: str

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False
    )

    @property
    def compute_cv(self) -> float:
        """Median spread (std/mean) of the compute latency: Srift's straggler scale."""
        return statistics.median(s.total_cv for s in self.samples)

    @property
    def param_bytes(self) -> int:
        return sum(layer.param_bytes for layer in self.layers)

    def timing_warnings(self) -> list[str]:
        """One line per timing problem the profiler recorded, for ``predict`` and ``plan``."""
        lines = []
        if self.noisy_batches:
            threshold = self.settings.get("noisy_cv", 0.1)
            lines.append(
                f"{self.workload}: noisy timings at batch "
                f"{', '.join(map(str, self.noisy_batches))} (fwd+bwd spread above "
                f"{threshold:.0%} std/mean after re-measuring); predictions there are uncertain "
                "— profile again on a quieter machine, or with --threads 1 and more --repeats"
            )
        if self.falling_segments:
            spans = ", ".join(f"{a}->{b}" for a, b in self.falling_segments)
            lines.append(
                f"{self.workload}: step time falls as the batch grows ({spans}): the compute "
                "model has segments of negative slope there (measurement noise)"
            )
        return lines

    def sample_nearest(self, batch: int) -> LatencySample:
        """The measured sample whose batch is closest to ``batch``."""
        return min(self.samples, key=lambda s: (abs(s.batch - batch), s.batch))

    # -- persistence ---------------------------------------------------------------------
    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=1)

    def save(self, path: str | Path) -> Path:
        """Write atomically (temp file + rename) so a crash never leaves half a profile."""
        return atomic_write_text(path, self.to_json())

    @classmethod
    def from_dict(cls, data: Any, label: str = "profile") -> Profile:
        if not isinstance(data, dict) or data.get("schema") != PROFILE_SCHEMA:
            raise SpecError(f'{label} is not a rightsize profile (no "schema": "{PROFILE_SCHEMA}")')
        version = data.get("version")
        if not isinstance(version, int) or version > PROFILE_VERSION:
            raise SpecError(
                f"{label} has profile version {version!r}; this rightsize reads up to "
                f"{PROFILE_VERSION} — upgrade rightsize or re-run rightsize profile"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SpecError(
                f"{label}: {describe_validation_error(exc, cls)} (measure it again with "
                "rightsize profile)"
            ) from None

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """Read and validate a profile JSON file.

        Raises:
            SpecError: unreadable, not JSON, not a profile, a newer version, or a value no
                measurement can have (a NaN, negative or zero time; a wrong type).
        """
        return cls.from_dict(read_json(path, "profile"), f"profile {path}")
