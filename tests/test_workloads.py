import sys
import textwrap

import pytest
import torch

from rightsize.core.errors import SpecError, UnknownNameError
from rightsize.workloads import Workload, WorkloadRegistry, make_dataset


@pytest.fixture(scope="module")
def registry():
    return WorkloadRegistry()


def test_every_zoo_model_builds_on_its_default_dataset_and_trains_one_step(registry):
    for entry in registry.models():
        if entry.name in ("vgg19", "densenet121", "resnet50"):
            continue  # ImageNet-sized steps are slow; their architectures are tested in test_zoo_models
        workload = registry.get(
            entry.name, dataset="synthetic-cifar" if "image" in entry.kinds else None
        )
        model = workload.make_model(seed=0)
        loss = workload.loss(model, workload.example_batch(4))
        loss.backward()
        assert torch.isfinite(loss), entry.name


def test_same_seed_same_model_and_same_data(registry):
    a, b = registry.get("mlp3"), registry.get("mlp3")
    assert all(
        torch.equal(p, q)
        for p, q in zip(a.make_model(3).parameters(), b.make_model(3).parameters(), strict=True)
    )
    for name in ("synthetic-cifar", "synthetic-criteo", "synthetic-text", "synthetic-reviews"):
        x = make_dataset(name, seed=7).batch([5, 0, 123])
        y = make_dataset(name, seed=7).batch([5, 0, 123])
        z = make_dataset(name, seed=8).batch([5, 0, 123])
        assert all(torch.equal(p, q) for p, q in zip(x[0], y[0], strict=True)) and torch.equal(
            x[1], y[1]
        )
        assert not all(torch.equal(p, q) for p, q in zip(x[0], z[0], strict=True))


def test_dataset_shapes():
    (images,), labels = make_dataset("synthetic-imagenet", num_samples=100).batch(range(3))
    assert images.shape == (3, 3, 224, 224) and labels.max() < 1000
    (dense, sparse), clicks = make_dataset("synthetic-criteo").batch(range(8))
    assert dense.shape == (8, 13) and sparse.shape == (8, 26) and set(clicks.tolist()) <= {0.0, 1.0}
    (tokens,), targets = make_dataset("synthetic-text").batch(range(2))
    assert tokens.shape == targets.shape == (2, 128)
    assert torch.equal(tokens[:, 1:], targets[:, :-1])  # next-token targets
    digits = make_dataset("digits")
    assert len(digits) == 1797
    (images,), labels = digits.batch(range(10))
    assert images.shape == (10, 1, 8, 8) and 0 <= images.min() and images.max() <= 1
    with pytest.raises(IndexError):
        make_dataset("synthetic-cifar", num_samples=10).batch([10])


def test_synthetic_labels_are_learnable(registry):
    # the teacher makes the task learnable: a few SGD steps on one batch lower the loss clearly
    workload = registry.get("mlp3", dataset="synthetic-cifar")
    model = workload.make_model(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = workload.example_batch(256)
    first = workload.loss(model, batch).item()
    for _ in range(30):
        optimizer.zero_grad()
        workload.loss(model, batch).backward()
        optimizer.step()
    assert workload.loss(model, batch).item() < 0.7 * first


def test_registry_errors(registry):
    with pytest.raises(UnknownNameError, match="did you mean 'resnet50'"):
        registry.get("resnet05")
    with pytest.raises(UnknownNameError, match="unknown dataset"):
        registry.get("mlp3", dataset="mnist")
    with pytest.raises(SpecError, match="takes image data but dataset synthetic-criteo is criteo"):
        registry.get("resnet18", dataset="synthetic-criteo")
    with pytest.raises(
        SpecError, match="has no option 'activaton'; its options: hidden, activation"
    ):
        registry.get("mlp3", options={"activaton": "tanh"})
    tanh = registry.get("mlp3", options={"activation": "tanh"}).make_model()
    assert any(isinstance(m, torch.nn.Tanh) for m in tanh.modules())


def test_user_factory_by_module_path(tmp_path, monkeypatch, registry):
    (tmp_path / "my_jobs.py").write_text(
        textwrap.dedent("""
        import torch
        from rightsize.workloads import Workload, make_dataset

        def make_job(width=16):
            return Workload("my-job", make_dataset("digits"),
                            lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, width),
                                                        torch.nn.ReLU(), torch.nn.Linear(width, 10)))

        def not_a_workload():
            return 42
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    workload = registry.get("my_jobs:make_job", options={"width": 8})
    assert isinstance(workload, Workload) and workload.name == "my-job"
    assert workload.make_model()[1].out_features == 8
    with pytest.raises(SpecError, match="must return a rightsize.workloads.Workload"):
        registry.get("my_jobs:not_a_workload")
    with pytest.raises(UnknownNameError, match="has no function 'nope'"):
        registry.get("my_jobs:nope")
    with pytest.raises(SpecError, match="cannot import 'no_such_pkg.mod'"):
        registry.get("no_such_pkg.mod:make")
    with pytest.raises(SpecError, match="does not take these options"):
        registry.get("my_jobs:make_job", options={"depth": 3})
    sys.modules.pop("my_jobs", None)
