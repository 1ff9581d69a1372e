"""A rank of the user's own training script, as ``rightsize torchrun`` runs it.

The node process (``python -m rightsize.runtime.node --role script``, inside the
rank's cgroup) registers with the master and learns its place in the group
(:class:`protocol.ScriptConfig`); then it does for the script what torchrun does —
sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` (the
master's TCPStore, with ``TORCHELASTIC_USE_AGENT_STORE`` so every rank is its client,
as under torchrun's agent), ``TORCHELASTIC_RESTART_COUNT`` and the rest — installs
the measuring hooks (:mod:`script_hooks`), and runs the script unchanged in this
interpreter as ``__main__``, with its own arguments. A reporter thread sends the
rank's counters to the master every :data:`REPORT_INTERVAL_S` (the master's
metrics and liveness), and the script's ElasticSampler asks the master for data
through the same link (:mod:`script_link`). The rank exits with the script's
exit status; SIGTERM and SIGINT act on the script as they would under torchrun.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any

import numpy as np
import torch

from rightsize.core.spec import JobSpec
from rightsize.runtime import script_hooks, script_link
from rightsize.runtime.node_link import NodeContext, set_threads
from rightsize.runtime.protocol import (
    FileEvent,
    FileReport,
    Heartbeat,
    Mark,
    MarkKind,
    Reply,
    SampleRequest,
    ScriptConfig,
)

#: Seconds between the reporter thread's messages to the master.
REPORT_INTERVAL_S = 0.25


def torchrun_env(config: ScriptConfig, threads: int) -> dict[str, str]:
    """The environment torchrun's local agent gives a worker (one host: local = global)."""
    rank, world = str(config.rank), str(config.world)
    return {
        "RANK": rank, "LOCAL_RANK": rank, "GROUP_RANK": "0", "ROLE_RANK": rank,
        "ROLE_NAME": "default", "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": world,
        "GROUP_WORLD_SIZE": "1", "ROLE_WORLD_SIZE": world,
        "MASTER_ADDR": config.store_host, "MASTER_PORT": str(config.store_port),
        "TORCHELASTIC_RESTART_COUNT": str(config.restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(config.max_restarts),
        "TORCHELASTIC_RUN_ID": config.run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_ERROR_FILE": config.error_file,
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "OMP_NUM_THREADS": str(threads),
    }  # fmt: skip


class Launcher:
    """The rank's side of the master: counters the hooks update, the reporter thread, and the
    ElasticSampler's source of indices. Hooks run on the script's thread; the reporter only
    reads the counters and sends them, under :attr:`lock` (a socket is one thread's at a time)."""

    def __init__(self, ctx: NodeContext, config: ScriptConfig) -> None:
        self.ctx, self.config = ctx, config
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.threads: int | None = None  # a thread count the master asked for, not yet applied
        ctx.apply_threads = self._defer_threads
        self.step_counts: dict[int, int] = {}  # optimizer id -> steps
        self.last_step_at: float | None = None
        # the last training forward's inputs (a DDP model's) and the last batch a DataLoader
        # returned: kept as they are, measured once a backward counts them
        self.forward_args: Any = None
        self.fetched: Any = None
        self.pending_samples = 0  # counted at backward, applied at the next step
        self.losses: deque[torch.Tensor] = deque()  # backward()'s losses since the last report
        self.ring_bytes = 0  # a DDP step's estimated bytes each way
        self.streams = 0
        self.consumed: dict[int, dict[int, int]] = {}  # stream -> epoch -> steps returned
        self.applied: dict[int, dict[int, int]] = {}  # ... at the last optimizer step
        self.loaded_once = False
        self.reporter = threading.Thread(target=self._report_loop, name="rightsize-reporter",
                                         daemon=True)  # fmt: skip

    # -- talking to the master ---------------------------------------------------------
    def call(self, body) -> tuple[Reply, list[torch.Tensor]]:
        with self.lock:
            return self.ctx.call(body)

    def _defer_threads(self, n: int) -> None:
        self.threads = n

    def _apply_threads(self) -> None:
        if self.threads is not None:
            set_threads(self.threads)
            self.threads = None

    def start(self) -> None:
        self.reporter.start()

    def _report_loop(self) -> None:
        while not self.stopped.wait(REPORT_INTERVAL_S):
            self.report()

    def report(self) -> None:
        while self.losses:  # the script's thread appends, this one takes (both atomic)
            self.ctx.loss_sum += float(self.losses.popleft())
            self.ctx.loss_n += 1
        self.call(Heartbeat())

    def finish(self, code: int) -> None:
        """The script ended with ``code``: the last counters, and what it applied."""
        self.stopped.set()
        self.reporter.join(timeout=5.0)
        self.report()
        if code == 0 and self.streams:
            self.call(FileReport(FileEvent.ENDED, "", applied=_jsonable(self.applied)))

    # -- the hooks (script_hooks.Probe), on the script's thread -----------------------------
    def on_step(self, optimizer: torch.optim.Optimizer) -> None:
        key = id(optimizer)
        self.step_counts[key] = self.step_counts.get(key, 0) + 1
        if self.step_counts[key] < max(self.step_counts.values()):
            return  # a second optimizer of the same step (a GAN's): counted once
        now = time.monotonic()
        ctx = self.ctx
        ctx.steps = max(self.step_counts.values())
        ctx.samples += self.pending_samples
        self.pending_samples = 0
        ctx.counters.bytes_out += self.ring_bytes
        ctx.counters.bytes_in += self.ring_bytes
        if self.last_step_at is not None:
            ctx.busy_s += now - self.last_step_at
        self.last_step_at = ctx.counted_at = now
        self.applied = {s: dict(e) for s, e in self.consumed.items()}
        self._apply_threads()

    def on_forward(self, args: Any) -> None:
        self.forward_args = args

    def on_batch(self, loader_iter: Any, batch: Any) -> None:
        self.fetched = batch
        sampler = getattr(loader_iter, "_index_sampler", None)
        take = getattr(sampler, "take", None)
        if take is not None:
            where = take()
            if where is not None:
                epoch, step = where
                self.consumed.setdefault(sampler.stream, {})[epoch] = step + 1
        self._apply_threads()

    def on_backward(self, loss: torch.Tensor) -> None:
        if self.forward_args is not None or self.fetched is not None:
            self.pending_samples += (script_hooks.batch_length(self.forward_args)
                                     or script_hooks.batch_length(self.fetched))  # fmt: skip
            self.forward_args = self.fetched = None
        self.losses.append(loss.detach())

    def on_ddp(self, model: torch.nn.Module) -> None:
        grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters()
                         if p.requires_grad)  # fmt: skip
        world = self.config.world
        self.ring_bytes = int(2 * (world - 1) / world * grad_bytes)

    def on_save(self, path: str, done: bool) -> None:
        if not done:
            self.call(FileReport(FileEvent.SAVING, path, applied=_jsonable(self.applied)))
            return
        mtime, size = _stat(path)
        self.call(FileReport(FileEvent.SAVED, path, mtime, size))

    def on_load(self, path: str, seconds: float) -> None:
        mtime, size = _stat(path)
        self.call(FileReport(FileEvent.LOADED, path, mtime, size))
        if not self.loaded_once:
            self.loaded_once = True
            self.call(Mark(MarkKind.RELOADED, seconds))

    def on_rendezvous(self, seconds: float) -> None:
        self.call(Mark(MarkKind.RENDEZVOUS, seconds))

    # -- the ElasticSampler's source (script_link.SampleSource) ------------------------------
    def new_stream(self) -> int:
        self.streams += 1
        return self.streams - 1

    def samples(self, stream: int, epoch: int, step: int, dataset_size: int, batch_size: int,
                seed: int, shuffle: bool) -> tuple[np.ndarray, int, bool]:  # fmt: skip
        request = SampleRequest(stream, epoch, step, dataset_size, batch_size, seed, shuffle)
        reply, tensors = self.call(request)
        if reply.samples is None:
            raise RuntimeError("rightsize: the master could not serve the ElasticSampler "
                               "(see the master's output)")  # fmt: skip
        indices = tensors[0].numpy() if tensors else np.zeros(0, dtype=np.int64)
        return indices, reply.samples.steps, reply.samples.end


