"""``plan --strategy ps --ps-framework`` (issue 40 item 5): whose PS a plan assumes, and the
tensor counts a profile records for the framework that pays per tensor."""

import json

import pytest
import torch
from torch import nn

from profile_factory import linear_profile
from rightsize.core.catalog import load_catalog
from rightsize.core.errors import SpecError
from rightsize.perf.comm import GBPS
from rightsize.perf.ps import (
    FC2_HEADROOM,
    PS_CPU_S_PER_BYTE,
    PS_NETWORK_EFFICIENCY,
    PSModel,
    PSSpec,
    WorkerSpec,
    predict_ps,
)
from rightsize.perf.ps_profiles import PSFramework, tf1_tensors_per_step
from rightsize.planning.fc2 import Fc2Planner, Fc2Request
from rightsize.planning.options import make_option
from rightsize.planning.ps_framework import with_tensor_counts
from rightsize.profiling.profile import Profile, TensorCounts
from rightsize.profiling.tensor_counts import count_tensors
from test_cli import assert_one_line_error, run

#: ResNet-32's counts (benchmarks/ps/ps_cmdare.py): 101 trainable tensors, 33 batch norms
RESNET32 = TensorCounts(parameters=101, state=66)
#: a small, fast model (20 kB of parameters, sub-ms steps): 8 workers keep the PS busy, and its
#: per-tensor CPU, not its bytes, is what TensorFlow adds
SMALL = dict(per_sample_s=1e-5, fixed_s=1e-4, param_bytes=(20_000,))


@pytest.fixture(scope="module")
def fc2():
    return load_catalog("fc2-2018")


def planner(fc2, profile, framework=PSFramework.RIGHTSIZE, model=PSModel.DLROVER):
    workers = [make_option([profile], fc2.get(n), 16) for n in ("c4.xlarge", "c4.8xlarge")]
    request = Fc2Request(64, 1000, max_workers=8, ps_model=model, ps_framework=framework)
    return Fc2Planner(profile, workers, fc2.get("m4.large"), request)


def ps_args(path, *extra):
    return ["plan", "--profile", str(path), "--strategy", "ps", "--global-batch", "64",
            "--iterations", "100", "--cloud", "fc2-2018", "--instances", "c4.xlarge,c4.8xlarge",
            "--ps-types", "m4.large", "--max-workers", "8", "--quiet", *extra]  # fmt: skip


def test_the_default_framework_plans_as_before(fc2):
    # the PS spec FC2's planner built before frameworks existed, written out: same throughput
    profile = linear_profile(**SMALL)
    before = PSSpec(count=1, update_core_s=profile.samples[0].optimizer_s * profile.device.threads,
                    cores=fc2.get("m4.large").vcpus,
                    link_bytes_per_s=fc2.get("m4.large").network_gbps * GBPS,
                    headroom=FC2_HEADROOM, cpu_s_per_byte=PS_CPU_S_PER_BYTE,
                    network_efficiency=PS_NETWORK_EFFICIENCY)  # fmt: skip
    for kind in PSModel:
        default = planner(fc2, profile, model=kind)
        for option in default.workers:
            worker = WorkerSpec(
                64, option.vm_compute(64).total_s, option.instance.network_gbps * GBPS
            )
            for n in (1, 4, 8):
                assert default.throughput(option, n) == predict_ps(
                    [worker] * n, before, profile.param_bytes, kind
                )


@pytest.mark.parametrize("kind", list(PSModel))
def test_tensorflow_costs_more_ps_time_and_more_with_more_tensors(fc2, kind):
    few = linear_profile(**SMALL).model_copy(
        update={"tensors": TensorCounts(parameters=4, state=0)}
    )
    many = few.model_copy(update={"tensors": RESNET32})
    option = planner(fc2, few).workers[0]
    ours = planner(fc2, many, model=kind).throughput(option, 8).steps_per_s
    tf_few = planner(fc2, few, PSFramework.TENSORFLOW1_GRPC, kind).throughput(option, 8).steps_per_s
    tf_many = planner(fc2, many, PSFramework.TENSORFLOW1_GRPC, kind).throughput(option, 8)
    # 8 workers on a 2-vCPU PS: ResNet-32's 269 RPCs a step at 5.5 µs each make its CPU the
    # bottleneck; 9 RPCs leave the link the bottleneck, as with rightsize's PS
    assert tf_many.steps_per_s < tf_few <= ours
    assert tf_many.bottleneck == "ps-compute"


