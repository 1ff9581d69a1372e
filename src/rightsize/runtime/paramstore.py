"""A parameter server's state: its tensors, their optimizer, and the log of what it applied.

The PS applies each pushed gradient asynchronously (DLRover §5.3: "each PS
updates parameters with gradients from a worker independently"), embedding
tables with sparse updates of the touched rows only. Every push carries its
batch key ``(epoch, shard, batch)`` and the sample indices it was computed on;
the store applies a key at most once and logs ``(key, indices)``, which is both
the deduplication that makes replays after a failure safe and the accounting
that tests read.

Tensors that move between servers (adding, removing or replacing a PS) carry
their history with them. A *group* is a set of tensors with one update
history; a PS normally has one, but a worker that died between its pushes to
two servers leaves a key applied on one and not the other, and if a
repartition then mixes their tensors on one server, those tensors keep separate
logs until a replay brings them level. Groups with identical histories merge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from rightsize.core.spec import Optimizer
from rightsize.runtime.shards import Key

SparseGrad = tuple[torch.Tensor, torch.Tensor]  # (unique sorted row ids [n], values [n, dim])


@dataclass(frozen=True)
class OptimSettings:
    """The optimizer the job file names (``training``)."""

    kind: Optimizer = Optimizer.ADAGRAD
    lr: float = 0.01
    momentum: float = 0.0


def make_optimizer(settings: OptimSettings, params: list[nn.Parameter], sparse: bool):
    """A torch optimizer over ``params``; ``sparse`` ones take sparse gradients.

    SGD and Adagrad accept sparse gradients; Adam does not, so sparse tables get
    ``SparseAdam`` (the same update restricted to the touched rows).
    """
    if not params:
        return None
    if settings.kind == Optimizer.SGD:
        return torch.optim.SGD(params, lr=settings.lr, momentum=settings.momentum)
    if settings.kind == Optimizer.ADAGRAD:
        return torch.optim.Adagrad(params, lr=settings.lr)
    if sparse:
        return torch.optim.SparseAdam(params, lr=settings.lr)
    return torch.optim.Adam(params, lr=settings.lr)


@dataclass
class Group:
    """Tensors that share one update history: the keys applied to them, with indices."""

    names: set[str]
    log: list[tuple[Key, np.ndarray]] = field(default_factory=list)
    applied: set[Key] = field(default_factory=set)

    @classmethod
    def from_log(cls, names: Iterable[str], log: list[tuple[Key, np.ndarray]]) -> Group:
        entries = [(tuple(int(k) for k in key), idx) for key, idx in log]
        return cls(set(names), entries, {key for key, _ in entries})


class ParamStore:
    """The tensors one PS owns, their optimizers and their update log."""

    def __init__(
        self,
        tensors: Mapping[str, torch.Tensor],
        sparse: Iterable[str],
        settings: OptimSettings,
        groups: list[Group] | None = None,
        optimizer_state: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        self.params = {name: nn.Parameter(t.detach().clone()) for name, t in tensors.items()}
        self.sparse = set(sparse) & set(self.params)
        self.dense_names = sorted(set(self.params) - self.sparse)
        self.settings = settings
        self._dense_opt = make_optimizer(
            settings, [self.params[n] for n in self.dense_names], False
        )
        sparse_params = [self.params[n] for n in sorted(self.sparse)]
        self._sparse_opt = make_optimizer(settings, sparse_params, True)
        self.groups = groups if groups is not None else [Group(set(self.params))]
        self.updates = 0
        for name, state in (optimizer_state or {}).items():
            if name in self.params:
                self._optimizer_for(name).state[self.params[name]] = dict(state)

    # -- serving ------------------------------------------------------------------
    def dense_values(self) -> list[torch.Tensor]:
        """Current values of the dense tensors, in ``dense_names`` order."""
        return [self.params[n].detach() for n in self.dense_names]

    def rows(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` of sparse table ``name``."""
        return self.params[name].detach().index_select(0, ids)

    def apply(
        self,
        key: Key,
        indices: np.ndarray,
        dense: Mapping[str, torch.Tensor],
        sparse: Mapping[str, SparseGrad],
    ) -> bool:
        """Apply one batch's gradients to every group that has not applied ``key`` yet.

        Returns:
            True if any group applied it, False if it was a duplicate everywhere.
        """
        pending = [g for g in self.groups if key not in g.applied]
        if not pending:
            return False
        for group in pending:
            for name in group.names:
                self._set_grad(name, dense, sparse)
            group.applied.add(key)
            group.log.append((key, indices))
        for opt in (self._dense_opt, self._sparse_opt):
            if opt is not None:
                opt.step()
                opt.zero_grad(set_to_none=True)
        self.updates += 1
        return True

    @property
    def applied_keys(self) -> int:
        return max((len(g.applied) for g in self.groups), default=0)

    # -- checkpoints and repartitioning ---------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A detached copy of everything (safe to write from another thread)."""
        optim = {}
        for name, param in self.params.items():
            state = self._optimizer_for(name).state.get(param, {})
            optim[name] = {k: v.clone() if torch.is_tensor(v) else v for k, v in state.items()}
        return {
            "params": {n: p.detach().clone() for n, p in self.params.items()},
            "sparse": sorted(self.sparse),
            "optim": optim,
            "groups": [
                {"names": sorted(g.names), "log": [(k, idx.copy()) for k, idx in g.log]}
                for g in self.groups
            ],
        }

    @classmethod
    def from_states(
        cls, states: Iterable[Mapping[str, Any]], names: Iterable[str], settings: OptimSettings
    ) -> ParamStore:
        """Build the store for ``names`` from other stores' :meth:`state_dict` s.

        Raises:
            KeyError: a requested tensor is in none of the states.
        """
        wanted = set(names)
        tensors, optim, sparse, groups = {}, {}, set(), []
        for state in states:
            mine = wanted & set(state["params"])
            tensors.update({n: state["params"][n] for n in mine})
            optim.update({n: state["optim"].get(n, {}) for n in mine})
            sparse |= set(state["sparse"]) & mine
            for g in state["groups"]:
                if set(g["names"]) & mine:
                    groups.append(Group.from_log(set(g["names"]) & mine, g["log"]))
        missing = wanted - set(tensors)
        if missing:
            raise KeyError(f"tensors in no saved state: {sorted(missing)}")
        return cls(tensors, sparse, settings, merge_groups(groups), optim)

    # -- internals ----------------------------------------------------------------
    def _optimizer_for(self, name: str):
        return self._sparse_opt if name in self.sparse else self._dense_opt

    def _set_grad(self, name: str, dense: Mapping, sparse: Mapping) -> None:
        param = self.params[name]
        if name in self.sparse:
            ids, values = sparse[name]
            # a worker's ids are coalesced (model_io.gradients): marking them so keeps
            # the optimizer from sorting and summing them again (0.5 of 2.5 ms per
            # wide-deep step, 52 tables)
            param.grad = torch.sparse_coo_tensor(
                ids.unsqueeze(0), values, param.shape, check_invariants=False, is_coalesced=True
            )
        else:
            param.grad = dense[name].view_as(param).to(param.dtype)


def warm_up(settings: OptimSettings) -> None:
    """Pay torch's one-time costs of building and stepping an optimizer (about a second of
    imports) now, at startup, rather than inside a repartition while workers are halted."""
    store = ParamStore({"w": torch.zeros(2, 2)}, {"w"}, settings)
    grad = (torch.tensor([0]), torch.ones(1, 2))
    store.apply((-1, -1, -1), np.zeros(1, dtype=np.int32), {}, {"w": grad})
    dense = ParamStore({"b": torch.zeros(2)}, (), settings)
    dense.apply((-1, -1, -1), np.zeros(1, dtype=np.int32), {"b": torch.ones(2)}, {})


def merge_groups(groups: list[Group]) -> list[Group]:
    """Merge groups whose applied keys are identical (the common case: into one)."""
    merged: list[Group] = []
    for group in groups:
        twin = next((m for m in merged if m.applied == group.applied), None)
        if twin is None:
            merged.append(group)
        else:
            twin.names |= group.names
    return merged
