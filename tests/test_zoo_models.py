"""Tests for the plain-PyTorch model zoo in ``rightsize.workloads.models``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from rightsize.workloads import models
from rightsize.workloads.models import (
    ACTIVATIONS,
    DEFAULT_CRITEO_CARDINALITIES,
    bilstm_classifier,
    deepfm,
    gpt_small,
    mlp3,
    small_cnn,
    wide_and_deep,
)

BUILDER_NAMES = (
    "mlp3",
    "small_cnn",
    "resnet18",
    "resnet18_cifar",
    "resnet50",
    "mobilenet_v2",
    "densenet121",
    "vgg19",
    "gpt_small",
    "bilstm_classifier",
    "wide_and_deep",
    "deepfm",
)
MODEL_BUILDERS: dict[str, Callable[..., nn.Module]] = {n: getattr(models, n) for n in BUILDER_NAMES}

# Published torchvision parameter counts at the ImageNet defaults (1000 classes).
IMAGENET_PARAM_COUNTS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "mobilenet_v2": 3_504_872,
    "densenet121": 7_978_856,
    "vgg19": 143_667_240,
}

BATCH = 2
SEQ_LEN = 16


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _images(channels: int = 3, hw: int = 32) -> tuple[torch.Tensor, ...]:
    return (torch.randn(BATCH, channels, hw, hw),)


def _tokens(vocab: int = 8192) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, vocab, (BATCH, SEQ_LEN)),)


def _criteo(cardinalities=DEFAULT_CRITEO_CARDINALITIES) -> tuple[torch.Tensor, ...]:
    dense = torch.randn(BATCH, 13)
    sparse = torch.stack([torch.randint(0, c, (BATCH,)) for c in cardinalities], dim=1)
    return dense, sparse


# builder name -> (make inputs, expected output shape), all at the builder's defaults.
FORWARD_CASES: dict[str, tuple[Callable[[], tuple[torch.Tensor, ...]], tuple[int, ...]]] = {
    "mlp3": (lambda: (torch.randn(BATCH, 64),), (BATCH, 10)),
    "small_cnn": (_images, (BATCH, 10)),
    "resnet18": (_images, (BATCH, 1000)),
    "resnet18_cifar": (_images, (BATCH, 10)),
    "resnet50": (_images, (BATCH, 1000)),
    # At 32x32 MobileNetV2's last stages are 1x1 spatially, where every consumer
    # of the residual stream is conv -> train-mode BN, which cancels a constant
    # shift: some BN biases then get an exactly-zero gradient. 64x64 avoids that.
    "mobilenet_v2": (lambda: _images(hw=64), (BATCH, 1000)),
    "densenet121": (_images, (BATCH, 1000)),
    "vgg19": (_images, (BATCH, 1000)),
    "gpt_small": (_tokens, (BATCH, SEQ_LEN, 8192)),
    "bilstm_classifier": (_tokens, (BATCH, 2)),
    "wide_and_deep": (_criteo, (BATCH,)),
    "deepfm": (_criteo, (BATCH,)),
}


def test_every_builder_has_a_forward_case():
    assert set(FORWARD_CASES) == set(BUILDER_NAMES)


def test_cifar_resnet18_matches_the_published_cifar_variant():
    # the kuangliu/pytorch-cifar ResNet-18 that Pollux measures: 11,173,962 params at 10 classes
    with torch.device("meta"):
        model = models.resnet18_cifar()
    assert n_params(model) == 11_173_962


@pytest.mark.parametrize("name", sorted(IMAGENET_PARAM_COUNTS))
def test_imagenet_parameter_count_matches_torchvision(name):
    # Build on the meta device: shapes are all we need, and VGG-19 would
    # otherwise allocate 575 MB just to be counted.
    with torch.device("meta"):
        model = MODEL_BUILDERS[name]()
    assert n_params(model) == IMAGENET_PARAM_COUNTS[name]


@pytest.mark.parametrize("name", sorted(FORWARD_CASES))
def test_forward_backward_reaches_every_parameter(name):
    make_inputs, expected_shape = FORWARD_CASES[name]
    torch.manual_seed(0)
    model = MODEL_BUILDERS[name]()
    model.train()
    out = model(*make_inputs())
    assert out.shape == expected_shape
    # A random projection of the output gives every logit a nonzero upstream gradient.
    (out * torch.randn_like(out)).sum().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{name}: {pname} got no gradient"
        grad = p.grad.to_dense()
        assert torch.isfinite(grad).all(), f"{name}: {pname} has a non-finite gradient"
        assert grad.abs().sum() > 0, f"{name}: {pname} has an all-zero gradient"

    # The profiler attributes parameters to the named modules that directly hold
    # them: every parameter must be owned by exactly one non-root module.
    owners = [
        (mname, p)
        for mname, module in model.named_modules()
        for p in module.parameters(recurse=False)
    ]
    assert all(mname for mname, _ in owners), f"{name}: root module holds parameters"
    assert len({id(p) for _, p in owners}) == len(owners), f"{name}: shared parameter"
    assert sum(p.numel() for _, p in owners) == n_params(model)


EXPECTED_ACTIVATION_TYPES = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "leaky_relu": nn.LeakyReLU,
}


@pytest.mark.parametrize("builder", [mlp3, small_cnn])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_activation_choices(builder, activation):
    model = builder(activation=activation)
    x = torch.randn(BATCH, 64) if builder is mlp3 else torch.randn(BATCH, 3, 8, 8)
    assert model(x).shape == (BATCH, 10)
    assert any(isinstance(m, EXPECTED_ACTIVATION_TYPES[activation]) for m in model.modules())


@pytest.mark.parametrize("builder", [mlp3, small_cnn])
def test_unknown_activation_names_the_allowed_values(builder):
    with pytest.raises(ValueError, match="'relu', 'tanh', 'sigmoid', 'leaky_relu'"):
        builder(activation="gelu")


@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32), (3, 17, 23)])
def test_small_cnn_accepts_any_input_of_at_least_8x8(shape):
    model = small_cnn(in_channels=shape[0], num_classes=7)
    assert model(torch.randn(BATCH, *shape)).shape == (BATCH, 7)


def test_small_cnn_has_no_batchnorm():
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in small_cnn().modules())


@pytest.mark.parametrize(
    "build",
    [
        mlp3,
        small_cnn,
        MODEL_BUILDERS["resnet18"],
        MODEL_BUILDERS["mobilenet_v2"],
        gpt_small,
        bilstm_classifier,
        lambda: deepfm(cardinalities=(50,) * 26),
    ],
)
def test_construction_is_deterministic_under_manual_seed(build):
    torch.manual_seed(123)
    first = build().state_dict()
    torch.manual_seed(123)
    second = build().state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_imagenet_builders_accept_other_channels_and_classes():
    for name in IMAGENET_PARAM_COUNTS:
        if name == "vgg19":
            continue  # same stem logic; skipped only to keep the suite fast
        model = MODEL_BUILDERS[name](num_classes=5, in_channels=1)
        model.eval()
        with torch.no_grad():
            assert model(torch.randn(BATCH, 1, 32, 32)).shape == (BATCH, 5), name


def test_gpt_is_causal():
    torch.manual_seed(0)
    model = gpt_small(n_layer=2).eval()
    idx = torch.randint(0, 8192, (1, SEQ_LEN))
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % 8192
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_gpt_rejects_sequences_longer_than_block_size():
    with pytest.raises(ValueError, match="block_size"):
        gpt_small(block_size=8)(torch.zeros(1, 9, dtype=torch.long))


def test_default_criteo_cardinalities():
    assert len(DEFAULT_CRITEO_CARDINALITIES) == 26
    assert max(DEFAULT_CRITEO_CARDINALITIES) == 100_000
    assert all(c > 0 for c in DEFAULT_CRITEO_CARDINALITIES)


@pytest.mark.parametrize("builder", [wide_and_deep, deepfm])
def test_recsys_sparse_flag_gives_sparse_embedding_gradients(builder):
    cards = (10, 20, 30)
    model = builder(num_dense=4, cardinalities=cards, embed_dim=8, hidden=(16,), sparse=True)
    dense = torch.randn(BATCH, 4)
    ids = torch.stack([torch.randint(0, c, (BATCH,)) for c in cards], dim=1)
    out = model(dense, ids)
    assert out.shape == (BATCH,)
    nn.functional.binary_cross_entropy_with_logits(out, torch.ones(BATCH)).backward()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            assert module.sparse and module.weight.grad.is_sparse
        elif isinstance(module, nn.Linear):
            assert not module.weight.grad.is_sparse
    # Table sizes follow the requested cardinalities: 1-dim first-order + 8-dim tables.
    tables = [m.weight.shape for m in model.modules() if isinstance(m, nn.Embedding)]
    assert sorted(tables) == sorted([(c, 1) for c in cards] + [(c, 8) for c in cards])


def test_recsys_rejects_wrong_number_of_fields():
    model = deepfm(num_dense=2, cardinalities=(5, 5), embed_dim=4, hidden=(8,))
    with pytest.raises(ValueError, match=r"\[N, 2\]"):
        model(torch.randn(BATCH, 2), torch.zeros(BATCH, 3, dtype=torch.long))