def _stat(path: str) -> tuple[int | None, int | None]:
    try:
        st = os.stat(path)
    except OSError:
        return None, None
    return st.st_mtime_ns, st.st_size


def _jsonable(applied: dict[int, dict[int, int]]) -> dict[str, dict[str, int]]:
    return {str(s): {str(e): n for e, n in epochs.items()} for s, epochs in applied.items()}


def run_program(spec: JobSpec) -> int:
    """Run the job's script (or module) as ``__main__`` with its arguments; its exit status."""
    target = spec.script
    try:
        if spec.module:
            sys.argv = [target, *spec.args]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            path = os.path.abspath(target)
            sys.argv = [target, *spec.args]
            sys.path[0] = os.path.dirname(path)  # as `python train.py` does
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # the script's own error: its traceback is its log's last lines
        traceback.print_exc()
        return 1
    return 0


def run_script_rank(ctx: NodeContext) -> int:
    ctx.register()
    config = ctx.config.script
    ctx.generation = config.generation
    # the script gets the signals torchrun's workers get (the node's own handlers would end
    # it with status 0 on SIGTERM, which reads as success)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.update(torchrun_env(config, ctx.config.threads))
    launcher = Launcher(ctx, config)
    script_link.attach(launcher)
    script_hooks.install(launcher)
    launcher.start()
    code = run_program(ctx.spec)
    launcher.finish(code)
    return code
