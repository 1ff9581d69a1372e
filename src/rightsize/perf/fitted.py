"""What both device models' shipped calibrations share: the fit's provenance and checks.

perf/device_model.py's :class:`Efficiencies` (per operation class) and
perf/op_timing.py's :class:`OpEfficiencies` (per operation) each hold their own fractions
of peak; both carry where they were fitted, their held-out errors and the interval those
give, are read from a JSON file shipped with the package, and refuse a fraction outside
(0, 1]. :class:`Fitted` is that shared part, once; each subclass adds its own fractions
and writes them first, so the files keep their keys and order.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, ClassVar, Self

from rightsize.core.errors import SpecError


@dataclass(frozen=True, kw_only=True)
class Fitted(ABC):
    """A calibration's provenance (keyword-only: each subclass's fractions come first).

    Attributes:
        log_spread: the held-out |log(predicted/measured)| the interval spans (80th percentile).
        source: where the numbers were fitted, for plans to cite.
        held_out: the fit's held-out errors (benchmarks/plan/gpu_predictions.py).
        reference_speedup: how much faster NVIDIA's reference implementations (Deep Learning
            Examples in NGC containers: DALI input, fused kernels and optimizers, channels-last)
            train than the same network written as users write it, which is what the
            fractions above predict; fitted with them on the published rows of both kinds.
    """

    FILE: ClassVar[str]  # the shipped JSON, in the rightsize.perf package
    WHAT: ClassVar[str]  # what errors call it

    log_spread: float = 0.0
    source: str = ""
    held_out: Mapping[str, float] = field(default_factory=dict)
    reference_speedup: float = 1.0

    def fit_dict(self) -> dict:
        return {"log_spread": self.log_spread, "source": self.source,
                "held_out": dict(self.held_out), "reference_speedup": self.reference_speedup}  # fmt: skip

    @staticmethod
    def fit_fields(data: Mapping) -> dict[str, Any]:
        """The provenance from a saved calibration (each optional)."""
        return {"log_spread": float(data.get("log_spread", 0.0)),
                "source": str(data.get("source", "")), "held_out": dict(data.get("held_out", {})),
                "reference_speedup": float(data.get("reference_speedup", 1.0))}  # fmt: skip

    def stack_factor(self, reference: bool) -> float:
        """The throughput factor of a measurement's software stack (1 for users' own code)."""
        return self.reference_speedup if reference else 1.0

    @classmethod
    def missing(cls, exc: Exception) -> SpecError:
        return SpecError(f"{cls.WHAT}: missing or bad field {exc}")

    @classmethod
    def check_fractions(cls, fractions: Iterable[tuple[object, float]]) -> None:
        """Raises: SpecError on a fraction outside (0, 1]."""
        for name, value in fractions:
            if not 0 < value <= 1:
                raise SpecError(f"{cls.WHAT}: {name} = {value} is not in (0, 1]")

    @classmethod
    @abstractmethod
    def from_dict(cls, data: Mapping) -> Self:
        """A saved calibration: each subclass reads its own fractions, then :meth:`fit_fields`."""

    @classmethod
    def shipped(cls) -> Self:
        """The calibration that ships with the package (benchmarks/plan/gpu_predictions.py)."""
        return cls.from_dict(json.loads(resources.files("rightsize.perf").joinpath(cls.FILE)
                                        .read_text()))  # fmt: skip
