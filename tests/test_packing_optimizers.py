"""Vectorized per-trial optimizers against torch.optim, trial by trial."""

from __future__ import annotations

import pytest
import torch

from rightsize.core.errors import SpecError, UnknownNameError
from rightsize.packing.optimizers import OptimizerSpec, VectorOptimizer, torch_optimizer

SPECS = [
    OptimizerSpec("sgd", 0.1),
    OptimizerSpec("momentum", 0.05),
    OptimizerSpec("adam", 0.01),
    OptimizerSpec("adagrad", 0.1),
    OptimizerSpec("adam", 0.001),  # a second Adam with its own learning rate
    OptimizerSpec("momentum", 0.05),  # same spec as trial 1: one fused call for both
]
SHAPES = [(4, 3), (4,)]


def _run(make_reference, steps=4):
    """Each trial's params as views of stacked tensors, stepped by VectorOptimizer, vs alone."""
    gen = torch.Generator().manual_seed(0)
    stacked = [torch.randn(len(SPECS), *shape, generator=gen) for shape in SHAPES]
    grads = [
        [torch.randn(len(SPECS), *shape, generator=gen) for shape in SHAPES] for _ in range(steps)
    ]
    states = [[{} for _ in SHAPES] for _ in SPECS]
    members = [(spec, [p[i] for p in stacked], states[i]) for i, spec in enumerate(SPECS)]
    alone = [[torch.nn.Parameter(p[i].clone()) for p in stacked] for i in range(len(SPECS))]
    references = [make_reference(spec, params) for spec, params in zip(SPECS, alone, strict=True)]
    optimizer = VectorOptimizer(members)
    for step_grads in grads:
        optimizer.step([[g[i] for g in step_grads] for i in range(len(SPECS))])
        for i, reference in enumerate(references):
            for param, grad in zip(alone[i], step_grads, strict=True):
                param.grad = grad[i].clone()
            reference.step()
    return stacked, alone, states, references


def test_matches_torch_optim_fused_bit_for_bit():
    stacked, alone, states, references = _run(lambda spec, p: torch_optimizer(spec, p, fused=True))
    for i in range(len(SPECS)):
        for p, ref in zip(stacked, alone[i], strict=True):
            assert torch.equal(p[i], ref.detach()), SPECS[i]
        for state, ref in zip(states[i], alone[i], strict=True):
            for key, value in references[i].state[ref].items():
                assert torch.equal(state[key], value), (SPECS[i], key)


def test_matches_torch_optim_default_within_rounding():
    stacked, alone, _, _ = _run(lambda spec, p: torch_optimizer(spec, p))
    for i in range(len(SPECS)):
        for p, ref in zip(stacked, alone[i], strict=True):
            torch.testing.assert_close(p[i], ref.detach(), rtol=1e-6, atol=1e-7)


def test_fresh_and_resumed_momentum_trials_step_together():
    # trial 0 resumes with a momentum buffer, trial 1 starts: each must match torch.optim
    params = [torch.zeros(3), torch.zeros(3)]
    spec = OptimizerSpec("momentum", 0.1)
    states = [[{"momentum_buffer": torch.ones(3)}], [{}]]
    VectorOptimizer([(spec, [params[0]], states[0]), (spec, [params[1]], states[1])]).step(
        [[torch.ones(3)], [torch.ones(3)]]
    )
    # resumed: buf = 0.9 * 1 + 1 = 1.9, p = -0.19; fresh: buf = g = 1, p = -0.1
    torch.testing.assert_close(params[0], torch.full((3,), -0.19))
    torch.testing.assert_close(params[1], torch.full((3,), -0.1))
    torch.testing.assert_close(states[1][0]["momentum_buffer"], torch.ones(3))


def test_parameters_without_gradient_are_skipped_like_torch_optim():
    param, state = torch.ones(2), {}
    VectorOptimizer([(OptimizerSpec("adam", 0.1), [param], [state])]).step([[None]])
    assert torch.equal(param, torch.ones(2)) and state["step"].item() == 0


def test_bad_specs():
    with pytest.raises(UnknownNameError, match="did you mean 'adam'"):
        OptimizerSpec("adma", 0.1)
    with pytest.raises(SpecError, match="learning rate must be > 0"):
        OptimizerSpec("sgd", 0.0)
