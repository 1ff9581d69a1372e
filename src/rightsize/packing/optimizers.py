"""Per-trial optimizers, applied to many trials at once (packing paper §2.2, §3).

Each trial in a pack keeps its own optimizer type and hyper-parameters; the
state an optimizer carries (momentum buffers, Adam's moments, Adagrad's sums)
"is simply stored with the model" (§2.2), so it travels in the trial's
checkpoint. :class:`VectorOptimizer` updates all trials of a pack in a few
calls: trials are grouped by their exact optimizer spec, and each group is
one call of ``torch.optim``'s functional, fused kernels (one pass over each
parameter tensor) over the parameters of every trial in the group. The math is
``torch.optim``'s: with ``fused=True`` the update of a trial is bit-identical
to the same trial's ``torch.optim`` optimizer built with ``fused=True``, and
within float rounding of the default ``torch.optim`` implementation (tested).

Defaults are ``torch.optim``'s so that a trial means the same thing packed and
alone. The packing paper's Table 3 names the optimizers ("Momentum") but not
their coefficients; Momentum is SGD with ``momentum=0.9``, the usual value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.optim import adagrad as _adagrad
from torch.optim import adam as _adam
from torch.optim import sgd as _sgd

from rightsize.core.errors import SpecError, choose, unknown_name
from rightsize.packing.choices import Implementation

#: The optimizer kinds a trial may use (the packing paper's Table 3).
OPTIMIZER_KINDS: tuple[str, ...] = ("sgd", "momentum", "adam", "adagrad")

MOMENTUM = 0.9  # "Momentum": SGD with this coefficient
ADAM_BETAS = (0.9, 0.999)  # torch.optim.Adam's default
ADAM_EPS = 1e-8  # torch.optim.Adam's default
ADAGRAD_EPS = 1e-10  # torch.optim.Adagrad's default
ADAGRAD_INITIAL_ACCUMULATOR = 0.0  # torch.optim.Adagrad's default


#: State tensors per parameter, by optimizer kind (torch.optim's names).
STATE_KEYS: dict[str, tuple[str, ...]] = {
    "sgd": (),
    "momentum": ("momentum_buffer",),
    "adam": ("step", "exp_avg", "exp_avg_sq"),
    "adagrad": ("step", "sum"),
}

#: Parameter-sized state tensors per parameter (for memory estimates).
STATE_TENSORS: dict[str, int] = {"sgd": 0, "momentum": 1, "adam": 2, "adagrad": 1}

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class OptimizerSpec:
    """One trial's optimizer: its kind and hyper-parameters (hashable, so trials group by it)."""

    kind: str
    lr: float
    momentum: float = MOMENTUM
    betas: tuple[float, float] = ADAM_BETAS
    adam_eps: float = ADAM_EPS
    adagrad_eps: float = ADAGRAD_EPS

    def __post_init__(self) -> None:
        if self.kind not in OPTIMIZER_KINDS:
            raise unknown_name("optimizer", str(self.kind), OPTIMIZER_KINDS)
        if not self.lr > 0:
            raise SpecError(f"learning rate must be > 0, got {self.lr!r}")

    def label(self) -> str:
        return f"{self.kind}(lr={self.lr:g})"


def torch_optimizer(
    spec: OptimizerSpec, params, fused: bool | None = None
) -> torch.optim.Optimizer:
    """The ``torch.optim`` optimizer a trial would use alone (the isolation reference)."""
    if spec.kind == "sgd":
        return torch.optim.SGD(params, lr=spec.lr, fused=fused)
    if spec.kind == "momentum":
        return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, fused=fused)
    if spec.kind == "adam":
        return torch.optim.Adam(
            params, lr=spec.lr, betas=spec.betas, eps=spec.adam_eps, fused=fused
        )
    return torch.optim.Adagrad(
        params,
        lr=spec.lr,
        eps=spec.adagrad_eps,
        initial_accumulator_value=ADAGRAD_INITIAL_ACCUMULATOR,
        fused=fused,
    )


def new_state(spec: OptimizerSpec, param: torch.Tensor) -> State:
    """Fresh optimizer state for one parameter, as ``torch.optim`` would create it."""
    step = torch.zeros((), dtype=torch.float32, device=param.device)
    if spec.kind == "adam":
        return {
            "step": step,
            "exp_avg": torch.zeros_like(param),
            "exp_avg_sq": torch.zeros_like(param),
        }
    if spec.kind == "adagrad":
        return {"step": step, "sum": torch.full_like(param, ADAGRAD_INITIAL_ACCUMULATOR)}
    return {}  # SGD has none; Momentum's buffer is made from the first gradient


#: The CPU fused kernels work in 64-byte units (16 float32 numbers) and round a
#: tensor's scalar tail differently from its vectorised body (a contracted
#: multiply-add), so a parameter is updated stacked, several trials in one
#: tensor, only when each trial's part is whole units: then every number takes
#: the path it takes in the trial's own call, and updates stay bit for bit.
STACK_UNIT_ELEMENTS = 16


