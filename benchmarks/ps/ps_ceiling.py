"""Why a 1-core PS stops at half a core: where the PS's and the host's time goes.

Issue 18 item 4: in benchmarks/ps/ps_scaling.py, Wide & Deep with a 1-core PS never used
more than ~0.52 cores and saturated at the 0.5-core curve's ~26-28 steps/s. Two
causes fit that: (a) the PS serves one request at a time in one Python thread, and
part of each request's service is not CPU (socket waits, handoffs with ZeroMQ's I/O
thread), so its utilisation tops out below its quota; (b) the host is full: six
workers of 1/6 core, the PS, the master (in this process, uncapped) and the OS on
two cores. This runs the same real jobs (ps_scaling.run_spec) and, beside the
master's samples, reads every ``--interval-s``:

- the host's CPU (/proc/stat: busy, and the hypervisor's steal);
- this process's CPU (the master, less this sampler's own thread);
- each node's cgroup: CPU used (cpuacct) and the time its quota throttled it
  (cpu.stat); and its threads' scheduler statistics (/proc/<pid>/task/*/schedstat:
  time on a CPU and ``run_delay``, time runnable but waiting for one). The PS's
  main thread is read apart: the serving loop.

Wall time of the PS's serving thread = on-CPU + run-delay + throttled + asleep. If (a),
it is asleep in its own service (not waiting for requests) while workers queue, and
run-delay is small; if (b), run-delay (and the host's busy + steal) is large.
What the models take (perf/ps.py ``PSSpec.host_cores``, ``colocated_cpu_s_per_step``;
ps_scaling.py ``Ceiling.host``): the host's cores less what anything but the job's nodes
used, and the workers' and master's CPU per step, from the quietest run here.

    flock /tmp/rightsize-cpu.lock python benchmarks/ps/ps_ceiling.py \\
        --out benchmarks/results/ps_ceiling.json
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.job import master_samples
from benchmarks.lib.load import load_note
from benchmarks.lib.repeats import steady
from benchmarks.ps.ps_scaling import run_spec
from rightsize.runtime.master import Master
from rightsize.scaling.registry import make_policy

#: (PS cores, workers): the saturated 1-core point, the quota-bound 0.5-core one, and one
#: worker (its CPU per step alone on the host).
SETTINGS = ((1.0, 6), (0.5, 6), (1.0, 1))
INTERVAL_S = 0.5
SETTLE_S = 6.0  # left out after the last node starts (start-up, warm caches)
TAIL_S = 2.0  # left out before the first node stops
_TICK = os.sysconf("SC_CLK_TCK")


def host_ticks() -> tuple[float, float]:
    """(busy, steal) CPU-seconds of the whole host so far."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq) / _TICK, steal / _TICK


def schedstat(pid: int) -> dict[str, float]:
    """Seconds on a CPU and runnable-but-waiting, of all ``pid``'s threads and of its main one."""
    out = {"on_cpu_s": 0.0, "run_delay_s": 0.0, "main_on_cpu_s": 0.0, "main_run_delay_s": 0.0}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            on, delay, _ = (int(v) for v in Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
        out["on_cpu_s"] += on / 1e9
        out["run_delay_s"] += delay / 1e9
        if int(tid) == pid:
            out["main_on_cpu_s"], out["main_run_delay_s"] = on / 1e9, delay / 1e9
    return out


def throttled_s(cgroup) -> float:
    """Seconds the node's CPU quota held it back so far (cgroup cpu.stat)."""
    v2 = cgroup.version == 2
    path = cgroup.dirs["unified" if v2 else "cpu"] / "cpu.stat"
    stat = dict(line.split() for line in path.read_text().splitlines() if line.strip())
    return int(stat.get("throttled_usec", 0)) / 1e6 if v2 else int(stat.get("throttled_time", 0)) / 1e9


class Sampler(threading.Thread):
    """Cumulative readings of the host, this process and every node, every ``interval_s``."""

    def __init__(self, master: Master, interval_s: float) -> None:
        super().__init__(name="ps-ceiling-sampler", daemon=True)
        self.master, self.interval_s = master, interval_s
        self.readings: list[dict] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval_s):
            backend = self.master.backend
            if backend is None:
                continue
            nodes = {}
            for name, proc in list(backend.procs.items()):
                if proc.cgroup is None or proc.popen.poll() is not None:
                    continue
                try:
                    nodes[name] = {"role": str(proc.node.role), "cpu_s": proc.cgroup.cpu_seconds(),
                                   "throttled_s": throttled_s(proc.cgroup),
                                   **schedstat(proc.popen.pid)}  # fmt: skip
                except OSError:
                    continue  # stopping
            busy, steal = host_ticks()
            usage = resource.getrusage(resource.RUSAGE_SELF)
            own = usage.ru_utime + usage.ru_stime - time.thread_time()
            self.readings.append({"t": time.monotonic(), "host_busy_s": busy, "host_steal_s": steal,
                                  "master_s": own, "nodes": nodes})  # fmt: skip


