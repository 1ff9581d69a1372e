"""PS training across a shaped kernel link: the PS link's efficiency below line rate, measured.

Issue 18 item 4 asks the PS model for "network efficiency below line rate", and the CM-DARE
check (benchmarks/ps/ps_cmdare.py) found real PS clusters flatten far below their link's line
rate. benchmarks/ps/ps_scaling.py cannot see a link: its nodes talk over loopback, as fast as
the CPU copies. This runs the same PS jobs through the runtime (the master in this process,
every node a process in its own CPU cgroup, TCP between them, shared memory off) inside a
network namespace of its own (``unshare --net``: root, nothing outside it is touched), whose
loopback is turned into a link: an Ethernet MTU (1500 B, so TCP cuts every message into
segments with their headers, as on a cloud VM's NIC) and a token-bucket qdisc at
``--rates`` Mbit/s that every packet between the nodes passes once — the one shared PS link
the models assume, carrying the gradients in and the parameters out (2 x model bytes a
step). Runs without a qdisc (``none``) give the PS's CPU costs and the quota'd workers
(ps_scaling.py ``fit_quota``). Workers step serially unless ``--overlap``.

Measured per run: steady steps/s; the bytes the application moved per step (the PS's own
counters), the bytes the device passed (/proc/net/dev of the namespace) and the bytes the
qdisc charged the link (every segment with its TCP/IP headers, the ACKs, ZeroMQ's framing
and the master's messages) — what was carried, not what was sent. The models move the
planner's bytes: the model's parameters twice a step. Then, held out, each rate's curve is predicted with the efficiency fitted on the other
rates' curves (grid search on the queueing model's MAPE), by:

- ``queueing``: perf/ps.py's queueing model with the fitted efficiency;
- ``queueing@line-rate``: the same at efficiency 1 (the model before this benchmark);
- ``dlrover``: DLRover's eq. 1 with FC2's headroom (p = 0.95), the faithful default of plan;
- ``dlrover@fitted``: eq. 1 with the fitted efficiency as its headroom.

    sudo python benchmarks/ps/ps_link.py --lock /tmp/rightsize-cpu.lock --repeats 2 \\
        --out benchmarks/results/ps_link.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from benchmarks.ps.ps_scaling import (
    CASES,
    Fit,
    fit_quota,
    held,
    mape,
    measure,
    merge_repeats,
    run_order,
    run_spec,
    saturation,
)
from rightsize.perf.ps import (
    FC2_HEADROOM,
    PSSpec,
    WorkerSpec,
    ps_throughput,
    ps_throughput_queueing,
)

#: set in the re-executed child: it runs inside its own network namespace
INSIDE = "RIGHTSIZE_PS_LINK_NETNS"
CASE = "mlp3"  # dense: every parameter moved every step, as in CM-DARE's ResNets
#: Link rates (Mbit/s) that saturate at about 1, 2 and 3 workers of a 0.3-core MLP-3 worker
#: (7.4 MB a step, ~21 steps/s alone); "none": no qdisc, the curve the PS costs are fitted on.
RATES = ("none", "400", "1200", "2400")
MTU = 1500
PS_CPU = 0.5
WORKER_CPU = 0.3  # 0.5 + 4 x 0.3 = 1.7 of this machine's 2 cores: the host is not the limit
MAX_WORKERS = 4
STEPS_PER_WORKER = 60
EFFICIENCY_GRID = [e / 200 for e in range(100, 201)]  # 0.500 .. 1.000


def run_inside(argv: list[str]) -> int:
    """Re-execute this script in a new network namespace (root only)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("tc"):
        print("error: ps_link.py needs root, unshare(1) and tc(8): it shapes the loopback of a "
              "network namespace of its own", file=sys.stderr)  # fmt: skip
        return 2
    command = ["unshare", "--net", "--", sys.executable, os.path.abspath(__file__), *argv]
    return subprocess.call(command, env={**os.environ, INSIDE: "1"})


