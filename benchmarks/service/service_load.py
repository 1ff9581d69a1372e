"""The service under load: API latency with concurrent clients while real jobs run, and the
store's write rate for metric samples (issue 38 item 3).

**API latency**: ``rightsize serve`` on a fresh SQLite store with two real jobs running
(MLP-3 on digits, static, each a PS and a worker of 0.25 cpu: they train and the service
copies their state files into the store every 2 s while the clients call). Then for each
client count (``--clients``, default 10 and 50), that many threads, each with its own
keep-alive connection (as a browser tab holds one), call for ``--seconds``, first paced
(one call every ``--pace`` seconds each, as a page that polls: 50 clients, 50 calls/s),
then flat out (each call as soon as the last one answered: the service's ceiling):

- ``status``: ``GET /jobs/{name}`` (what ``rightsize job`` and the run page ask first);
- ``samples``: ``GET /jobs/{name}/samples?after=N`` for the newest ~10 samples (the run
  page's data call when it polls);
- ``queue``: ``GET /queue`` (the queue page);

and, in a second phase, ``submit``: ``POST /jobs`` of a job that waits (its budget is
more than what is free), every one cancelled afterwards. Each call's latency is measured
from before the request is written to after its body is read; p50, p99 and max per call
and client count, with the requests per second served. The clients run on the same two
cores as the service and its jobs: their latencies include the client's own time (a
client on another machine would see less).

**Store write rate**: a state file of ``--samples`` metric samples (each with two nodes'
rows, as a PS job's) copied into a fresh store by ``Store.ingest``, the service's path,
in batches as the service copies them (every 2 s, ``--batch`` samples), on SQLite and,
with ``--postgres URL`` (or ``$RIGHTSIZE_TEST_POSTGRES``), on PostgreSQL: samples written
per second.

    python benchmarks/service/service_load.py --out benchmarks/results/service_load.json
    python benchmarks/service/service_load.py --clients 10 --seconds 5 --skip-store   # a quick look
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note

ROOT = Path(__file__).resolve().parents[2]
GI = 2**30


def job(name: str, steps: int, cpu: float) -> dict:
    half = cpu / 2
    return {"name": name, "workload": "mlp3", "options": {"hidden": 64}, "dataset": "digits",
            "batch_size": 64, "steps": steps, "strategy": "ps",
            "budget": {"cpu": cpu, "memory": "2Gi"},
            "initial_shape": {"ps": {"count": 1, "cpu": half, "memory": "1Gi"},
                              "workers": {"count": 1, "cpu": half, "memory": "1Gi"}},
            "runtime": {"metric_interval": "1s"}, "policy": {"name": "static"}}  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Api:
    """One keep-alive connection (a thread's own)."""

    def __init__(self, port: int, token: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes, float]:
        data = None if body is None else json.dumps(body).encode()
        t0 = time.perf_counter()
        self.connection.request(method, path, body=data, headers=self.headers)
        answer = self.connection.getresponse()
        content = answer.read()
        return answer.status, content, time.perf_counter() - t0


def percentiles(seconds: list[float]) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    if not ms:
        return {"calls": 0}
    at = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return {"calls": len(ms), "p50_ms": round(statistics.median(ms), 2), "p90_ms": round(at(0.9), 2),
            "p99_ms": round(at(0.99), 2), "max_ms": round(ms[-1], 2)}  # fmt: skip


def in_threads(client, clients: int) -> float:
    """``client(i)`` on ``clients`` threads at once; the seconds until the last one ended."""
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - t0


def read_load(port: int, token: str, names: list[str], clients: int, seconds: float,
              pace_s: float = 0.0) -> dict:  # fmt: skip
    """``clients`` threads calling status, samples and queue in turn for ``seconds``: each a
    call every ``pace_s`` (a page that polls), or back to back with 0 (flat out)."""
    kinds = ("status", "samples", "queue")
    found: dict[str, list[float]] = {k: [] for k in kinds}
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(i: int) -> None:
        api = Api(port, token)
        name = names[i % len(names)]
        mine: dict[str, list[float]] = {k: [] for k in kinds}
        n = 0
        due = time.monotonic() + pace_s * i / clients  # paced clients start spread out
        while time.monotonic() < stop_at:
            if pace_s:
                time.sleep(max(0.0, due - time.monotonic()))
                due += pace_s
            kind = kinds[n % len(kinds)]
            n += 1
            try:
                if kind == "status":
                    status, body, took = api.call("GET", f"/jobs/{name}")
                    latest = json.loads(body)["latest"]
                    after = max(0, (latest or {}).get("seq", 0) - 10)
                elif kind == "samples":
                    status, _, took = api.call("GET", f"/jobs/{name}/samples?after={after}")
                else:
                    status, _, took = api.call("GET", "/queue")
            except (OSError, http.client.HTTPException) as exc:
                with lock:
                    errors.append(f"{kind}: {exc}")
                api = Api(port, token)
                continue
            if status != 200:
                with lock:
                    errors.append(f"{kind}: {status}")
            mine[kind].append(took)
        with lock:
            for kind in kinds:
                found[kind] += mine[kind]

    wall = in_threads(client, clients)
    calls = sum(len(v) for v in found.values())
    return {"clients": clients, "pace_s": pace_s or None, "seconds": round(wall, 2),
            "requests_per_s": round(calls / wall, 1),
            "errors": len(errors), "first_errors": errors[:5],
            **{kind: percentiles(found[kind]) for kind in kinds}}  # fmt: skip


def submit_load(port: int, token: str, clients: int, per_client: int) -> dict:
    """``clients`` threads each submitting ``per_client`` jobs that wait; all cancelled after."""
    took: list[float] = []
    names: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()
    waiting = job("load", 100, 2.0)  # the whole machine: waits behind the running jobs

    def client(i: int) -> None:
        api = Api(port, token)
        for k in range(per_client):
            status, body, seconds = api.call("POST", "/jobs", {**waiting, "name": f"load-{i}-{k}"})
            with lock:
                took.append(seconds)
                if status == 201:
                    names.append(json.loads(body)["name"])
                else:
                    errors.append(f"{status}: {body[:200]!r}")

    wall = in_threads(client, clients)
    api = Api(port, token)
    for name in names:
        api.call("POST", f"/jobs/{name}/cancel")
    return {"clients": clients, "submitted": len(names), "errors": len(errors),
            "first_errors": errors[:5], "requests_per_s": round(len(took) / wall, 1),
            "submit": percentiles(took)}  # fmt: skip


def api_latency(args: argparse.Namespace, home: Path) -> dict:
    from rightsize.service.store import Store

    database = home / "store.db"
    store = Store(str(database))
    token = store.create_token("load")
    store.close()
    port = free_port()
    log = open(home / "serve.log", "ab")  # noqa: SIM115 (the service's whole life)
    service = subprocess.Popen([sys.executable, "-m", "rightsize", "serve", "--database",
                                str(database), "--port", str(port), "--workdir",
                                str(home / "work")], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        api = Api(port, token)
        deadline = time.monotonic() + 60
        while True:
            try:
                api.call("GET", "/me")
                break
            except OSError:
                if time.monotonic() > deadline or service.poll() is not None:
                    raise SystemExit("the service did not start: " + (home / "serve.log").read_text()[-2000:]) from None
                time.sleep(0.3)
                api = Api(port, token)
        names = []
        for i in range(2):
            status, body, _ = api.call("POST", "/jobs", job(f"trainer-{i}", args.steps, 0.5))
            assert status == 201, body
            names.append(json.loads(body)["name"])
        print("waiting for the two jobs to run and be sampled...", flush=True)
        while True:
            rows = json.loads(api.call("GET", "/queue")[1])
            if all(r["latest"] and r["latest"]["seq"] >= 5 for r in rows):
                break
            time.sleep(1)
        reads = []
        for pace_s in (args.pace, 0.0):
            for clients in args.clients:
                how = f"a call every {pace_s:g} s each" if pace_s else "flat out"
                print(f"{clients} clients reading for {args.seconds:g} s, {how}...", flush=True)
                reads.append(read_load(port, token, names, clients, args.seconds, pace_s))
                print(json.dumps({k: reads[-1][k] for k in ("requests_per_s", "status",
                                                            "errors")}), flush=True)  # fmt: skip
        submits = []
        for clients in args.clients:
            print(f"{clients} clients submitting...", flush=True)
            submits.append(submit_load(port, token, clients, max(1, args.submits // clients)))
        rows = json.loads(Api(port, token).call("GET", "/queue")[1])  # (idle ones close)
        still_running = [r["job"]["name"] for r in rows if r["job"]["phase"] == "running"]
        return {"jobs_running_throughout": sorted(still_running) == sorted(names),
                "reads": reads, "submits": submits}  # fmt: skip
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(120)


def store_rate(url: str, samples: int, batch: int, home: Path) -> dict:
    from rightsize.core.resources import Resources
    from rightsize.core.shape import ClusterShape
    from rightsize.core.spec import parse_job_spec
    from rightsize.runtime.state import LaunchRow, StateStore
    from rightsize.service.models import JobPhase, Source
    from rightsize.service.store import Store

    state_path = home / f"rate-{time.monotonic_ns()}.sqlite"
    state = StateStore(state_path)
    shape = ClusterShape.from_counts(1, 1, Resources(0.5, GI), Resources(0.5, GI))
    state.start_job("rate", {}, "id", time.time(), LaunchRow(shape, "launch", "bench", {}))
    store = Store(url)
    spec = parse_job_spec(job("rate", 100, 1.0))
    row = store.add_job(spec, owner_id=None, source=Source.RUN, phase=JobPhase.RUNNING,
                        state_path=state_path, policy="static")  # fmt: skip
    node = {"cpu_used": 0.4, "cpu_allocated": 0.5, "memory_used": GI, "memory_allocated": 2 * GI,
            "net_in": 1e6, "net_out": 2e6, "steps_per_s": 10.0}  # fmt: skip
    spent = 0.0
    for start in range(0, samples, batch):
        for step in range(start, min(samples, start + batch)):
            state.record_sample(float(step), {
                "time_s": float(step), "epoch": 0, "steps_done": step, "steps_total": samples,
                "steps_per_s": 10.0, "samples_per_s": 640.0, "loss": 1.0, "e_job": 0.9,
                "shape": "1 PS + 1 worker",
                "nodes": [{"name": "ps-0", "role": "ps", **node},
                          {"name": "worker-0", "role": "worker", **node}]})  # fmt: skip
        t0 = time.perf_counter()
        store.ingest(row.id, state_path)
        spent += time.perf_counter() - t0
    written = len(store.samples(row.id))
    store.close()
    state.close()
    return {"store": url.split(":", 1)[0] if "://" in url else "sqlite", "samples": written,
            "batch": batch, "seconds": round(spent, 3),
            "samples_per_s": round(written / spent, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=lambda t: [int(x) for x in t.split(",")],
                        default=[10, 50], help="client counts, comma-separated (default 10,50)")
    parser.add_argument("--seconds", type=float, default=20.0, help="per client count")
    parser.add_argument("--pace", type=float, default=1.0,
                        help="seconds between a paced client's calls (a page polling; the "
                             "flat-out run follows)")
    parser.add_argument("--submits", type=int, default=200, help="jobs submitted per count")
    parser.add_argument("--steps", type=int, default=200_000, help="the running jobs' steps")
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=2, help="samples per copy (1 s metrics, "
                        "copied every 2 s)")
    parser.add_argument("--postgres", default=os.environ.get("RIGHTSIZE_TEST_POSTGRES"),
                        help="a PostgreSQL server's URL for the store's write rate")
    parser.add_argument("--skip-store", action="store_true")
    parser.add_argument("--skip-api", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/service_load.json")
    args = parser.parse_args(argv)
    report: dict = {
                    "load_before": load_note()}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        if not args.skip_api:
            report["api"] = api_latency(args, home)
        if not args.skip_store:
            rates = [store_rate(str(home / "rate.db"), args.samples, args.batch, home)]
            if args.postgres:
                import uuid

                import psycopg

                name = f"rs_bench_{uuid.uuid4().hex[:8]}"
                with psycopg.connect(args.postgres, autocommit=True) as connection:
                    connection.execute(f"CREATE DATABASE {name}")
                rates.append(store_rate(args.postgres.rsplit("/", 1)[0] + f"/{name}",
                                        args.samples, args.batch, home))  # fmt: skip
            report["store_write"] = rates
            print(json.dumps(rates), flush=True)
    write_report(args.out, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
