"""How hard the profiler measures — kept apart from the profiler, which imports torch, so
that ``rightsize profile --help`` shows these defaults without loading it."""

from __future__ import annotations

from dataclasses import dataclass, field

from rightsize.core.errors import ResourceError
from rightsize.profiling.bmax import BmaxSearch
from rightsize.profiling.bound import DEFAULT_CPU_MAX_STEP_S
from rightsize.profiling.profile import sample_batches

#: A quick profile (``plan --workload`` without a saved one, the service's recommendations):
#: planning needs the curve's shape, not minutes of steps.
QUICK_REPEATS = 3
QUICK_SEARCH = BmaxSearch(max_batch=256, max_step_s=DEFAULT_CPU_MAX_STEP_S)
QUICK_MEMORY_LIMIT = 4 * 2**30

#: Re-time a batch whose fwd+bwd times spread more than this (std/mean). Srift's
#: stragglers are a few percent; 0.1 is already a noisy measurement.
NOISY_CV = 0.1
#: Extra timing rounds for suspect batches before the profile keeps what it has.
RETIME_RETRIES = 2


@dataclass(frozen=True)
class ProfilerSettings:
    """How hard the profiler measures.

    Attributes:
        warmup: untimed steps before each batch's timed repetitions.
        repeats: timed rounds; each round times one step of every sampled batch
            (medians are reported).
        hook_repeats: instrumented backward passes for gradient-ready times.
        search: the B_max search settings.
        sampling: ``srift`` (default: Srift's four batches) or ``dense`` (those and
            the powers of two between them); see :func:`sample_batches`.
        extra_batches: further batch sizes to time.
        budget_s: the whole profile's time budget in seconds (None: unbounded); the
            search's step bound, the timing rounds, re-timings and gradient-ready passes
            are cut to fit it, and what was cut is said (profiling/budget.py).
        noisy_cv, retime_retries: re-time a batch whose fwd+bwd spread (std/mean) is
            above ``noisy_cv``, at most ``retime_retries`` times (profiling/noise.py).
        lr, momentum: the SGD optimizer the steps use.
        seed: model initialisation seed.
    """

    warmup: int = 2
    repeats: int = 5
    hook_repeats: int = 3
    search: BmaxSearch = field(default_factory=BmaxSearch)
    sampling: str = "srift"
    extra_batches: tuple[int, ...] = ()
    budget_s: float | None = None
    noisy_cv: float = NOISY_CV
    retime_retries: int = RETIME_RETRIES
    lr: float = 0.01
    momentum: float = 0.9
    seed: int = 0

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.warmup < 0 or self.hook_repeats < 1:
            raise ResourceError("repeats and hook_repeats must be >= 1 and warmup >= 0")
        if self.noisy_cv <= 0 or self.retime_retries < 0:
            raise ResourceError("noisy_cv must be > 0 and retime_retries >= 0")
        if self.budget_s is not None and not self.budget_s > 0:
            raise ResourceError(f"the time budget must be above 0 s, got {self.budget_s}")
        sample_batches(self.sampling, 1)  # rejects an unknown sampling now, not after B_max


def profile_file_name(workload: str, dataset: str, device: str, options: dict | None = None) -> str:
    """Model options are part of the name: ``mlp3`` with tanh is another model than with relu."""
    parts = [workload, *(f"{k}={v}" for k, v in sorted((options or {}).items())), dataset, device]
    return "-".join(parts).replace(":", "_").replace("/", "_") + ".json"
