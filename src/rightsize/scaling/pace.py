"""The clock a policy counts its own durations on: the mechanism's metric interval.

The papers give their windows as counts of metric samples — NEARCHUS's stability
detector wants ``N_comp = 5`` samples with a CV below 5% — or as durations that
assume samples about a minute apart: NEARCHUS reaches stability in "5 to 8
minutes", Optimus (as NEARCHUS §V runs it) adds a node "every 10 minutes". A
cluster job runs for hours, so a minute per sample costs it nothing; a job on
one machine runs for minutes, and at a minute per sample no policy would act
before it ended (issue 17: NEARCHUS made no decision in a 77 s job).

So a policy's own durations are counted in metric intervals, and the counts are
the papers': one interval per stability sample, ten per Optimus step. Only the
interval — the clock — differs: the simulator keeps the papers' minute
(:data:`PAPER_METRIC_INTERVAL_S`, ``SimConfig.metric_interval_s``), the runtime
samples every ``runtime.metric_interval`` (2 s by default, see
docs/runtime.md). Durations the papers fix in seconds whatever the sampling —
DLRover's sample stage of "100 steps or 60 s", whichever comes first — stay in
seconds. A job file may still set any duration explicitly.
"""

from __future__ import annotations

#: The metric interval the papers' durations assume: one sample a minute (NEARCHUS §IV's five
#: stability samples in "5 to 8 minutes"; the simulator's default).
PAPER_METRIC_INTERVAL_S = 60.0


def paced(explicit_s: float | None, intervals: float, metric_interval_s: float) -> float:
    """A duration: ``explicit_s`` if the user gave one, else ``intervals`` metric intervals."""
    return explicit_s if explicit_s is not None else intervals * metric_interval_s
