"""The pack gate: time a pack against its trials alone before committing to it (beyond the paper).

pack_opt (§5.3) groups trials by similarity and memory only: it takes for
granted that a pack trains faster than its trials one after another. On this
CPU that holds for MLP-3 (IMPV +0.28 to +0.35) and fails for the small CNN
(IMPV -0.03 at two trials to -1.48 at eight; benchmarks/tune/packing_step.py):
grouped convolutions and padding cost more than the pack saves. The gate
measures instead of assuming. For each group pack_opt proposes it trains a
few steps of the pack, and of each member alone with plain PyTorch, on
throw-away copies drawn from the trials' seeds — the trials themselves are
not touched, so no loss and no promotion can change — and keeps the pack
only if its step beats its members' steps summed by ``min_gain`` (the
paper's IMPV, ``(T_alone - T_pack) / T_alone``). A pack that loses is halved
and each half asked again, down to one trial each, which then train alone.

Measuring costs what it measures: training steps that count for no trial.
So a pack's measurement is reused for every later group of its *kind* — the
same size class (the next power of two), one architecture (fused) or several
— and a trial's step alone is not measured per batch size but read from a
line through two measurements per architecture, at the space's smallest and
largest batch (a step's time is close to affine in the batch: Srift's compute
model, docs/profiling.md). Keyed finer, on the architectures and on every
batch and optimizer, the first version spent 67 s of a 325 s search (the
small CNN on 32x32 images, R = 27, 5 steps per unit) measuring. Alone step times are kept per architecture, batch size and
optimizer kind. Every measurement is kept (:attr:`PackGate.probes`) for the
search's report.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from rightsize.core.errors import SpecError
from rightsize.packing.alone import AloneTrainer
from rightsize.packing.data import DataStream
from rightsize.packing.pack import Clock, PackSettings, load, pack
from rightsize.packing.trial import Architectures, ModelOptions, TrialSpec, TrialState

#: Steps run before timing: the first steps allocate and create optimizer state.
WARMUP_STEPS = 1
#: Steps timed per measurement; the median is kept (one slow step on a shared CPU is noise).
TIMED_STEPS = 3
#: A pack must beat its members alone by this fraction of their time (IMPV): a pack
#: also pays switches (checkpoint and repack) that a few timed steps do not show.
MIN_GAIN = 0.05


@dataclass(frozen=True)
class ProbeSettings:
    """Whether and how the gate measures packs.

    Attributes:
        enabled: measure (False: commit to pack_opt's groups, as the paper does).
        warmup_steps, timed_steps: steps run untimed, then timed, per measurement.
        min_gain: the IMPV a pack must reach to be kept.
    """

    enabled: bool = True
    warmup_steps: int = WARMUP_STEPS
    timed_steps: int = TIMED_STEPS
    min_gain: float = MIN_GAIN

    def __post_init__(self) -> None:
        if self.warmup_steps < 0 or self.timed_steps < 1:
            raise SpecError(
                f"pack probe: warmup steps must be >= 0 and timed steps >= 1, got "
                f"{self.warmup_steps} and {self.timed_steps}"
            )
        if not -1 < self.min_gain < 1:
            raise SpecError(f"pack probe: min gain must be in (-1, 1), got {self.min_gain}")


@dataclass(frozen=True)
class PackProbe:
    """One measurement: a pack's step against its members' steps alone, summed."""

    trial_ids: tuple[str, ...]
    architectures: tuple[ModelOptions, ...]
    batch_sizes: tuple[int, ...]
    pack_s: float
    alone_s: float
    min_gain: float

    @property
    def gain(self) -> float:
        """IMPV: the share of the members' alone time the pack saves (negative: it costs)."""
        return (self.alone_s - self.pack_s) / self.alone_s

    @property
    def packed(self) -> bool:
        return self.gain >= self.min_gain

    def as_dict(self) -> dict:
        return {
            "trials": len(self.trial_ids),
            "trial_ids": list(self.trial_ids),
            "architectures": [dict(a) for a in self.architectures],
            "batch_sizes": list(self.batch_sizes),
            "pack_ms_per_step": self.pack_s * 1e3,
            "alone_ms_per_step": self.alone_s * 1e3,
            "gain": self.gain,
            "packed": self.packed,
        }

    def describe(self) -> str:
        kinds = "; ".join(
            " ".join(f"{k}={v}" for k, v in a) or "one model" for a in self.architectures
        )
        verdict = "pack" if self.packed else "split"
        return (
            f"{len(self.trial_ids)} trials ({kinds}): packed {self.pack_s * 1e3:.2f} ms/step, "
            f"alone {self.alone_s * 1e3:.2f} ms/step summed, IMPV {self.gain:+.2f} -> {verdict}"
        )


def size_class(n: int) -> int:
    """The next power of two at or above ``n``: groups of one class share a measurement."""
    return 1 << (n - 1).bit_length()


class PackGate:
    """Measures proposed packs and splits those slower than their trials alone.

    Args:
        architectures: builds each trial's workload.
        stream: the search's data stream (read, never advanced: it is step-indexed).
        device: where trials train.
        pack_settings: how packs are built (measured as they will train).
        fused_optimizer: the kernels trials alone use (``torch.optim(fused=True)`` or not).
        batch_range: the space's smallest and largest batch size (where alone steps are timed).
        settings: steps and threshold.
        progress: told of each new measurement.
        clock: wall-clock seconds.
    """

    def __init__(
        self,
        architectures: Architectures,
        stream: DataStream,
        device: torch.device,
        pack_settings: PackSettings,
        fused_optimizer: bool,
        batch_range: tuple[int, int],
        settings: ProbeSettings = ProbeSettings(),
        progress: Callable[[str], None] = lambda _line: None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self.architectures, self.stream, self.device = architectures, stream, device
        self.pack_settings, self.fused_optimizer = pack_settings, fused_optimizer
        self.batch_range = batch_range
        self.settings, self._progress, self._clock = settings, progress, clock
        self.probes: list[PackProbe] = []
        self.seconds = 0.0  # spent measuring
        self._verdicts: dict[tuple, PackProbe] = {}
        self._alone: dict[ModelOptions, tuple[float, float]] = {}  # seconds at the two batches

    def admit(self, groups: list[list[TrialSpec]]) -> list[list[TrialSpec]]:
        """``groups`` with every pack that loses to its trials alone split, recursively in halves."""
        admitted: list[list[TrialSpec]] = []
        for group in groups:
            admitted += self._admit(group)
        return admitted

    def _admit(self, group: list[TrialSpec]) -> list[list[TrialSpec]]:
        if len(group) == 1 or self._verdict(group).packed:
            return [group]
        half = (len(group) + 1) // 2
        return self._admit(group[:half]) + self._admit(group[half:])

    def _verdict(self, group: list[TrialSpec]) -> PackProbe:
        # what a pack's speed hangs on: how many trials, and whether they fuse into one
        # group (one architecture) or train side by side on the general path
        key = (size_class(len(group)), len({t.architecture for t in group}) == 1)
        if key not in self._verdicts:
            start = self._clock()
            with torch.random.fork_rng(devices=[]):  # the probes draw no number a trial would
                probe = self._measure(group)
            self.seconds += self._clock() - start
            self._verdicts[key] = probe
            self.probes.append(probe)
            self._progress(f"pack gate: {probe.describe()}")
        return self._verdicts[key]

    def _measure(self, group: Sequence[TrialSpec]) -> PackProbe:
        loaded = [load(TrialState(spec), self.architectures, self.device) for spec in group]
        pack_s = self._step_seconds(pack(loaded, self.stream, self.pack_settings).train_step)
        alone_s = sum(self._alone_seconds(spec) for spec in group)
        return PackProbe(
            tuple(t.trial_id for t in group), tuple(sorted({t.architecture for t in group})),
            tuple(t.batch_size for t in group), pack_s, alone_s, self.settings.min_gain,
        )  # fmt: skip

    def _alone_seconds(self, spec: TrialSpec) -> float:
        """One step of ``spec`` alone: on the line through its architecture's two measurements."""
        low, high = self.batch_range
        if spec.architecture not in self._alone:
            self._alone[spec.architecture] = tuple(
                self._step_seconds(AloneTrainer(
                    TrialState(replace(spec, batch_size=batch)), self.architectures, self.stream,
                    self.device, self.fused_optimizer,
                ).train_step)
                for batch in (low, high)
            )  # fmt: skip
        at_low, at_high = self._alone[spec.architecture]
        if high == low:
            return at_low
        return at_low + (at_high - at_low) * (spec.batch_size - low) / (high - low)

    def _step_seconds(self, step: Callable[[], object]) -> float:
        """Median seconds of one ``step()`` after the warm-up steps."""
        for _ in range(self.settings.warmup_steps):
            step()
        self._synchronize()
        times = []
        for _ in range(self.settings.timed_steps):
            start = self._clock()
            step()
            self._synchronize()
            times.append(self._clock() - start)
        return statistics.median(times)

    def _synchronize(self) -> None:
        if self.device.type == "cuda":  # kernels run asynchronously: wait before reading the clock
            torch.cuda.synchronize(self.device)
