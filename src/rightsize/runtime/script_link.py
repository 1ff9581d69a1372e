"""The one link, inside a rank's process, between the user's script and rightsize's launcher.

A script imports :class:`rightsize.torch.ElasticSampler` without being handed anything,
just as it calls ``torch.distributed.init_process_group()`` without arguments and finds
its group in the environment: the sampler must find the master the launcher talks to.
That is why this one piece of state is process-wide — the launcher (``runtime/
script_rank.py``) attaches itself before it runs the script, and nothing else in
rightsize reads it. Under plain ``torchrun`` nothing is attached and the sampler
falls back to ``DistributedSampler``'s behaviour.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class SampleSource(Protocol):
    """What an ElasticSampler needs from the launcher."""

    def new_stream(self) -> int:
        """A number for a new sampler: the process's samplers in creation order."""

    def samples(self, stream: int, epoch: int, step: int, dataset_size: int, batch_size: int,
                seed: int, shuffle: bool) -> tuple[np.ndarray, int, bool]:  # fmt: skip
        """This rank's indices of ``step``; the group's steps in the epoch; whether the epoch
        has no such step."""


_source: SampleSource | None = None


def attach(source: SampleSource | None) -> None:
    global _source
    _source = source


def current() -> SampleSource | None:
    return _source
