"""Bounds on the numbers users type, and the one check that enforces them.

A number outside these bounds is not a harder job but a typo (``1e20`` for a
batch, ``-5`` samples) or a request no machine can serve; refusing it at once,
with the field, the value and the rule, beats a traceback or an hour of work.
Each bound is documented with why it is where it is; each is far from any real
use. The command line (``cli/args.py``) and the job file (``core/spec.py``)
use the same constants, so the two cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rightsize.core.errors import SpecError

#: Samples per step (one device's batch, or a plan's global batch): 2^24, far above the
#: largest batches trained (LAMB's 64k; 1M-sample global batches on TPU pods).
MAX_BATCH = 2**24
#: Training steps of one job: 10^9, more than any job has run (GPT-3: ~10^5 steps).
MAX_ITERATIONS = 10**9
#: Samples in one epoch of a synthetic dataset: 10^8 (ImageNet-21k has 1.4·10^7). The runtime
#: keeps an epoch's sample order and its exactly-once counts in memory, 16 bytes a sample.
MAX_DATASET_SAMPLES = 10**8
#: Epochs of one job: 10^5 (papers train for at most a few thousand).
MAX_EPOCHS = 10**5
#: Random seeds: 0 .. 2^32 - 1, what every generator here (numpy, torch) accepts.
MAX_SEED = 2**32 - 1
#: Timed or warm-up repetitions of one measurement: a median settles long before 10^4.
MAX_REPEATS = 10**4
#: VMs of one instance type in a plan: 10^4, beyond any cloud account's quota.
MAX_INSTANCES = 10**4
#: torch intra-op threads: 1024, past any machine's cores (a million fails allocating stacks).
MAX_THREADS = 1024
#: Relaunches of one failed node: a node that failed 100 times will not recover on the 101st.
MAX_RESTARTS = 100
#: Workers (ranks) of one job: 4096, a torchrun group far past one host; the master serves
#: every one of them from one loop.
MAX_WORKERS = 4096
#: Time intervals a job file sets (checkpoint, metrics, timeouts): at most a day.
MAX_INTERVAL_S = 86_400.0


@dataclass(frozen=True)
class Bound:
    """An allowed range: ``low`` (inclusive, or exclusive if ``low_open``) to ``high``.

    ``why`` is said after the rule when a value is refused. NaN is never accepted; infinity
    only with ``allow_infinite`` (for settings where it means "no limit").
    """

    low: float | None = None
    high: float | None = None
    integer: bool = False
    low_open: bool = False
    why: str = ""
    allow_infinite: bool = False

    def rule(self) -> str:
        """``"a whole number from 1 to 2^24"``, ``"a finite number > 0"``."""
        kind = "a whole number" if self.integer else "a number"
        kind = kind if self.integer or self.allow_infinite else "a finite number"
        op = ">" if self.low_open else ">="
        if self.low is not None and self.high is not None and not self.low_open:
            return f"{kind} from {_show(self.low)} to {_show(self.high)}"
        parts = [f"{op} {_show(self.low)}" if self.low is not None else "",
                 f"<= {_show(self.high)}" if self.high is not None else ""]  # fmt: skip
        return " ".join([kind, " and ".join(p for p in parts if p)]).strip()

    def check(self, value: object, field: str) -> int | float:
        """``value`` if it is within the bound.

        Raises:
            SpecError: ``"FIELD VALUE: must be RULE (WHY)"``.
        """
        if not self.accepts(value):
            why = f" ({self.why})" if self.why else ""
            raise SpecError(f"{field} {value!r}: must be {self.rule()}{why}")
        return value  # type: ignore[return-value]

    def accepts(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if math.isnan(value) or (math.isinf(value) and not self.allow_infinite):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high


def _show(number: float) -> str:
    if float(number).is_integer() and abs(number) >= 10**5:
        exponent = math.log10(abs(number))
        if exponent.is_integer():
            return f"10^{int(exponent)}"
        exponent = math.log2(abs(number))
        if exponent.is_integer():
            return f"2^{int(exponent)}"
    return f"{number:,}" if float(number).is_integer() else f"{number:g}"


BATCH = Bound(1, MAX_BATCH, integer=True)
ITERATIONS = Bound(1, MAX_ITERATIONS, integer=True)
DATASET_SAMPLES = Bound(
    1, MAX_DATASET_SAMPLES, integer=True, why="an epoch's order is held in memory"
)
SEED = Bound(0, MAX_SEED, integer=True)
REPEATS = Bound(1, MAX_REPEATS, integer=True)
WARMUP = Bound(0, MAX_REPEATS, integer=True)
INSTANCES = Bound(1, MAX_INSTANCES, integer=True)
THREADS = Bound(1, MAX_THREADS, integer=True)
WORKERS = Bound(1, MAX_WORKERS, integer=True)
RESTARTS = Bound(0, MAX_RESTARTS, integer=True)
COUNT = Bound(1, None, integer=True)
POSITIVE = Bound(0, None, low_open=True)
NON_NEGATIVE = Bound(0, None)
