"""Simulations from the web pages: `rightsize simulate` on a trace, in a subprocess.

A user picks a built-in trace or uploads a CSV (Pollux's format, or arrival, duration
and CPU per job), a cluster, the policies and a seed; the service checks them as the
command does (422 naming the field), then runs ``rightsize simulate --json --plots``
in its own process at a lower CPU priority than the jobs (``nice``), so that a
simulation never slows the real jobs the service runs nor holds the service's GIL.
Its JSON answer and its plots stay in the simulation's directory; the store keeps the
request and the answer. A simulation that was running when the service stopped is
marked failed on the next start (it is cheap to run again).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rightsize.cluster.clusters import parse_cluster
from rightsize.cluster.scheduler import SchedulingOrder
from rightsize.cluster.traces import BUILTIN_TRACES, check_fits, load_trace
from rightsize.core.errors import RightsizeError, SpecError
from rightsize.core.limits import MAX_SEED
from rightsize.scaling.registry import COMPARED, policies_named
from rightsize.service.schemas import SimulationView
from rightsize.service.store import Store

#: An uploaded trace: at most this many characters (about 20,000 jobs).
MAX_TRACE_CHARS = 1_000_000
#: Niceness of a simulation's process: the jobs' nodes come first.
SIMULATION_NICE = 10
#: The trace name that means "the CSV in trace_csv".
UPLOAD = "upload"
#: Lines of a failed simulation's output kept as its error.
ERROR_LINES = 3


class SimulationRequest(BaseModel):
    """What to simulate (``rightsize simulate --trace``'s options)."""

    model_config = ConfigDict(extra="forbid")

    trace: str = Field(default=BUILTIN_TRACES[0], max_length=200,
                       description=f"a built-in trace ({', '.join(BUILTIN_TRACES)}) or "
                       f"'{UPLOAD}' for the CSV in trace_csv")  # fmt: skip
    trace_csv: str | None = Field(default=None, max_length=MAX_TRACE_CHARS,
                                  description="a Pollux-format CSV, or arrival,duration,cpu")  # fmt: skip
    trace_name: str | None = Field(default=None, max_length=200,
                                   description="the uploaded file's name, for the results")  # fmt: skip
    cluster: str = Field(default="A", max_length=200,
                         description="A, B or cpu=N,net_gbps=G[,server_cores=C]")  # fmt: skip
    policies: list[str] = Field(default=list(COMPARED), min_length=1, max_length=10)
    seed: int = Field(default=1, ge=0, le=MAX_SEED)
    order: SchedulingOrder = SchedulingOrder.FCFS


class Simulations:
    """Starts, watches and reads the service's simulations, under ``directory``."""

    def __init__(self, store: Store, directory: Path) -> None:
        self.store, self.directory = store, directory
        self._lock = threading.Lock()
        self._running: dict[int, tuple[subprocess.Popen, Path]] = {}
        for orphan in store.simulations(phase="running"):  # its process died with a service
            store.end_simulation(orphan.id, None, "the service stopped while it ran; run it again")

    def start(self, request: SimulationRequest, owner_id: int) -> SimulationView:
        """Check ``request`` as `rightsize simulate` would, then run it.

        Raises:
            SpecError: a field that cannot be simulated, named.
        """
        try:
            cluster = parse_cluster(request.cluster, flag="")
        except RightsizeError as exc:
            raise SpecError(str(exc), field="cluster") from None
        try:
            policies_named(request.policies, flag="policies")
        except RightsizeError as exc:
            raise SpecError(str(exc), field="policies") from None
        home = self.directory / uuid.uuid4().hex
        home.mkdir(parents=True)
        trace_arg, field = self._trace(request, home)
        try:
            trace = load_trace(trace_arg, seed=request.seed)
            check_fits(trace, cluster.capacity, cluster.name, flag="cluster")
        except RightsizeError as exc:  # the upload's path on this machine is not the user's
            raise SpecError(str(exc).replace(trace_arg, "the CSV"), field=field) from None
        view = self.store.add_simulation(owner_id, trace.name,
                                         request.model_dump(exclude={"trace_csv"}), home)  # fmt: skip
        argv = [sys.executable, "-m", "rightsize", "simulate", "--trace", trace_arg, "--cluster",
                request.cluster, "--policies", ",".join(request.policies), "--seed",
                str(request.seed), "--order", str(request.order), "--json", "--plots",
                str(home / "plots")]  # fmt: skip
        with open(home / "result.json", "wb") as out, open(home / "log", "wb") as log:
            popen = subprocess.Popen(argv, stdout=out, stderr=log, stdin=subprocess.DEVNULL,
                                     preexec_fn=lambda: os.nice(SIMULATION_NICE))  # fmt: skip
        with self._lock:
            self._running[view.id] = (popen, home)
        return view

    @staticmethod
    def _trace(request: SimulationRequest, home: Path) -> tuple[str, str]:
        """The ``--trace`` argument and the field that names it."""
        if request.trace != UPLOAD:
            if request.trace not in BUILTIN_TRACES:
                raise SpecError(f"no built-in trace {request.trace!r}; choose "
                                f"{', '.join(BUILTIN_TRACES)} or {UPLOAD!r} with trace_csv", field="trace")  # fmt: skip
            return request.trace, "trace"
        if not request.trace_csv:
            raise SpecError(f"give the CSV when trace is {UPLOAD!r}", field="trace_csv")
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.trace_name or "uploaded")
        path = home / f"{stem.removesuffix('.csv')[:80] or 'uploaded'}.csv"
        path.write_text(request.trace_csv)
        return str(path), "trace_csv"

    def refresh(self) -> None:
        """Record the simulations whose process ended."""
        with self._lock:
            ended = {i: r for i, r in self._running.items() if r[0].poll() is not None}
            for simulation_id in ended:
                del self._running[simulation_id]
        for simulation_id, (popen, home) in ended.items():
            try:
                result = json.loads((home / "result.json").read_text())
            except (OSError, ValueError):
                result = None
            if popen.returncode == 0 and result is not None:
                self.store.end_simulation(simulation_id, result, None)
            else:
                lines = [ln for ln in (home / "log").read_text(errors="replace").splitlines() if ln]
                error = "\n".join(lines[-ERROR_LINES:]) or f"exit status {popen.returncode}"
                self.store.end_simulation(simulation_id, None, error)

    def plot(self, view: SimulationView, name: str) -> Path | None:
        """One of a finished simulation's plots by file name (None: no such plot)."""
        plots = (view.result or {}).get("plots", [])
        found = next((Path(p) for p in plots if Path(p).name == name), None)
        return found if found is not None and found.is_file() else None

    def stop(self) -> None:
        with self._lock:
            for popen, _ in self._running.values():
                popen.kill()
                popen.wait()
            self._running.clear()
