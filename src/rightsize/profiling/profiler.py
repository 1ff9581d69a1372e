"""The profiler: measure a workload on a real device and produce a Profile (Srift §4.1).

Steps: binary-search B_max on measured peak memory under the device's memory
(or a given limit; on a CPU a bound on the process, enforced on every probe —
``profiling/bound.py``, ``profiling/bounded.py``) and, when set, a bound on one
step's time; time forward, backward and optimizer at Srift's four batch
sizes ``1, B_max/3, 2·B_max/3, B_max`` (warm-up, then repetitions interleaved
round-robin across the batch sizes so drift on a shared machine bends no part
of the curve; medians and spread), timing noisy batches again
(``profiling/noise.py``); record each layer's gradient-ready time in separate
instrumented passes; count activation bytes, parameter bytes and per-layer
FLOPs. Progress, with the time left, goes to a callback because profiling a
large model on a CPU takes minutes; warnings go to another.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import UTC, datetime

import torch

from rightsize import __version__
from rightsize.core.errors import ResourceError
from rightsize.core.units import format_bytes
from rightsize.profiling.bmax import BmaxResult, find_max_batch
from rightsize.profiling.bound import MemoryBound, announce, cpu_bound
from rightsize.profiling.budget import (
    BUDGET_TIME_FLOOR,
    RoundBudget,
    TimeBudget,
    budget_step_s,
    interpolated_peak,
)
from rightsize.profiling.device import describe_device
from rightsize.profiling.layers import layer_costs, step_ops, trainable_layers
from rightsize.profiling.memory import (
    CpuPeakMeter,
    frozen_heap,
    meter_for,
    saved_activation_bytes,
    tensor_bytes,
)
from rightsize.profiling.noise import (
    falling_segments,
    median_totals,
    noisy_batches,
    steady_runs,
)
from rightsize.profiling.profile import (
    LatencySample,
    LayerProfile,
    MemoryProfile,
    Profile,
    sample_batches,
)
from rightsize.profiling.progress import ProgressClock, TimingProgress, step_seconds
from rightsize.profiling.search_probes import SearchProbes
from rightsize.profiling.settings import ProfilerSettings
from rightsize.profiling.tensor_counts import count_tensors
from rightsize.profiling.timing import (
    StepRuns,
    Stopwatch,
    coefficient_of_variation,
    grad_ready_fractions,
    time_interleaved,
)
from rightsize.workloads.workload import Workload, count_on_meta

Progress = Callable[[str], None]


#: Copies of every weight a training step holds at least: the weight and its gradient.
STEP_WEIGHT_COPIES = 2


def _check_weights_fit(workload: Workload, limit: int) -> None:
    """Refuse a model whose weights and gradients alone exceed ``limit``, before allocating
    them: building it would fail deep in PyTorch (or wake the kernel's OOM killer).

    The model is built on the ``meta`` device, which allocates nothing.
    """
    try:
        need = STEP_WEIGHT_COPIES * count_on_meta(workload.build_model).bytes
    except Exception:  # a user's factory may not build on meta; the B_max search still checks
        return
    if need > limit:
        raise ResourceError(
            f"memory limit {format_bytes(limit)} is below a training step at batch 1: the "
            f"weights of {workload.label} and their gradients alone need {format_bytes(need)}; "
            "use smaller model options or raise the memory limit"
        )


class _Session:
    """One workload's model and optimizer on the device, and the measurements made on them."""

    def __init__(self, profiler: Profiler, workload: Workload, clock: ProgressClock,
                 budget: TimeBudget) -> None:  # fmt: skip
        self.profiler, self.workload, self.clock, self.budget = profiler, workload, clock, budget
        self.device = profiler.device
        settings = profiler.settings
        self.model = workload.make_model(settings.seed, self.device)
        self.model.train()
        self.optimizer = torch.optim.SGD(
            self.model.parameters(), lr=settings.lr, momentum=settings.momentum
        )
        self.layers = trainable_layers(self.model)
        self.timed: list[tuple[int, float]] = []  # (batch, seconds) of single steps, for estimates
        self.min_batch = self._find_min_batch()  # also creates the optimizer's state

    def step(self, batch) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.workload.loss(self.model, batch).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _find_min_batch(self) -> int:
        """1, or 2 when a training step on one sample is impossible (BatchNorm over 1x1 maps)."""
        try:
            self.step_seconds(1)
            return 1
        except (ValueError, RuntimeError) as exc:
            self.step_seconds(2)
            reason = str(exc).splitlines()[0]
            self.clock.say(f"batch 1 cannot train ({reason}); smallest batch is 2")
            return 2

    def step_seconds(self, batch_size: int) -> float:
        """One step here, timed (kept for the time-left estimates)."""
        batch = self.workload.example_batch(batch_size, self.device)
        stopwatch = self.profiler.stopwatch
        start = stopwatch.now()
        self.step(batch)
        self.timed.append((batch_size, stopwatch.now() - start))
        return self.timed[-1][1]

    def resident_bytes(self, batch=None) -> int:
        """Bytes of tensors held between steps: parameters, buffers, optimizer state, the batch."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        for state in self.optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        if batch is not None:
            inputs, target = batch
            tensors += [*inputs, target]
        return tensor_bytes(tensors)

    def measure_peak(self, batch_size: int) -> int:
        """Peak bytes of one step at ``batch_size``, in whichever process calls it."""
        batch = self.workload.example_batch(batch_size, self.device)
        return self.profiler.meter.measure(lambda: self.step(batch), self.resident_bytes(batch))

    def peak_bytes(self, batch_size: int) -> int:
        peak = self.measure_peak(batch_size)
        self.clock.say(f"peak memory at batch {batch_size}: {format_bytes(peak)}")
        return peak

    def samples(
        self, batches: list[int], peaks: dict[int, int]
    ) -> tuple[list[LatencySample], dict]:
        """Latency samples of ``batches``, timed interleaved, noisy ones again; peaks measured
        where missing. Also returns the timing problems left (``noisy``, ``falling``)."""
        settings = self.profiler.settings
        peaks = self._peaks(batches, peaks)
        examples = {b: self.workload.example_batch(b, self.device) for b in batches}
        warmup = self._warmup(batches)
        report = TimingProgress(self.clock, warmup, settings.repeats,
                                settings.hook_repeats, len(batches))  # fmt: skip
        report.start(batches, self.timed, self.budget)
        runs = self._time(examples, batches, settings.seed, report.round_done, warmup)
        runs, _ = steady_runs(
            lambda again: self._time(examples, again, settings.seed + len(again)),
            runs, settings.noisy_cv, settings.retime_retries, report.retiming,
            lambda again: self._affords_retiming(runs, again),
        )  # fmt: skip
        hook_repeats = self._hook_repeats(runs)
        samples = []
        for size in batches:
            self.profiler.meter.settle()
            ready = grad_ready_fractions(
                self.workload, self.model, self.layers, examples[size], self.profiler.stopwatch,
                hook_repeats,
            )  # fmt: skip
            samples.append(_latency_sample(size, runs[size], ready, peaks[size]))
            report.batch_done(size, samples[-1].total_s)
        problems = {
            "noisy": noisy_batches(runs, settings.noisy_cv),
            "falling": falling_segments(median_totals(runs)),
        }
        return samples, problems

    def _time(self, examples: dict, batches: list[int], seed: int, on_round=lambda _d: None,
              warmup: int | None = None):  # fmt: skip
        settings = self.profiler.settings
        rounds = RoundBudget(self.budget, self._tail_steps()) if self.budget.bounded else None
        return time_interleaved(
            self.workload, self.model, self.optimizer, {b: examples[b] for b in batches},
            self.profiler.stopwatch, settings.warmup if warmup is None else warmup,
            settings.repeats, seed, on_round, self.profiler.meter.settle, rounds,
        )  # fmt: skip

    def _peaks(self, batches: list[int], probes: dict[int, int]) -> dict[int, int]:
        """Each batch's peak: the search's probe, or a step measured now — or, under a time
        budget, the line between the probes around it (a step saved per batch)."""
        peaks = {b: probes[b] for b in batches if probes.get(b)}
        if self.budget.bounded:
            guessed = {b: interpolated_peak(probes, b) for b in batches if b not in peaks}
            peaks |= {b: peak for b, peak in guessed.items() if peak is not None}
            if any(peak is not None for peak in guessed.values()):
                shown = ", ".join(str(b) for b, peak in guessed.items() if peak is not None)
                self.budget.cut(f"peak memory at batch {shown} interpolated between the "
                                "search's probes, not measured")  # fmt: skip
        return {b: peaks.get(b) or self.peak_bytes(b) for b in batches}

    def _warmup(self, batches: list[int]) -> int:
        """Untimed steps per batch: as set, or one when the budget cannot pay for them and a
        first round (priced by the search's timed steps, profiling/progress.py)."""
        wanted = self.profiler.settings.warmup
        one_each = sum(step_seconds(self.timed, b) or 0.0 for b in batches)
        if wanted <= 1 or self.budget.affords((wanted + 2 + self._tail_steps()) * one_each):
            return wanted
        self.budget.cut(f"1 warm-up step per batch instead of {wanted}")
        return 1

    def _tail_steps(self) -> float:
        """Steps of every batch after the rounds: the gradient-ready passes, and one for the
        static costs (FLOP counting, activation bytes)."""
        return self.profiler.settings.hook_repeats + 1

    def _affords_retiming(self, runs: dict[int, StepRuns], again: list[int]) -> bool:
        settings = self.profiler.settings
        steps = settings.warmup + 2 * settings.repeats
        cost = steps * sum(_step_s(runs[b]) for b in again) + self._tail_steps() * sum(
            _step_s(r) for r in runs.values()
        )
        if self.budget.affords(cost):
            return True
        self.budget.cut(f"re-timing batch {', '.join(map(str, again))} (noisy or falling "
                        "times) did not fit in the budget")  # fmt: skip
        return False

    def _hook_repeats(self, runs: dict[int, StepRuns]) -> int:
        """The gradient-ready passes per batch: as set, or one when the budget is short."""
        wanted = self.profiler.settings.hook_repeats
        one_each = sum(_step_s(r) for r in runs.values())
        if wanted == 1 or self.budget.affords((wanted + 1) * one_each):
            return wanted
        self.budget.cut(f"1 gradient-ready pass per batch instead of {wanted} (budget)")
        return 1

    def activation_bytes_per_sample(self, bmax: int) -> float:
        """Slope of saved-for-backward bytes between two batch sizes (constant terms cancel)."""
        small, large = (bmax, bmax) if bmax < 4 else (max(2, bmax // 8), max(3, bmax // 4))
        exclude = {p.untyped_storage().data_ptr() for p in self.model.parameters()}

        def saved(batch_size: int) -> int:
            batch = self.workload.example_batch(batch_size, self.device)
            skip = exclude | {t.untyped_storage().data_ptr() for t in (*batch[0], batch[1])}
            return saved_activation_bytes(lambda: self.workload.loss(self.model, batch), skip)

        if large == small:
            return saved(small) / small
        return (saved(large) - saved(small)) / (large - small)


def _step_s(runs: StepRuns) -> float:
    """One whole step's median seconds (forward, backward, optimizer)."""
    return statistics.median(runs.total_s) + statistics.median(runs.optimizer_s)


def _latency_sample(
    batch_size: int, runs: StepRuns, ready: tuple[float, ...], peak: int
) -> LatencySample:
    median = statistics.median
    return LatencySample(
        batch=batch_size,
        forward_s=median(runs.forward_s),
        backward_s=median(runs.backward_s),
        total_s=median(runs.total_s),
        optimizer_s=median(runs.optimizer_s),
        forward_cv=coefficient_of_variation(runs.forward_s),
        backward_cv=coefficient_of_variation(runs.backward_s),
        total_cv=coefficient_of_variation(runs.total_s),
        peak_memory_bytes=peak,
        grad_ready=ready,
        forward_runs_s=tuple(runs.forward_s),
        backward_runs_s=tuple(runs.backward_s),
    )


class Profiler:
    """Measures workloads on one device. Construct once, call :meth:`run` per workload."""

    def __init__(
        self,
        device: torch.device,
        settings: ProfilerSettings = ProfilerSettings(),
        progress: Progress = lambda _message: None,
        warn: Progress = lambda _message: None,
    ) -> None:
        self.device = device
        self.settings = settings
        self.progress, self.warn = progress, warn
        self.stopwatch = Stopwatch(device)
        self.meter = meter_for(device)

    def run(
        self,
        workload: Workload,
        memory_limit_bytes: int | None = None,
        process_limit_bytes: int | None = None,
    ) -> Profile:
        """Profile ``workload``.

        Args:
            memory_limit_bytes: what a step's tensors may hold, instead of the device's
                memory (on a CPU the process may hold that plus what it held before).
            process_limit_bytes: CPU: a bound on the whole process's resident memory
                (``--memory-limit``); default a share of the free memory (profiling/bound.py).

        Raises:
            ResourceError: the workload does not fit even at its smallest batch.
        """
        settings = self.settings
        clock = ProgressClock(self.progress)
        budget = TimeBudget(settings.budget_s, self.stopwatch.now)
        device_info = describe_device(self.device)
        _check_weights_fit(
            workload, memory_limit_bytes or process_limit_bytes or device_info.memory_bytes
        )
        session = _Session(self, workload, clock, budget)
        bound = self._bound(session, device_info, memory_limit_bytes, process_limit_bytes)
        search_settings = self._search_settings()
        from_budget = (
            f" (the step bound is the {settings.budget_s:g} s budget's, not below batch "
            f"{search_settings.time_floor})" if search_settings != settings.search else ""
        )  # fmt: skip
        clock.say(announce(search_settings.max_batch, search_settings.max_step_s, bound,
                           device_info.memory_bytes) + from_budget)  # fmt: skip
        steps = settings.warmup + 2 * settings.repeats + settings.hook_repeats
        probes = SearchProbes(session, bound, self.meter, settings.sampling, steps)
        timed = probes.step_time if search_settings.max_step_s is not None else None
        with frozen_heap():  # one garbage collection for the whole search, not one per probe
            search = find_max_batch(
                probes.peak, bound.limit_bytes, search_settings, session.min_batch, timed
            )
        clock.say(f"B_max = {search.bmax} (limited by {search.limited_by})")
        batches = sorted(set(sample_batches(settings.sampling, search.bmax, session.min_batch)) | {
            b for b in settings.extra_batches if session.min_batch <= b <= search.bmax
        })  # fmt: skip
        samples, problems = session.samples(batches, dict(search.probes))
        profile = self._profile(workload, session, device_info, bound, search, samples, problems)
        for line in budget_lines(budget):
            self.warn(line)
        for line in profile.timing_warnings():
            self.warn(line)
        return profile

    def _search_settings(self):
        """The search's settings, its step bound lowered to what the budget's timing phase
        can afford (profiling/budget.py)."""
        settings = self.settings
        search = settings.search
        if settings.budget_s is None:
            return search
        reference = 3000  # the sampled batches' sum over B_max, at a B_max large enough
        batches = sample_batches(settings.sampling, reference)
        per_bmax = (sum(batches) + sum(settings.extra_batches)) / reference
        step = budget_step_s(settings.budget_s, per_bmax, settings.warmup, settings.repeats)
        if search.max_step_s is None or step < search.max_step_s:
            floor = min(BUDGET_TIME_FLOOR, search.max_batch)
            return replace(search, max_step_s=step, time_floor=max(search.time_floor, floor))
        return search

    def _bound(self, session: _Session, device_info, memory_limit: int | None,
               process_limit: int | None) -> MemoryBound:  # fmt: skip
        if not isinstance(self.meter, CpuPeakMeter):  # a GPU: its memory, tensors only
            given = memory_limit if memory_limit is not None else process_limit
            if given is None:
                return MemoryBound(device_info.memory_bytes, "device")
            return MemoryBound(given, "--memory-limit")
        overhead = max(0, self.meter.settled_rss() - session.resident_bytes())
        # the free memory described with the device: the default and its announcement agree
        return cpu_bound(overhead, device_info.memory_bytes, process_limit, memory_limit)

    def _profile(self, workload: Workload, session: _Session, device_info, bound: MemoryBound,
                 search: BmaxResult, samples: list[LatencySample], problems: dict) -> Profile:  # fmt: skip
        settings = self.settings
        count_batch = workload.example_batch(min(4, search.bmax), self.device)
        settings_record = {
            **asdict(settings),
            "extra_batches": list(settings.extra_batches),  # as JSON will read it back
            "threads": torch.get_num_threads(),
        }
        costs = layer_costs(session.model, workload, session.layers, count_batch)
        activation_bytes = session.activation_bytes_per_sample(search.bmax)
        budget = session.budget
        if budget.left_s() < 0:
            budget.cut(f"spent {budget.spent_s():.0f} s, more than the budget: finding B_max, "
                       "one timing round and the static costs run in any case")  # fmt: skip
        if budget.bounded:
            settings_record["budget"] = budget.record()
        return Profile(
            workload=workload.name,
            dataset=workload.dataset.name,
            options=dict(workload.options),
            device=device_info,
            bmax=search.bmax,
            min_batch=session.min_batch,
            bmax_limited_by=search.limited_by,
            memory=MemoryProfile(
                limit_bytes=bound.limit_bytes,
                limit_source=bound.source,
                resident_bytes=session.resident_bytes(),
                activation_bytes_per_sample=activation_bytes,
                probes=tuple(sorted(search.probes)),
                process_limit_bytes=bound.process_bytes,
                process_overhead_bytes=bound.overhead_bytes,
            ),
            samples=tuple(samples),
            layers=tuple(
                LayerProfile(
                    name=layer.name,
                    param_count=layer.param_count,
                    param_bytes=layer.param_bytes,
                    forward_flops_per_sample=cost.forward_flops,
                    backward_flops_per_sample=cost.backward_flops,
                    output_bytes_per_sample=cost.output_bytes,
                    op_class=layer.op_class.value,
                )
                for layer, cost in zip(session.layers, costs.layers, strict=True)
            ),
            forward_flops_per_sample=costs.forward_flops,
            backward_flops_per_sample=costs.backward_flops,
            op_costs=step_ops(session.model, workload, max(1, min(2, search.bmax // 2)),
                              self.device),
            tensors=count_tensors(session.model),
            settings=settings_record,
            noisy_batches=tuple(problems["noisy"]),
            falling_segments=tuple(problems["falling"]),
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            rightsize_version=__version__,
        )

    def time_batches(self, workload: Workload, batches: list[int]) -> list[LatencySample]:
        """Time ``batches`` exactly as :meth:`run` times its samples (for accuracy checks)."""
        budget = TimeBudget(None, self.stopwatch.now)  # an accuracy check times all it is asked
        session = _Session(self, workload, ProgressClock(self.progress), budget)
        return session.samples(sorted(batches), {})[0]


def budget_lines(budget: TimeBudget) -> list[str]:
    """What the budget cut, one warning line each: never a silent overrun."""
    if not budget.cuts:
        return []
    return [f"time budget {budget.seconds:g} s (--budget-s): {cut}" for cut in budget.cuts]
