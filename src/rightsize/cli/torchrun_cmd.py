"""``rightsize torchrun``: torchrun's command line on one host, right-sized.

Takes what ``torchrun`` takes on one host (``--nproc-per-node``, ``--nnodes 1``,
``--max-restarts``, ``--standalone``, the ``--rdzv-*`` options, ``-m``; both
``--dash-names`` and ``--underscore_names``) and the script with its arguments, turns
them into a job with ``script:`` and ``args:`` (what a job file for ``rightsize run``
can say too), and runs it through the same front door as ``rightsize run``. rightsize's
own options say what the job may use and who sizes it: ``--policy``, ``--budget-cpu``,
``--budget-memory``, ``--min-nproc``/``--max-nproc``, ``--cpu-per-proc``/
``--memory-per-proc`` (the start), ``--report``, ``--json``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from rightsize.cli.args import bounded, parse_options
from rightsize.cli.run_cmd import run_job
from rightsize.cli.store_args import add_store_arguments, open_store
from rightsize.core.errors import SpecError
from rightsize.core.files import check_output_path
from rightsize.core.limits import ITERATIONS, RESTARTS, WORKERS
from rightsize.core.spec import Backend, JobSpec, parse_job_spec
from rightsize.core.units import format_bytes, parse_cpu, parse_memory
from rightsize.scaling.registry import policy_names

#: The policy ``rightsize torchrun`` sizes a script with unless told (see docs/runtime.md).
DEFAULT_POLICY = "static"
#: Memory each rank starts with at most, unless told (the budget's share when smaller).
DEFAULT_RANK_MEMORY = 2 * 2**30
#: rendezvous backends torchrun knows that mean "the agent serves the store" on one host.
LOCAL_RDZV = ("c10d", "static")


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run your own torchrun script unchanged, right-sized: each rank a process in its own "
        "cgroup (CPU quota, memory limit), measured without touching the script (optimizer "
        "steps, samples, CPU, memory, network), resized in place or by torchrun's contract "
        "(stop, new world size, the script resumes from its own checkpoint) when a policy asks "
        "and the move pays back its measured restart cost. Swap `torchrun` for "
        "`rightsize torchrun`."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("torchrun options accepted on one host: --nproc-per-node, --nnodes 1, "
                     "--node-rank 0, --max-restarts, --standalone, --rdzv-backend c10d|static, "
                     "--rdzv-endpoint, --rdzv-id, --rdzv-conf, --master-addr, --master-port, "
                     "-m/--module, --run-path, and (ignored) --monitor-interval, "
                     "--start-method, --role, --log-dir, --redirects, --tee, --local-addr.")
    torchrun = parser.add_argument_group("torchrun's options")
    torchrun.add_argument("--nproc-per-node", "--nproc_per_node", default=None, metavar="N",
                          help="ranks to start with: a number, or cpu/gpu/auto (default: the "
                               "fastest shape a finished run of the same script and arguments "
                               "measured, stored on this host; else 1)")
    torchrun.add_argument("--nnodes", default="1", help="hosts: only 1 (one host)")
    torchrun.add_argument("--node-rank", "--node_rank", type=int, default=0, help="only 0")
    torchrun.add_argument("--max-restarts", "--max_restarts", type=bounded(RESTARTS), default=0,
                          help="restarts of the group after a rank fails (torchrun's; "
                               "default 0)")
    torchrun.add_argument("--standalone", action="store_true",
                          help="accepted: the master always serves the group's store")
    torchrun.add_argument("--rdzv-backend", "--rdzv_backend", default="c10d",
                          help="c10d or static (the master serves the store either way)")
    torchrun.add_argument("--rdzv-endpoint", "--rdzv_endpoint", default="",
                          help="accepted and not needed: the master serves the store")
    torchrun.add_argument("--rdzv-id", "--rdzv_id", default=None,
                          help="the run id the ranks see (TORCHELASTIC_RUN_ID)")
    torchrun.add_argument("--rdzv-conf", "--rdzv_conf", default="", help="accepted, ignored")
    torchrun.add_argument("--master-addr", "--master_addr", default=None,
                          help="accepted: ranks get the master's store address")
    torchrun.add_argument("--master-port", "--master_port", type=int, default=None,
                          help="accepted: ranks get the master's store port")
    torchrun.add_argument("-m", "--module", action="store_true",
                          help="run SCRIPT as a module (python -m)")
    torchrun.add_argument("--no-python", "--no_python", action="store_true",
                          help="not supported: the ranks run Python with rightsize's hooks")
    torchrun.add_argument("--run-path", "--run_path", action="store_true",
                          help="accepted: the script runs as __main__ (the default)")
    for name in ("--monitor-interval", "--start-method", "--role", "--log-dir", "--redirects",
                 "--tee", "--local-addr", "--local-ranks-filter", "--logs-specs"):
        torchrun.add_argument(name, name.replace("-", "_").replace("__", "--"), default=None,
                              help=argparse.SUPPRESS)
    own = parser.add_argument_group("rightsize's options")
    own.add_argument("--policy", default=None,
                     help=f"who sizes the job ({', '.join(policy_names())}; default "
                          f"{DEFAULT_POLICY}: the shape you give, measured)")
    own.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                     help="a parameter of the policy, e.g. growth=2 (repeatable; "
                          "docs/torchrun.md lists them)")
    own.add_argument("--budget-cpu", default=None, metavar="CPU",
                     help="the most CPU the job may hold (default: this machine's CPUs)")
    own.add_argument("--budget-memory", default=None, metavar="MEM",
                     help="the most memory it may hold (default: half this machine's)")
    own.add_argument("--min-nproc", type=bounded(WORKERS), default=None,
                     metavar="N", help="the fewest ranks a policy may choose (default 1)")
    own.add_argument("--max-nproc", type=bounded(WORKERS), default=None,
                     metavar="N", help="the most ranks a policy may choose (default: the budget)")
    own.add_argument("--cpu-per-proc", default=None, metavar="CPU",
                     help="each rank's CPU at the start (default: the budget's share)")
    own.add_argument("--memory-per-proc", default=None, metavar="MEM",
                     help=f"each rank's memory at the start (default: the budget's share, at "
                          f"most {format_bytes(DEFAULT_RANK_MEMORY)})")
    own.add_argument("--steps", type=bounded(ITERATIONS), default=None, metavar="N",
                     help="optimizer steps the script takes in all, if you know it (weighs "
                          "whether a restart pays)")  # fmt: skip
    own.add_argument("--name", default=None, help="the job's name (default: the script's)")
    own.add_argument("--checkpoint-dir", default="checkpoints", metavar="DIR",
                     help="where the job's state file, report and rank logs go "
                          "(default: checkpoints)")
    own.add_argument("--report", metavar="FILE",
                     help="where to write the JSON report (default: DIR/NAME-report.json)")
    own.add_argument("--fresh", action="store_true",
                     help="start over even if an interrupted run of this job is in DIR")
    own.add_argument("--oversubscribe", action="store_true",
                     help="run ranks and budgets larger than this machine")
    own.add_argument("--no-cpu-pool", dest="cpu_pool", action="store_false",
                     help="hold each rank to its own CPU quota (default: the ranks share the "
                          "sum of theirs, so one runs on what a waiting one leaves idle)")
    own.add_argument("--backend", choices=[str(b) for b in Backend], default=None,
                     help="local (this machine, default) or ray (a Ray cluster's nodes)")
    own.add_argument("--ray-address", metavar="ADDR", default=None,
                     help="the Ray cluster to join (default auto)")
    add_store_arguments(own)
    own.add_argument("--json", action="store_true", help="print the report as JSON")
    own.add_argument("--quiet", action="store_true", help="no progress display")
    parser.add_argument("script", help="your training script (or module, with -m)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER,
                        help="the script's own arguments")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.report:  # before the job trains: a report that cannot be written would be lost
        check_output_path(args.report, "--report")
    spec = job_from_args(args)
    launch = None if args.nproc_per_node is not None else from_history(spec, args)
    return run_job(spec, args, launch)


def from_history(spec: JobSpec, args: argparse.Namespace):
    """The fastest shape a finished run of the same script and arguments measured (the store's
    history, as the service starts a job: DLRover §4.3), fitted into the budget; None if
    there is none (the job starts with one rank)."""
    from rightsize.runtime.backends.local import machine_resources
    from rightsize.service import history

    store = open_store(args)
    try:
        found = history.found(store, spec)
    finally:
        store.close()
    return history.launch_plan(found, spec.budget.resources, machine_resources())


def job_from_args(args: argparse.Namespace, machine: Any = None) -> JobSpec:
    """The job ``rightsize torchrun``'s command line describes.

    Raises:
        SpecError: an option that cannot hold on one host, or values that do not fit.
    """
    from rightsize.runtime.backends.local import machine_resources

    _check_one_host(args)
    machine = machine or machine_resources()
    nproc = _nproc(args.nproc_per_node or "1", machine.cpu_cores)
    budget_cpu = parse_cpu(args.budget_cpu) if args.budget_cpu else machine.cpu_cores
    budget_memory = (parse_memory(args.budget_memory) if args.budget_memory
                     else machine.memory_bytes // 2)  # fmt: skip
    cpu = parse_cpu(args.cpu_per_proc) if args.cpu_per_proc else budget_cpu / nproc
    memory = (parse_memory(args.memory_per_proc) if args.memory_per_proc
              else min(DEFAULT_RANK_MEMORY, budget_memory // nproc))  # fmt: skip
    low, high = args.min_nproc or 1, args.max_nproc
    if high is not None and low > high:
        raise SpecError(f"--min-nproc {low} is more than --max-nproc {high}")
    if not low <= nproc <= (high or nproc):
        raise SpecError(f"--nproc-per-node {nproc} is outside --min-nproc {low} .. "
                        f"--max-nproc {high}")  # fmt: skip
    runtime: dict[str, Any] = {"max_restarts": args.max_restarts}
    if not args.cpu_pool:
        runtime["cpu_pool"] = False
    if args.backend:
        runtime["backend"] = args.backend
    if args.ray_address:
        runtime["ray_address"] = args.ray_address
    data = {
        "name": args.name or job_name(args.script, args.module),
        "script": args.script,
        "args": list(args.script_args),
        "module": args.module,
        "steps": args.steps,
        "budget": {"cpu": budget_cpu, "memory": budget_memory},
        "initial_shape": {"workers": {"count": nproc, "cpu": cpu, "memory": memory}},
        "policy": {"name": args.policy or DEFAULT_POLICY, "min_workers": low,
                   "max_workers": high,
                   "params": parse_options(args.policy_param, "--policy-param")},  # fmt: skip
        "runtime": runtime,
        "checkpoint": {"dir": args.checkpoint_dir},
    }
    if args.policy is None:
        args.policy = DEFAULT_POLICY
    return parse_job_spec(data, "command line")


def _check_one_host(args: argparse.Namespace) -> None:
    if args.nnodes not in ("1", "1:1"):
        raise SpecError(f"--nnodes {args.nnodes}: rightsize torchrun runs one host's ranks "
                        "(--nnodes 1); for ranks across hosts, use --backend ray")  # fmt: skip
    if args.node_rank != 0:
        raise SpecError(f"--node-rank {args.node_rank}: one host is node 0")
    if args.no_python:
        raise SpecError("--no-python is not supported: each rank runs your script in Python "
                        "with rightsize's measuring hooks")  # fmt: skip
    if args.rdzv_backend not in LOCAL_RDZV:
        raise SpecError(f"--rdzv-backend {args.rdzv_backend}: not needed, rightsize's master "
                        f"serves the group's store (use {' or '.join(LOCAL_RDZV)})")  # fmt: skip


def _nproc(value: str, cpus: float) -> int:
    """torchrun's --nproc-per-node: a count, or cpu (the CPUs), gpu (the GPUs), auto (GPUs if
    any, else CPUs)."""
    if value in ("cpu", "gpu", "auto"):
        gpus = _gpus()
        if value == "gpu" and not gpus:
            raise SpecError("--nproc-per-node gpu: this machine has no GPU")
        return gpus if value != "cpu" and gpus else max(1, int(cpus))
    try:
        n = int(value)
    except ValueError:
        raise SpecError(f"--nproc-per-node {value!r}: give a number of ranks, or cpu, gpu, "
                        "auto") from None  # fmt: skip
    WORKERS.check(n, "--nproc-per-node")
    return n


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def job_name(script: str, module: bool = False) -> str:
    """A plain job name from the script's (``train.py``, ``pkg.train`` with -m -> ``train``)."""
    stem = script.rsplit(".", 1)[-1] if module else Path(script).stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip(".-_") or "script"
    return name[:100]
