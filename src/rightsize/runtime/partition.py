"""Placing parameter tensors on parameter servers, by tensor, balanced by bytes.

TensorFlow's PS strategy, which DLRover runs, places whole variables on PS
nodes; DLRover §4.2 notes that "some tensors are possible to have larger size",
so one PS can be hot (Fig. 6). We place whole tensors too, largest first on the
PS holding the fewest bytes (the LPT heuristic), so the byte imbalance is at
most one tensor. A replacement (same number of PS, one swapped for another)
keeps every other tensor where it is and moves only the replaced PS's tensors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def partition_by_bytes(sizes: Mapping[str, int], ps_names: Sequence[str]) -> dict[str, str]:
    """Map each tensor name to a PS name: largest tensor first onto the lightest PS.

    Ties break by tensor name and by the order of ``ps_names``, so the result is
    deterministic.

    Raises:
        ValueError: no parameter servers to place on.
    """
    if not ps_names:
        raise ValueError("cannot partition parameters over zero parameter servers")
    load = {name: 0 for name in ps_names}
    placement = {}
    for tensor in sorted(sizes, key=lambda t: (-sizes[t], t)):
        target = min(ps_names, key=lambda p: load[p])
        placement[tensor] = target
        load[target] += sizes[tensor]
    return placement


def repartition(
    old: Mapping[str, str], sizes: Mapping[str, int], ps_names: Sequence[str]
) -> dict[str, str]:
    """The placement for a new PS set: a one-for-one swap moves only the swapped PS's
    tensors; any other change re-balances everything by bytes."""
    gone = sorted(set(old.values()) - set(ps_names))
    new = [p for p in ps_names if p not in set(old.values())]
    if len(gone) == len(new) and len(set(old.values())) == len(ps_names):
        swap = dict(zip(gone, new, strict=True))
        return {tensor: swap.get(ps, ps) for tensor, ps in old.items()}
    return partition_by_bytes(sizes, ps_names)


def names_on(placement: Mapping[str, str], ps: str) -> tuple[str, ...]:
    """The tensors ``placement`` puts on server ``ps``, sorted (what it loads and serves)."""
    return tuple(sorted(t for t, holder in placement.items() if holder == ps))


def bytes_per_ps(placement: Mapping[str, str], sizes: Mapping[str, int]) -> dict[str, int]:
    """Bytes each PS holds under ``placement``."""
    totals: dict[str, int] = {}
    for tensor, ps in placement.items():
        totals[ps] = totals.get(ps, 0) + sizes[tensor]
    return totals