def test_the_plan_states_its_framework_and_json_carries_it(capsys, tmp_path):
    path = (
        linear_profile(**SMALL).model_copy(update={"tensors": RESNET32}).save(tmp_path / "p.json")
    )
    code, out, _ = run(capsys, *ps_args(path))
    assert code == 0
    assert out.splitlines()[2].startswith("PS framework rightsize (the default): this project's")
    code, out, _ = run(capsys, *ps_args(path, "--json"))
    default = json.loads(out)
    assert {r["ps_framework"]["ps_framework"] for r in default} == {"rightsize"}
    code, out, _ = run(capsys, *ps_args(path, "--json", "--ps-framework", "rightsize"))
    assert json.loads(out) == default
    code, out, _ = run(capsys, *ps_args(path, "--json", "--ps-framework", "tensorflow1-grpc"))
    tf = json.loads(out)
    assert code == 0 and tf[0]["ps_framework"] == {
        "ps_framework": "tensorflow1-grpc", "default": False,
        "assumes": tf[0]["ps_framework"]["assumes"]}  # fmt: skip
    assert "one RPC per variable" in tf[0]["ps_framework"]["assumes"]
    for ours, theirs in zip(default, tf, strict=True):
        assert theirs["seconds_per_iter"] > ours["seconds_per_iter"]


@pytest.mark.parametrize("extra, fragment", [
    (["--ps-framework", "tensorflow2"], "invalid choice: 'tensorflow2'"),
    (["--ps-framework", "TensorFlow1-grpc"], "invalid choice"),
])  # fmt: skip
def test_an_unknown_framework_is_refused_in_one_line(capsys, tmp_path, extra, fragment):
    path = linear_profile(**SMALL).save(tmp_path / "p.json")
    code, _, err = run(capsys, *ps_args(path, *extra))
    assert_one_line_error(code, err, fragment)
    assert "rightsize, tensorflow1-grpc" in err.replace("'", "")


def test_the_framework_is_only_read_with_the_ps_strategy(capsys, tmp_path):
    path = linear_profile(**SMALL).save(tmp_path / "p.json")
    code, _, err = run(capsys, "plan", "--profile", str(path), "--global-batch", "64",
                       "--iterations", "100", "--cloud", "fc2-2018", "--instances", "c4.xlarge",
                       "--ps-framework", "tensorflow1-grpc", "--quiet")  # fmt: skip
    assert_one_line_error(code, err, "--ps-framework is only read with --strategy ps")


def test_counts_are_parameters_and_running_statistics():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(8, 2))
    model[3].bias.requires_grad_(False)  # frozen: no gradient goes to the PS
    model.register_buffer("mask", torch.ones(3))
    # conv weight+bias, bn weight+bias, linear weight; running_mean, running_var (not
    # num_batches_tracked, not the constant mask)
    assert count_tensors(model) == TensorCounts(parameters=5, state=2)


def test_a_profile_round_trips_its_counts_and_an_old_one_loads_without(tmp_path):
    profile = linear_profile().model_copy(update={"tensors": RESNET32})
    assert Profile.load(profile.save(tmp_path / "new.json")).tensors == RESNET32
    old = json.loads(linear_profile().to_json())
    old.pop("tensors")  # a profile written before the counts existed
    assert Profile.from_dict(old).tensors is None


def test_an_old_zoo_profile_is_counted_from_the_zoo_and_another_is_refused(capsys, tmp_path):
    old = linear_profile(**SMALL).model_copy(update={"workload": "resnet18-cifar"})
    counted = with_tensor_counts(old, PSFramework.TENSORFLOW1_GRPC)
    assert counted.tensors.parameters > 40 and counted.tensors.state > 20  # 20 batch norms
    assert with_tensor_counts(old, PSFramework.RIGHTSIZE) is old  # not needed: not counted
    assert tf1_tensors_per_step(counted.tensors.parameters, counted.tensors.state) > 100
    path = linear_profile(**SMALL).save(tmp_path / "toy.json")  # workload "toy", no counts
    with pytest.raises(SpecError, match="needs the model's tensor counts"):
        with_tensor_counts(Profile.load(path), PSFramework.TENSORFLOW1_GRPC)
    code, _, err = run(capsys, *ps_args(path, "--ps-framework", "tensorflow1-grpc"))
    assert_one_line_error(code, err, f"profile {path} (toy) does not record")
    assert "profile it again with rightsize profile" in err
