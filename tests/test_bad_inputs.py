"""Issue 16: bad input anywhere in the CLI gets one line and exit 2, before any expensive work.

One table of bad inputs over every command: binary, empty and malformed files, directories
given as files, tampered profiles, absurd numbers, conflicting flags, unknown names, unsafe
job names and output paths that cannot be written. Each row must exit 2 with exactly one
stderr line starting ``error: ``, print no traceback, and leave the working directory (where
every row's files and outputs live) byte for byte as it was: nothing written, nothing
clobbered. No row trains or profiles anything: that is the point.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from profile_factory import linear_profile
from rightsize.cli.main import main

DIR = object()  # a files-table value: make a directory here
PRECIOUS = "precious bytes: must survive a refused command\n"
BINARY = bytes(range(256)) * 4  # not UTF-8 from byte 128
PROFILE = linear_profile().to_json()


def profile_with(edit) -> str:
    """The good profile's JSON with ``edit(data)`` applied (a user's tampering)."""
    data = json.loads(PROFILE)
    edit(data)
    return json.dumps(data)


def first_sample(**fields):
    return profile_with(lambda d: d["samples"][0].update(fields))


def job(**edits) -> str:
    """A valid job file for ``rightsize run`` with some fields replaced (None: removed)."""
    data = {"name": "j", "workload": "mlp3", "dataset": "digits", "batch_size": 64,
            "epochs": 1, "budget": {"cpu": 2, "memory": "4Gi"}, "checkpoint": {"dir": "ckpt"}}  # fmt: skip
    for key, value in edits.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return yaml.safe_dump(data)


SPACE = "batch_size: [16, 32]\noptimizer: [sgd]\nlr: [0.01]\n"
TRAIN = "print('a training script')\n"  # a script that parses (no row gets to run it)
TRACE_HEAD = "arrival,duration,cpu\n0,1h,10\n"
POLLUX_HEAD = "name,time,application,num_replicas,batch_size\n"
CATALOG_HEAD = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,NetworkGbps,Price,SpotPrice,Region\n"  # fmt: skip
# plan/replan with a good profile and a small catalog: only the row's own flag is bad
PLAN = ["plan", "--profile", "p.json", "--global-batch", "512", "--iterations", "1000",
        "--cloud", "srift-2020", "--instances", "g4dn.8xlarge:4,g3.8xlarge:4", "--quiet"]  # fmt: skip
TASK = ["--run-command", "python train.py"]  # what an exported SkyPilot task runs
REPLAN = ["replan", *PLAN[1:], "--done", "10", "--elapsed", "60s", "--lost", "g3.8xlarge"]
GOOD = {"p.json": PROFILE}
PROBE = ["probe", "--world-sizes", "2", "--max-size", "64", "--quiet"]
TUNE = ["tune", "--space", "s.yaml", "--allocator", "default", "--quiet"]
SIM_JOB = ["simulate", "--job", "resnet50", "--budget", "10", "--policies", "fa-bf", "--quiet"]


def replace(argv: list[str], flag: str, value: str) -> list[str]:
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    return argv


def row(id_: str, argv: list[str], files: dict | None = None):
    return pytest.param(argv, files or {}, id=id_)


ROWS = [
    # -- workloads, catalog --------------------------------------------------------------
    row("workloads-extra-arg", ["workloads", "zoo"]),
    row("catalog-unknown-region", ["catalog", "--region", "mars-1"]),
    row("catalog-region-typo", ["catalog", "--cloud", "aws", "--region", "us-east1"]),
    row("catalog-unknown-cloud", ["catalog", "--cloud", "ibm"]),
    row("catalog-unknown-gpu", ["catalog", "--gpu", "T5"]),
    row("catalog-missing-file", ["catalog", "--file", "nope.csv"]),
    row("catalog-binary-file", ["catalog", "--file", "c.csv"], {"c.csv": BINARY}),
    row("catalog-dir-as-file", ["catalog", "--file", "d"], {"d": DIR}),
    row("catalog-empty-file", ["catalog", "--file", "c.csv"], {"c.csv": ""}),
    row("catalog-nan-price", ["catalog", "--file", "c.csv"], {"c.csv": CATALOG_HEAD + "x,,0,4,16,10,nan,,r\n"}),
    row("catalog-inf-network", ["catalog", "--file", "c.csv"], {"c.csv": CATALOG_HEAD + "x,,0,4,16,inf,1,,r\n"}),
    row("catalog-file-and-cloud", ["catalog", "--file", "c.csv", "--cloud", "aws"], {"c.csv": CATALOG_HEAD + "x,,0,4,16,10,1,,r\n"}),
    row("catalog-accelerators-without-file", ["catalog", "--accelerators-file", "a.csv"], {"a.csv": "name\n"}),
    row("catalog-dev-zero", ["catalog", "--file", "/dev/zero"]),
    # -- profile (every row is refused before measuring) -----------------------------------
    row("profile-unknown-workload", ["profile", "resnet05"]),
    row("profile-activation-value", ["profile", "mlp3", "--option", "activation=zzz"]),
    row("profile-negative-width", ["profile", "mlp3", "--option", "hidden=-4"]),
    row("profile-text-width", ["profile", "mlp3", "--option", "hidden=abc"]),
    row("profile-huge-width", ["profile", "mlp3", "--option", "hidden=100000000000"]),
    row("profile-unknown-option", ["profile", "mlp3", "--option", "nosuch=1"]),
    row("profile-option-bad-yaml", ["profile", "mlp3", "--option", "activation=[x"]),
    row("profile-option-no-equals", ["profile", "mlp3", "--option", "activation"]),
    row("profile-flag-not-bool", ["profile", "wide-deep", "--option", "sparse=maybe"]),
    row("profile-zero-layer-width", ["profile", "wide-deep", "--option", "hidden=[0]"]),
    row("profile-unknown-dataset", ["profile", "mlp3", "--dataset", "digitz"]),
    row("profile-out-is-dir", ["profile", "mlp3", "--out", "d"], {"d": DIR}),
    row("profile-out-in-proc", ["profile", "mlp3", "--out", "/proc/rightsize.json"]),
    row("profile-out-under-file", ["profile", "mlp3", "--out", "f/p.json"], {"f": PRECIOUS}),
    row("profile-out-kept-on-bad-option", ["profile", "mlp3", "--out", "keep.json", "--option", "activation=zzz"], {"keep.json": PRECIOUS}),
    row("profile-max-batch-0", ["profile", "mlp3", "--max-batch", "0"]),
    row("profile-max-batch-1e20", ["profile", "mlp3", "--max-batch", "100000000000000000000"]),
    row("profile-warmup-huge", ["profile", "mlp3", "--warmup", "1000000000000"]),
    row("profile-repeats-huge", ["profile", "mlp3", "--repeats", "1000000000000"]),
    row("profile-extra-batch-huge", ["profile", "mlp3", "--extra-batches", "100000000000000000000"]),
    row("profile-threads-huge", ["profile", "mlp3", "--threads", "1000000"]),
    row("profile-seed-negative", ["profile", "mlp3", "--seed=-1"]),
    row("profile-seed-huge", ["profile", "mlp3", "--seed", "100000000000000000000000"]),
    row("profile-memory-limit-unit", ["profile", "mlp3", "--memory-limit", "4XB"]),
    row("profile-memory-limit-0", ["profile", "mlp3", "--memory-limit", "0"]),
    row("profile-memory-limit-nan", ["profile", "mlp3", "--memory-limit", "nan"]),
    row("profile-memory-limit-beyond-machine", ["profile", "mlp3", "--memory-limit", "1e30"]),
    row("profile-unknown-device", ["profile", "mlp3", "--device", "tpu"]),
    row("profile-bad-factory", ["profile", ":"]),
    # -- predict: damaged and tampered profiles --------------------------------------------
    row("predict-missing", ["predict", "nope.json"]),
    row("predict-binary", ["predict", "p.json"], {"p.json": BINARY}),
    row("predict-latin1", ["predict", "p.json"], {"p.json": "caf\xe9".encode("latin-1")}),
    row("predict-dir", ["predict", "d"], {"d": DIR}),
    row("predict-empty", ["predict", "p.json"], {"p.json": ""}),
    row("predict-not-json", ["predict", "p.json"], {"p.json": "{not json"}),
    row("predict-json-list", ["predict", "p.json"], {"p.json": "[1, 2]"}),
    row("predict-nan-time", ["predict", "p.json"], {"p.json": first_sample(forward_s=math.nan)}),
    row("predict-inf-time", ["predict", "p.json"], {"p.json": first_sample(backward_s=math.inf)}),
    row("predict-negative-time", ["predict", "p.json"], {"p.json": first_sample(total_s=-1.0)}),
    row("predict-zero-time", ["predict", "p.json"], {"p.json": first_sample(forward_s=0.0, backward_s=0.0, total_s=0.0)}),
    row("predict-wrong-type", ["predict", "p.json"], {"p.json": profile_with(lambda d: d.update(bmax="lots"))}),
    row("predict-bmax-1e20", ["predict", "p.json"], {"p.json": profile_with(lambda d: d.update(bmax=10**20))}),
    row("predict-negative-params", ["predict", "p.json"], {"p.json": profile_with(lambda d: d["layers"][0].update(param_bytes=-5))}),
    row("predict-negative-spread", ["predict", "p.json"], {"p.json": first_sample(total_cv=-3.0)}),
    row("predict-nan-grad-ready", ["predict", "p.json"], {"p.json": first_sample(grad_ready=[math.nan, 1.0])}),
    row("predict-no-samples", ["predict", "p.json"], {"p.json": profile_with(lambda d: d.update(samples=[]))}),
    row("predict-batches-huge", ["predict", "p.json", "--batches", "100000000000000000000"], GOOD),
    row("predict-batches-not-numbers", ["predict", "p.json", "--batches", "a,b"], GOOD),
    row("predict-dev-zero", ["predict", "/dev/zero"]),
    # -- plan ------------------------------------------------------------------------------
    row("plan-profile-and-workload", [*PLAN, "--workload", "mlp3"], GOOD),
    row("plan-profile-and-option", [*PLAN, "--option", "hidden=5"], GOOD),
    row("plan-neither-profile-nor-workload", PLAN[:1] + PLAN[3:]),
    row("plan-binary-profile", PLAN, {"p.json": BINARY}),
    row("plan-nan-profile", PLAN, {"p.json": first_sample(forward_s=math.nan)}),
    row("plan-zero-profile", PLAN, {"p.json": first_sample(forward_s=0.0, backward_s=0.0, total_s=0.0)}),
    row("plan-iterations-1e30", replace(PLAN, "--iterations", "1e30"), GOOD),
    row("plan-iterations-huge-int", replace(PLAN, "--iterations", "1" + "0" * 30), GOOD),
    row("plan-iterations-0", replace(PLAN, "--iterations", "0"), GOOD),
    row("plan-global-batch-1e20", replace(PLAN, "--global-batch", "100000000000000000000"), GOOD),
    row("plan-global-batch-negative", replace(PLAN, "--global-batch", "-512"), GOOD),
    row("plan-top-0", [*PLAN, "--top", "0"], GOOD),
    row("plan-deadline-negative", [*PLAN, "--deadline=-1h"], GOOD),
    row("plan-budget-nan", [*PLAN, "--budget", "nan"], GOOD),
    row("plan-instance-typo", replace(PLAN, "--instances", "g4dn.8xlarg:4"), GOOD),
    row("plan-instance-count-huge", replace(PLAN, "--instances", "g4dn.8xlarge:1000000000000"), GOOD),
    row("plan-instances-only-commas", replace(PLAN, "--instances", ",,,"), GOOD),
    row("plan-unknown-region", [*PLAN, "--region", "mars-1"], GOOD),
    row("plan-binary-comm-model", [*PLAN, "--comm-model", "m.json"], {**GOOD, "m.json": BINARY}),
    row("plan-damaged-comm-model", [*PLAN, "--comm-model", "m.json"], {**GOOD, "m.json": '{"schema": "rightsize.comm-model"}'}),
    row("plan-dir-as-ddp-probe", [*PLAN, "--exchange", "ddp-probe", "--ddp-probe", "d"], {**GOOD, "d": DIR}),
    row("plan-skypilot-yaml-is-dir", [*PLAN, *TASK, "--skypilot-yaml", "d"], {**GOOD, "d": DIR}),
    row("plan-skypilot-yaml-in-proc", [*PLAN, *TASK, "--skypilot-yaml", "/proc/task.yaml"], GOOD),
    row("plan-skypilot-yaml-kept", [*PLAN, *TASK, "--region", "mars-1", "--skypilot-yaml", "t.yaml"], {**GOOD, "t.yaml": PRECIOUS}),
    row("plan-skypilot-yaml-runs-nothing", [*PLAN, "--skypilot-yaml", "t.yaml"], GOOD),
    row("plan-run-command-without-task", [*PLAN, *TASK], GOOD),
    row("plan-run-command-blank", [*PLAN, "--skypilot-yaml", "t.yaml", "--run-command", " "], GOOD),
    row("plan-run-job-and-command", [*PLAN, *TASK, "--skypilot-yaml", "t.yaml", "--run-job", "j.yaml"], {**GOOD, "j.yaml": job(strategy="allreduce")}),
    row("plan-run-job-missing", [*PLAN, "--skypilot-yaml", "t.yaml", "--run-job", "nope.yaml"], GOOD),
    row("plan-run-job-binary", [*PLAN, "--skypilot-yaml", "t.yaml", "--run-job", "j.yaml"], {**GOOD, "j.yaml": BINARY}),
    row("plan-run-job-bad-field", [*PLAN, "--skypilot-yaml", "t.yaml", "--run-job", "j.yaml"], {**GOOD, "j.yaml": job(strategy="allreduce", batch_size=0)}),
    row("plan-run-job-other-strategy", [*PLAN, "--skypilot-yaml", "t.yaml", "--run-job", "j.yaml"], {**GOOD, "j.yaml": job()}),
    row("plan-ps-flag-without-ps", [*PLAN, "--worker-type", "g3.8xlarge"], GOOD),
    row("plan-max-workers-0", [*PLAN, "--strategy", "ps", "--max-workers", "0"], GOOD),
    row("plan-workload-bad-option", ["plan", "--workload", "mlp3", "--option", "activation=zzz", *PLAN[3:]]),
    # -- replan ----------------------------------------------------------------------------
    row("replan-done-negative", replace(REPLAN, "--done", "-1"), GOOD),
    row("replan-elapsed-nan", replace(REPLAN, "--elapsed", "nan"), GOOD),
    row("replan-lost-empty", replace(REPLAN, "--lost", ""), GOOD),
    row("replan-lost-unknown", replace(REPLAN, "--lost", "g9.xlarge"), GOOD),
    row("replan-running-count", [*REPLAN, "--running", "g3.8xlarge:x"], GOOD),
    row("replan-profile-and-workload", [*REPLAN, "--workload", "mlp3"], GOOD),
    row("replan-iterations-huge", replace(REPLAN, "--iterations", "1" + "0" * 24), GOOD),
    # -- probe (refused before any rank is forked) -------------------------------------------
    row("probe-world-100000", ["probe", "--world-sizes", "100000"]),
    row("probe-ddp-world-100000", ["probe", "--ddp", "o.json", "--world-sizes", "100000"]),
    row("probe-world-1", ["probe", "--world-sizes", "1"]),
    row("probe-world-text", ["probe", "--world-sizes", "two"]),
    row("probe-buffers-beyond-memory", [*PROBE, "--max-size", "1e30"]),
    row("probe-size-unit", [*PROBE, "--max-size", "4XB"]),
    row("probe-concurrency-huge", [*PROBE, "--concurrency", "100000"]),
    row("probe-rounds-0", [*PROBE, "--rounds", "0"]),
    row("probe-min-seconds-nan", [*PROBE, "--min-seconds", "nan"]),
    row("probe-rated-gbps-negative", [*PROBE, "--rated-gbps=-1"]),
    row("probe-out-is-dir", [*PROBE, "--out", "d"], {"d": DIR}),
    row("probe-out-in-proc", [*PROBE, "--out", "/proc/probes.json"]),
    row("probe-outputs-kept", ["probe", "--world-sizes", "100000", "--out", "p.json", "--model-out", "m.json"], {"p.json": PRECIOUS, "m.json": PRECIOUS}),
    row("probe-ddp-out-in-proc", ["probe", "--ddp", "/proc/ddp.json", "--world-sizes", "2"]),
    # -- torchrun: the command line refused before a rank starts ------------------------------
    row("torchrun-missing-script", ["torchrun", "nope.py"]),
    row("torchrun-script-dir", ["torchrun", "d"], {"d": DIR}),
    row("torchrun-script-binary", ["torchrun", "t.py"], {"t.py": BINARY}),
    row("torchrun-syntax-error", ["torchrun", "t.py"], {"t.py": "def broken(:\n"}),
    row("torchrun-module-missing", ["torchrun", "-m", "no_such_module_here"]),
    row("torchrun-nnodes", ["torchrun", "--nnodes", "2", "t.py"], {"t.py": TRAIN}),
    row("torchrun-node-rank", ["torchrun", "--node-rank", "1", "t.py"], {"t.py": TRAIN}),
    row("torchrun-no-python", ["torchrun", "--no-python", "t.py"], {"t.py": TRAIN}),
    row("torchrun-rdzv-etcd", ["torchrun", "--rdzv-backend", "etcd", "t.py"], {"t.py": TRAIN}),
    row("torchrun-nproc-word", ["torchrun", "--nproc-per-node", "many", "t.py"], {"t.py": TRAIN}),
    row("torchrun-nproc-zero", ["torchrun", "--nproc-per-node", "0", "t.py"], {"t.py": TRAIN}),
    row("torchrun-min-over-max", ["torchrun", "--min-nproc", "3", "--max-nproc", "2", "t.py"],
        {"t.py": TRAIN}),
    row("torchrun-nproc-outside", ["torchrun", "--nproc-per-node", "4", "--max-nproc", "2",
                                   "t.py"], {"t.py": TRAIN}),
    row("torchrun-max-restarts-negative", ["torchrun", "--max-restarts", "-1", "t.py"],
        {"t.py": TRAIN}),
    row("torchrun-budget-unit", ["torchrun", "--budget-memory", "4XB", "t.py"], {"t.py": TRAIN}),
    row("torchrun-over-machine", ["torchrun", "--budget-cpu", "4096", "t.py"], {"t.py": TRAIN}),
    row("torchrun-policy-unknown", ["torchrun", "--policy", "nearchus++", "t.py"],
        {"t.py": TRAIN}),
    row("torchrun-policy-param-unknown", ["torchrun", "--policy", "goodput", "--policy-param",
                                          "bogus=1", "t.py"], {"t.py": TRAIN}),
    row("torchrun-policy-param-out-of-range", ["torchrun", "--policy", "goodput",
                                               "--policy-param", "growth=1", "t.py"],
        {"t.py": TRAIN}),
    row("torchrun-policy-param-no-equals", ["torchrun", "--policy-param", "growth", "t.py"],
        {"t.py": TRAIN}),
    row("torchrun-report-is-dir", ["torchrun", "--report", "d", "t.py"], {"t.py": TRAIN, "d": DIR}),
    row("run-script-and-workload", ["run", "j.yaml"], {"j.yaml": job(script="t.py"),
                                                       "t.py": TRAIN}),
    row("run-script-with-batch", ["run", "j.yaml"], {"j.yaml": job(
        workload=None, dataset=None, epochs=None, script="t.py"), "t.py": TRAIN}),
    row("run-duplicate-key", ["run", "j.yaml"], {"j.yaml": job() + "epochs: 5\n"}),
    row("run-ps-bandwidth-zero", ["run", "j.yaml"], {"j.yaml": job(runtime={"ps_bandwidth": 0})}),
    row("run-state-is-dir", ["run", "j.yaml"], {"j.yaml": job(runtime={"state": "d"}), "d": DIR}),
    row("run-goodput-on-ps", ["run", "j.yaml", "--policy", "goodput"], {"j.yaml": job()}),
    # -- run: job files refused before the runtime starts ------------------------------------
    row("run-missing", ["run", "nope.yaml"]),
    row("run-binary", ["run", "j.yaml"], {"j.yaml": BINARY}),
    row("run-dir", ["run", "d"], {"d": DIR}),
    row("run-empty", ["run", "j.yaml"], {"j.yaml": ""}),
    row("run-bad-yaml", ["run", "j.yaml"], {"j.yaml": "name: [x\n"}),
    row("run-name-dotdot", ["run", "j.yaml"], {"j.yaml": job(name="../../escape")}),
    row("run-name-slash", ["run", "j.yaml"], {"j.yaml": job(name="a/b")}),
    row("run-name-absolute", ["run", "j.yaml"], {"j.yaml": job(name="/tmp/abs")}),
    row("run-name-dot", ["run", "j.yaml"], {"j.yaml": job(name="..")}),
    row("run-batch-1e20", ["run", "j.yaml"], {"j.yaml": job(batch_size=10**20)}),
    row("run-dataset-1e15", ["run", "j.yaml"], {"j.yaml": job(dataset_size=10**15)}),
    row("run-dataset-negative", ["run", "j.yaml"], {"j.yaml": job(dataset_size=-5)}),
    row("run-epochs-huge", ["run", "j.yaml"], {"j.yaml": job(epochs=10**15)}),
    row("run-steps-huge", ["run", "j.yaml"], {"j.yaml": job(epochs=None, steps=10**30)}),
    row("run-lr-inf", ["run", "j.yaml"], {"j.yaml": job(training={"lr": math.inf})}),
    row("run-lr-nan", ["run", "j.yaml"], {"j.yaml": job(training={"lr": math.nan})}),
    row("run-seed-negative", ["run", "j.yaml"], {"j.yaml": job(training={"seed": -1})}),
    row("run-metric-interval-huge", ["run", "j.yaml"], {"j.yaml": job(runtime={"metric_interval": "1e30"})}),
    row("run-memory-unit", ["run", "j.yaml"], {"j.yaml": job(budget={"cpu": 2, "memory": "4XB"})}),
    row("run-report-is-dir", ["run", "j.yaml", "--report", "d"], {"j.yaml": job(), "d": DIR}),
    row("run-report-in-proc", ["run", "j.yaml", "--report", "/proc/report.json"], {"j.yaml": job()}),
    row("run-report-kept-on-bad-job", ["run", "j.yaml", "--report", "r.json"], {"j.yaml": job(batch_size=0), "r.json": PRECIOUS}),
    # -- tune ------------------------------------------------------------------------------
    row("tune-space-missing", TUNE),
    row("tune-space-binary", TUNE, {"s.yaml": BINARY}),
    row("tune-space-dir", TUNE, {"s.yaml": DIR}),
    row("tune-space-malformed", TUNE, {"s.yaml": "batch_size: [16, 32\noptimizer: [sgd]\n"}),
    row("tune-space-tab", TUNE, {"s.yaml": "batch_size:\t[16]\n"}),
    row("tune-space-batch-1e20", TUNE, {"s.yaml": SPACE.replace("[16, 32]", "[100000000000000000000]")}),
    row("tune-space-range-1e12", TUNE, {"s.yaml": SPACE.replace("[16, 32]", "{from: 1, to: 1000000000000, step: 1}")}),
    row("tune-space-activation-value", TUNE, {"s.yaml": SPACE + "activation: [zzz]\n"}),
    row("tune-space-negative-width", TUNE, {"s.yaml": SPACE + "hidden: [-4]\n"}),
    row("tune-memory-limit-0", [*TUNE, "--memory-limit", "0"], {"s.yaml": SPACE}),
    row("tune-dataset-size-negative", [*TUNE, "--dataset-size=-5"], {"s.yaml": SPACE}),
    row("tune-dataset-size-1e15", [*TUNE, "--dataset-size", "1000000000000000"], {"s.yaml": SPACE}),
    row("tune-eta-1", [*TUNE, "--eta", "1"], {"s.yaml": SPACE}),
    row("tune-max-resource-inf", ["tune", "--schedule-only", "--max-resource", "inf"]),
    row("tune-sha-too-few", [*TUNE, "--algorithm", "successive-halving", "--configurations", "80"], {"s.yaml": SPACE}),
    row("tune-hyperband-configurations", [*TUNE, "--configurations", "200"], {"s.yaml": SPACE}),
    row("tune-configurations-0", [*TUNE, "--algorithm", "successive-halving", "--configurations", "0"], {"s.yaml": SPACE}),
    row("tune-steps-per-unit-huge", [*TUNE, "--steps-per-unit", "1000000000000"], {"s.yaml": SPACE}),
    row("tune-threshold-nan", [*TUNE, "--threshold", "nan"], {"s.yaml": SPACE}),
    row("tune-option-activation", [*TUNE, "--option", "activation=zzz"], {"s.yaml": SPACE}),
    row("tune-nan-profile", [*TUNE, "--profile", "p.json"], {"s.yaml": SPACE, "p.json": first_sample(forward_s=math.nan)}),
    row("tune-seed-negative", [*TUNE, "--seed=-1"], {"s.yaml": SPACE}),
    # -- simulate --------------------------------------------------------------------------
    row("simulate-trace-missing", ["simulate", "--trace", "nope.csv"]),
    row("simulate-trace-binary", ["simulate", "--trace", "t.csv"], {"t.csv": BINARY}),
    row("simulate-trace-empty", ["simulate", "--trace", "t.csv"], {"t.csv": ""}),
    row("simulate-trace-cpu-1e30", ["simulate", "--trace", "t.csv"], {"t.csv": TRACE_HEAD + "10,1h,1e30\n"}),
    row("simulate-trace-gpus-1e30", ["simulate", "--trace", "t.csv"], {"t.csv": "arrival,duration,cpu,gpus\n0,1h,10,1e30\n"}),
    row("simulate-trace-memory-1e30", ["simulate", "--trace", "t.csv"], {"t.csv": "arrival,duration,cpu,memory\n0,1h,10,1e30\n"}),
    row("simulate-trace-nan-arrival", ["simulate", "--trace", "t.csv"], {"t.csv": TRACE_HEAD + "nan,1h,10\n"}),
    row("simulate-pollux-replicas-1e30", ["simulate", "--trace", "t.csv"], {"t.csv": POLLUX_HEAD + "a,0,cifar10,1e30,64\n"}),
    row("simulate-pollux-inf-time", ["simulate", "--trace", "t.csv"], {"t.csv": POLLUX_HEAD + "a,inf,cifar10,2,64\n"}),
    row("simulate-work-scale-negative", ["simulate", "--trace", "nearchus-40", "--work-scale=-1"]),
    row("simulate-epochs-inf", [*SIM_JOB, "--epochs", "inf"]),
    row("simulate-budget-beyond-cluster", replace(SIM_JOB, "--budget", "1e30")),
    row("simulate-cluster-cpu-1e30", [*SIM_JOB, "--cluster", "cpu=1e30,net_gbps=1"]),
    row("simulate-cluster-net-nan", [*SIM_JOB, "--cluster", "cpu=100,net_gbps=nan"]),
    row("simulate-policy-param-nan", [*replace(SIM_JOB, "--policies", "nearchus"), "--param", "nearchus:r_up=.nan"]),
    row("simulate-policy-param-text", [*replace(SIM_JOB, "--policies", "nearchus"), "--param", "nearchus:r_up=abc"]),
    row("simulate-unknown-policy", replace(SIM_JOB, "--policies", "nearchuss")),
    row("simulate-plot-job-without-plots", [*SIM_JOB, "--plot-job", "resnet50"]),
    row("simulate-plots-is-file", [*SIM_JOB, "--plots", "f"], {"f": PRECIOUS}),
    row("simulate-seed-negative", [*SIM_JOB, "--seed=-1"]),
]  # fmt: skip


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None for a directory)."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize(("argv", "files"), ROWS)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    argv, files, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)  # relative outputs (profiles/, ckpt/) land here, where we look
    for name, content in files.items():
        path = tmp_path / name
        if content is DIR:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    before = snapshot(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err + out
    assert snapshot(tmp_path) == before, "a refused command wrote or changed a file"