def shape(rate: str, mtu: int) -> None:
    """This namespace's loopback as a link: its MTU and, unless ``rate`` is none, a token
    bucket at ``rate`` Mbit/s (its burst: a NIC's queue)."""
    subprocess.run(["ip", "link", "set", "lo", "up", "mtu", str(mtu)], check=True)
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)
    if rate != "none":
        # the bucket holds a millisecond of the rate (64 KiB at least): below that, timer
        # slack starves a fast link
        burst = max(64 * 1024, int(link_bytes_per_s(rate) / 1000))
        subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", f"{rate}mbit",
                        "burst", str(burst), "latency", "200ms"], check=True)  # fmt: skip


def carried_bytes() -> int:
    """Bytes this namespace's loopback has sent (/proc/net/dev: what the device passed, a
    header counted once per offloaded packet of up to 64 KiB)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, fields = line.partition(":")
        if name.strip() == "lo":
            return int(fields.split()[8])
    raise RuntimeError("no loopback in /proc/net/dev")


def charged_bytes() -> int:
    """Bytes the token bucket has charged to the link: every TCP segment of at most the MTU
    with its headers, and every ACK — what a NIC would put on the wire (0 without a qdisc)."""
    out = subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", "lo"], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return sum(q.get("bytes", 0) for q in json.loads(out or "[]") if q.get("root"))


def run_point(root: Path, rate: str, workers: int, args) -> dict:
    spec = run_spec(root, CASE, args.ps_cpu, workers, args.worker_cpu, args.steps_per_worker,
                    overlap=args.overlap)
    shape(rate, args.mtu)
    with held(args.lock):
        before, charged_before = carried_bytes(), charged_bytes()
        row = measure(spec)
        carried, charged = carried_bytes() - before, charged_bytes() - charged_before
    # per step of the whole run (start-up and the master's messages included)
    row.update(rate=rate, workers=workers, kernel_bytes_per_step=carried / spec.steps)
    if rate != "none":
        row["link_bytes_per_step"] = charged / spec.steps
    return row


# -- the fits ------------------------------------------------------------------------------


def link_bytes_per_s(rate: str) -> float:
    return float(rate) * 1e6 / 8


def costs(rows_cpu: list[dict], worker_cores: float) -> dict[str, Fit]:
    """The PS's costs and the quota'd worker (its CPU per step alone and its growth with
    co-located workers: ps_scaling.py ``fit_quota``, which holds its PS curves to 2.5-6.7%),
    fitted on the unshaped runs, for each model (eq. 1 has no per-byte cost)."""
    return {"queueing": fit_quota(rows_cpu, worker_cores, queueing=True),
            "dlrover": fit_quota(rows_cpu, worker_cores, queueing=False)}  # fmt: skip


@dataclass(frozen=True)
class Setting:
    """What every run of one result shares: the PS's and each worker's cores, and whether the
    workers push while computing (the queueing model's ``WorkerSpec.overlap``; DLRover's
    eq. 1 has a serial step)."""

    ps_cores: float
    worker_cores: float
    overlap: bool = False


def predict(f: Fit, rate: str, workers: int, moved: float, efficiency: float, model: str,
            setting: Setting) -> float:  # fmt: skip
    """Steps/s on a link of ``rate`` Mbit/s by ``model`` (``queueing...`` or ``dlrover...``):
    ``moved`` bytes a step, ``efficiency`` the queueing model's link efficiency or eq. 1's
    headroom."""
    queueing = model.startswith("queueing")
    worker = WorkerSpec(batch=1, compute_s=f.think_s, link_bytes_per_s=float("inf"),
                        cores=setting.worker_cores, cpu_s_per_step=f.worker_cpu_s,
                        cpu_growth_s=f.worker_cpu_growth_s,
                        overlap=setting.overlap and queueing)  # fmt: skip
    link, model_bytes = link_bytes_per_s(rate), int(moved / 2)
    if queueing:
        ps = PSSpec(1, f.update_cpu_s, setting.ps_cores, link, cpu_s_per_byte=f.cpu_s_per_byte,
                    network_efficiency=efficiency)  # fmt: skip
        return ps_throughput_queueing([worker] * workers, ps, model_bytes).steps_per_s
    ps = PSSpec(1, f.update_cpu_s, setting.ps_cores, link, headroom=efficiency)
    return ps_throughput([worker] * workers, ps, model_bytes).steps_per_s


def moved_per_step(case: str = CASE) -> int:
    """The bytes a step moves through the PS as the planner counts them: the model's
    parameters twice (gradients in, parameters out; ``Profile.param_bytes``)."""
    from rightsize.workloads.registry import WorkloadRegistry
    from rightsize.workloads.workload import count_on_meta

    workload, dataset, options, _, _ = CASES[case]
    built = WorkloadRegistry().get(workload, dataset, options, 1000, seed=0)
    return 2 * count_on_meta(built.build_model).bytes


def curve(rows: list[dict], rate: str) -> dict[int, dict]:
    return {r["workers"]: r for r in sorted(rows, key=lambda r: r["workers"]) if r["rate"] == rate}


def fit_efficiency(rows: list[dict], rates: list[str], setting: Setting, f: Fit,
                   moved: float) -> float:  # fmt: skip
    """The queueing model's link efficiency that best predicts ``rates``' curves (mean MAPE),
    given its fit on the unshaped runs and the bytes a step moves."""

    def error(e: float) -> float:
        return statistics.fmean(
            mape({n: predict(f, rate, n, moved, e, "queueing", setting)
                  for n in curve(rows, rate)},
                 {n: r["steps_per_s"] for n, r in curve(rows, rate).items()})
            for rate in rates)  # fmt: skip

    return min(EFFICIENCY_GRID, key=error)


def held_out(rows: list[dict], setting: Setting) -> dict:
    """Each shaped rate's curve predicted with the efficiency fitted on the other rates."""
    fits = costs(list(curve(rows, "none").values()), setting.worker_cores)
    moved = moved_per_step()
    shaped = sorted({r["rate"] for r in rows} - {"none"}, key=float)
    out = {}
    for rate in shaped:
        points = curve(rows, rate)
        others = [r for r in shaped if r != rate]
        efficiency = fit_efficiency(rows, others, setting, fits["queueing"], moved)
        measured = {n: r["steps_per_s"] for n, r in points.items()}
        most = points[max(points)]
        entry = {
            "measured": measured,
            "measured_saturation_at": saturation(measured),
            "fitted_efficiency": efficiency,
            # at the most workers: what the link charged (segments with their headers; runs
            # before 2026-11-27 10:20 have only the device's count) over its rate, and the
            # parameter bytes the planner counts over its rate
            "line_utilisation": most["steps_per_s"]
            * most.get("link_bytes_per_step", most["kernel_bytes_per_step"])
            / link_bytes_per_s(rate),
            "goodput_fraction": most["steps_per_s"] * moved / link_bytes_per_s(rate),
        }
        for name, e in (("queueing", efficiency), ("queueing@line-rate", 1.0),
                        ("dlrover", FC2_HEADROOM), ("dlrover@fitted", efficiency)):  # fmt: skip
            f = fits[name.partition("@")[0]]
            predicted = {n: predict(f, rate, n, moved, e, name, setting) for n in points}
            entry[name] = {"predicted": predicted, "mape": mape(predicted, measured),
                           "saturation_at": saturation(predicted), "efficiency": e}  # fmt: skip
        out[rate] = entry
    return {"moved_bytes_per_step": moved, "fits": {k: f.__dict__ for k, f in fits.items()},
            "rates": out}  # fmt: skip