def stackable(spec: OptimizerSpec, param: torch.Tensor, states: Sequence[State]) -> bool:
    """Whether several trials' states of one parameter (each ``param``-shaped) can be stacked.

    They can when they have the same keys and step count and each trial's part
    is whole kernel units; Momentum's buffer must exist (torch.optim makes it
    from a trial's first gradient).
    """
    if len(states) < 2 or param.numel() % STACK_UNIT_ELEMENTS:
        return False
    keys = {tuple(sorted(state)) for state in states}
    if len(keys) != 1 or (spec.kind == "momentum" and not states[0]):
        return False
    return "step" not in states[0] or len({float(s["step"]) for s in states}) == 1


def stack_state(spec: OptimizerSpec, stacked: torch.Tensor, states: Sequence[State]) -> State:
    """One state for ``stacked`` (``[k, ...]``, k trials' parameter); trials' states become views.

    The trials' step counts are equal (:func:`stackable`), so they share one
    step tensor; each trial's checkpoint still copies its own.
    """
    if not states[0]:
        run = new_state(spec, stacked)
    else:
        run = {
            key: value.clone() if key == "step" else torch.stack([s[key] for s in states])
            for key, value in states[0].items()
        }
    for i, state in enumerate(states):
        state.clear()
        state.update({key: t if key == "step" else t[i] for key, t in run.items()})
    return run


@dataclass
class _Member:
    spec: OptimizerSpec
    params: list[torch.Tensor]
    states: list[State]


class VectorOptimizer:
    """Steps every trial of a pack with its own optimizer, one fused call per distinct spec.

    Args:
        members: per trial (or per run of trials with one spec), its optimizer
            spec, its parameter tensors (views into a fused group's stacked
            parameters, several trials' at once when stacked, or a model's
            own), and one state dict per parameter. State dicts are updated in
            place, so the caller's checkpoint sees them.
    """

    def __init__(
        self,
        members: Sequence[tuple[OptimizerSpec, list[torch.Tensor], list[State]]],
        implementation: Implementation | str = Implementation.FUSED,
    ) -> None:
        implementation = choose(Implementation, implementation, "optimizer implementation")
        fused = implementation is Implementation.FUSED
        self._kernel = {"fused": True} if fused else {"foreach": False}
        self._members = [_Member(spec, list(params), states) for spec, params, states in members]
        self._groups: dict[OptimizerSpec, list[int]] = {}
        for index, member in enumerate(self._members):
            self._groups.setdefault(member.spec, []).append(index)
            for param, state in zip(member.params, member.states, strict=True):
                if not state:
                    state.update(new_state(member.spec, param))

    @property
    def units(self) -> int:
        """Members: trials, or runs of trials updated stacked."""
        return len(self._members)

    def step(self, grads: Sequence[Sequence[torch.Tensor]]) -> None:
        """Apply one update; ``grads[i]`` are trial ``i``'s gradients, in its parameter order."""
        with torch.no_grad():
            for spec, indices in self._groups.items():
                params, states, grad_list = [], [], []
                for i in indices:
                    member = self._members[i]
                    for param, state, grad in zip(
                        member.params, member.states, grads[i], strict=True
                    ):
                        if grad is not None:  # like torch.optim, skip parameters without a gradient
                            params.append(param)
                            states.append(state)
                            grad_list.append(grad)
                if params:
                    _UPDATES[spec.kind](spec, params, grad_list, states, self._kernel)


def _update_sgd(spec: OptimizerSpec, params, grads, states, kernel: dict) -> None:
    _sgd.sgd(
        params, grads, [None] * len(params), **kernel, weight_decay=0.0, momentum=0.0,
        lr=spec.lr, dampening=0.0, nesterov=False, maximize=False,
    )  # fmt: skip


def _update_momentum(spec: OptimizerSpec, params, grads, states, kernel: dict) -> None:
    # The fused kernel treats a call as a first step only when every buffer is
    # missing, so trials on their first step and resumed ones are updated apart.
    fresh = [i for i, state in enumerate(states) if "momentum_buffer" not in state]
    resumed = [i for i, state in enumerate(states) if "momentum_buffer" in state]
    for chosen in (fresh, resumed):
        if not chosen:
            continue
        buffers = [states[i].get("momentum_buffer") for i in chosen]
        _sgd.sgd(
            [params[i] for i in chosen], [grads[i] for i in chosen], buffers, **kernel,
            weight_decay=0.0, momentum=spec.momentum, lr=spec.lr, dampening=0.0,
            nesterov=False, maximize=False,
        )  # fmt: skip
        for i, buffer in zip(chosen, buffers, strict=True):
            states[i]["momentum_buffer"] = (
                buffer  # made from the first gradient, as torch.optim does
            )


def _update_adam(spec: OptimizerSpec, params, grads, states, kernel: dict) -> None:
    _adam.adam(
        params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
        [s["step"] for s in states], **kernel, amsgrad=False, beta1=spec.betas[0],
        beta2=spec.betas[1], lr=spec.lr, weight_decay=0.0, eps=spec.adam_eps, maximize=False,
    )  # fmt: skip


def _update_adagrad(spec: OptimizerSpec, params, grads, states, kernel: dict) -> None:
    _adagrad.adagrad(
        params, grads, [s["sum"] for s in states], [s["step"] for s in states], **kernel,
        lr=spec.lr, weight_decay=0.0, lr_decay=0.0, eps=spec.adagrad_eps, maximize=False,
    )  # fmt: skip


_UPDATES = {
    "sgd": _update_sgd,
    "momentum": _update_momentum,
    "adam": _update_adam,
    "adagrad": _update_adagrad,
}