def window(readings: list[dict], expected: int) -> tuple[dict, dict] | None:
    """The first and last readings with every node running, less start-up and the end."""
    full = [r for r in readings if len(r["nodes"]) == expected]
    if len(full) < 2:
        return None
    start = next((r for r in full if r["t"] >= full[0]["t"] + SETTLE_S), None)
    end = next((r for r in reversed(full) if r["t"] <= full[-1]["t"] - TAIL_S), None)
    if start is None or end is None or end["t"] <= start["t"]:
        return None
    return start, end


def rates(first: dict, last: dict) -> dict:
    """Cores (seconds per second) of everything read, over ``first`` .. ``last``."""
    wall = last["t"] - first["t"]
    out = {"window_s": wall}
    for key in ("host_busy_s", "host_steal_s", "master_s"):
        out[key.removesuffix("_s") + "_cores"] = (last[key] - first[key]) / wall
    roles: dict[str, dict[str, float]] = {}
    for name, node in last["nodes"].items():
        before = first["nodes"].get(name)
        if before is None:
            continue
        into = roles.setdefault(node["role"], {"count": 0})
        into["count"] += 1
        for key in ("cpu_s", "throttled_s", "on_cpu_s", "run_delay_s", "main_on_cpu_s",
                    "main_run_delay_s"):  # fmt: skip
            into[key] = into.get(key, 0.0) + (node[key] - before[key]) / wall
    out["roles"] = roles  # per role, summed over its nodes: fractions of one second of wall
    return out


def measure(spec, expected_nodes: int, interval_s: float) -> dict:
    warnings: list[str] = []
    master = Master(spec, make_policy("static"), fresh=True, warn=warnings.append)
    sampler = Sampler(master, interval_s)
    sampler.start()
    try:
        report = master.run()
    finally:
        sampler.done.set()
        sampler.join()
    rows = [r for r in steady(master_samples(master)) if r["steps_per_s"]]
    span = window(sampler.readings, expected_nodes)
    if not rows or span is None:
        return {"error": "no steady samples", "warnings": warnings}
    out = rates(*span)
    steps = statistics.median(r["steps_per_s"] for r in rows)
    out.update(steps_per_s=steps, exactly_once=report["accounting"].get("exactly_once"),
               wall_time_s=report["wall_time_s"], warnings=warnings)  # fmt: skip
    return out | derived(out, steps)


def derived(out: dict, steps_per_s: float) -> dict:
    """What the readings say per step, and where the PS's serving thread spends its time."""
    ps, workers = out["roles"].get("ps", {}), out["roles"].get("worker", {})
    main_on, main_delay = ps.get("main_on_cpu_s", 0.0), ps.get("main_run_delay_s", 0.0)
    return {
        "ps_cpu_s_per_update": ps.get("cpu_s", 0.0) / steps_per_s,
        "worker_cpu_s_per_step": workers.get("cpu_s", 0.0) / steps_per_s,
        "master_cpu_s_per_step": out["master_cores"] / steps_per_s,
        # the serving thread's second: on a CPU, runnable but waiting (run_delay, which may
        # take in throttled time too), the cgroup's throttled time, and the rest (asleep:
        # idle or in a non-CPU wait of its own; exact where nothing was throttled)
        "ps_main_thread": {"on_cpu": main_on, "run_delay": main_delay,
                           "throttled": ps.get("throttled_s", 0.0),
                           "asleep": max(0.0, 1 - main_on - main_delay - ps.get("throttled_s", 0.0))},
        # cores left to the nodes: the host's, less what the master, the OS and steal used
        "others_cores": out["host_busy_cores"] - ps.get("cpu_s", 0.0) - workers.get("cpu_s", 0.0),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="wide-deep")
    parser.add_argument("--settings", default=",".join(f"{c:g}x{n}" for c, n in SETTINGS),
                        help="PS cores x workers, comma-separated")  # fmt: skip
    parser.add_argument("--worker-cpu", type=float, default=0.166)
    parser.add_argument("--steps-per-worker", type=int, default=150)
    parser.add_argument("--interval-s", type=float, default=INTERVAL_S)
    parser.add_argument("--out", default="benchmarks/results/ps_ceiling.json")
    args = parser.parse_args(argv)
    settings = [(float(c), int(n)) for c, n in (s.split("x") for s in args.settings.split(","))]
    result = {"benchmark": "ps_ceiling",
              "load_before": load_note(), "case": args.case, "worker_cpu": args.worker_cpu,
              "runs": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rightsize-ceiling-") as tmp:
        for ps_cpu, workers in settings:
            spec = run_spec(Path(tmp) / f"{ps_cpu}-{workers}", args.case, ps_cpu, workers,
                            args.worker_cpu, args.steps_per_worker)  # fmt: skip
            row = measure(spec, workers + 1, args.interval_s)
            row.update(ps_cpu=ps_cpu, workers=workers)
            print(f"ps {ps_cpu:g} x {workers}: {row.get('steps_per_s', 0):.1f} steps/s, host "
                  f"{row.get('host_busy_cores', 0):.2f} busy, PS thread "
                  f"{row.get('ps_main_thread')}", file=sys.stderr)  # fmt: skip
            result["runs"].append(row)
    result["load_after"] = load_note()
    write_report(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