MERGED = ("steps_per_s", "ps_cpu_used", "ps_bytes_per_s", "bytes_per_step",
          "kernel_bytes_per_step", "link_bytes_per_step", "worker_cpu_s_per_step")  # fmt: skip


def merged(runs: list[dict], ps_cpu: float) -> list[dict]:
    """One row per (rate, workers): medians over the repeats (``ps_cpu`` for ps_scaling.fit)."""
    rows = merge_repeats([r for r in runs if "error" not in r], ("rate", "workers"), MERGED)
    return [{**row, "ps_cpu": ps_cpu} for row in rows]


def pooled(results: list[dict]) -> list[dict]:
    """The runs of several results of one setting, their repeats numbered on."""
    settings = {(r["case"], r["mtu"], r["ps_cpu"], r["worker_cpu"], r.get("overlap", False))
                for r in results}  # fmt: skip
    if len(settings) > 1:
        raise SystemExit(f"error: --refit pools results of one setting only, got {settings}")
    runs, offset = [], 0
    for result in results:
        runs += [{**r, "repeat": r.get("repeat", 0) + offset} for r in result["all_runs"]]
        offset = 1 + max((r["repeat"] for r in runs), default=-1)
    return runs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default=",".join(RATES), help="Mbit/s, and none (unshaped)")
    parser.add_argument("--mtu", type=int, default=MTU)
    parser.add_argument("--ps-cpu", type=float, default=PS_CPU)
    parser.add_argument("--worker-cpu", type=float, default=WORKER_CPU)
    parser.add_argument("--max-workers", type=int, default=MAX_WORKERS)
    parser.add_argument("--steps-per-worker", type=int, default=STEPS_PER_WORKER)
    parser.add_argument("--overlap", action="store_true",
                        help="workers pull the next step's parameters during this step (the "
                             "runtime's default; off here: the serial step the models and "
                             "TensorFlow's PS take)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--lock", help="hold this file's flock for each run (shared machine)")
    parser.add_argument("--refit", type=Path, nargs="+",
                        help="only fit saved results' runs again (several: their runs pooled, "
                             "repeats numbered on)")  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/ps_link.json")
    args = parser.parse_args(argv)
    rates = args.rates.split(",")
    bad = [r for r in rates if r != "none" and not r.replace(".", "", 1).isdigit()]
    if bad or "none" not in rates or len(rates) < 3 or args.max_workers < 1 or args.repeats < 1:
        print(f"error: --rates needs none and two or more Mbit/s figures (bad: {bad}); "
              "counts must be >= 1", file=sys.stderr)  # fmt: skip
        return 2
    if args.refit:
        results = [json.loads(path.read_text()) for path in args.refit]
        result = {**results[0], "refit": [str(path) for path in args.refit]}
        result["all_runs"] = pooled(results)
        result["runs"] = merged(result["all_runs"], result["ps_cpu"])
        setting = Setting(result["ps_cpu"], result["worker_cpu"], result.get("overlap", False))
        result["held_out"] = held_out(result["runs"], setting)
        write_report(args.out, result)
        return 0
    if os.environ.get(INSIDE) != "1":
        return run_inside(argv)
    result = {"benchmark": "ps_link",
              "load_before": load_note(), "case": CASE, "mtu": args.mtu, "ps_cpu": args.ps_cpu,
              "worker_cpu": args.worker_cpu, "overlap": args.overlap}  # fmt: skip
    runs = []
    with tempfile.TemporaryDirectory(prefix="rightsize-ps-link-") as tmp:
        for repeat in range(args.repeats):
            for rate, workers in run_order(rates, args.max_workers, repeat):
                row = run_point(Path(tmp) / f"{repeat}-{rate}-{workers}", rate, workers, args)
                row["repeat"] = repeat
                print(f"{rate} Mbit/s x {workers} (repeat {repeat}): "
                      f"{row.get('steps_per_s', 0):.2f} steps/s, "
                      f"{row.get('kernel_bytes_per_step', 0) / 1e6:.2f} MB carried a step",
                      file=sys.stderr)  # fmt: skip
                runs.append(row)
    result.update(all_runs=runs, runs=merged(runs, args.ps_cpu), load_after=load_note())
    result["held_out"] = held_out(result["runs"], Setting(args.ps_cpu, args.worker_cpu,
                                                          args.overlap))  # fmt: skip
    write_report(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
