"""``make demo``: the service as a new user meets it, on embedded defaults, in a few minutes.

It starts ``rightsize serve`` on a fresh SQLite store under ``--dir``, makes a token, and
submits three real jobs to it through the API, as ``rightsize submit`` does:

1. **mis-sized**: Wide & Deep on two parameter servers' worth of work, started at a tenth
   of its budget on each node; NEARCHUS+ grows it while it trains;
2. **queued**: an MLP submitted once the first has grown, which waits in the queue until
   the first job's CPU is free (the service never holds more than the machine);
3. **from history**: the first job again with ``initial_shape: auto``, submitted once the
   first has finished: the service starts it from the shape the first run measured
   fastest (DLRover §4.3) instead of from the mis-sized start.

It prints what happens as it happens (phases, every move with its reason, progress every
few seconds), the web pages' URL with the token to sign in with, and at the end each
job's launch, predicted and measured time and its exactly-once check. The service stops
with the demo; ``rightsize serve`` on the same store shows the jobs again (the last lines
say how).

    python -m rightsize.service.demo --dir demo-output
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rightsize.core.units import format_duration
from rightsize.service.client import Client, ServiceRefused
from rightsize.service.models import JobPhase

#: The first job: examples/wide-deep-missized.yaml, shorter (the demo's minutes are few).
MISSIZED: dict[str, Any] = {
    "name": "missized", "workload": "wide-deep", "options": {"embed_dim": 8, "hidden": [64, 32]},
    "dataset": "synthetic-criteo", "dataset_size": 50000, "batch_size": 512, "epochs": 16,
    "strategy": "ps", "budget": {"cpu": 2, "memory": "6Gi"},
    "initial_shape": {"ps": {"count": 1, "cpu": 0.2, "memory": "1Gi"},
                      "workers": {"count": 2, "cpu": 0.2, "memory": "1Gi"}},
    "checkpoint": {"interval": "20s"}, "training": {"optimizer": "adagrad", "lr": 0.05},
    "policy": {"name": "nearchus+"},
}  # fmt: skip
#: The second: small, static, submitted once the first has grown: it waits for its CPU.
QUEUED: dict[str, Any] = {
    "name": "queued", "workload": "mlp3", "options": {"hidden": 64}, "dataset": "digits",
    "batch_size": 64, "steps": 1500, "strategy": "ps", "budget": {"cpu": 1, "memory": "2Gi"},
    "initial_shape": {"ps": {"count": 1, "cpu": 0.5, "memory": "1Gi"},
                      "workers": {"count": 1, "cpu": 0.5, "memory": "1Gi"}},
    "training": {"optimizer": "sgd", "lr": 0.05}, "policy": {"name": "static"},
}  # fmt: skip
#: The third: the first again, started where history says.
AGAIN: dict[str, Any] = {**MISSIZED, "name": "from-history", "initial_shape": "auto"}
#: Seconds between progress lines while nothing else is said.
PROGRESS_EVERY_S = 10.0
POLL_S = 1.0


class Demo:
    """The service process, a client of it, and what has been said so far."""

    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port = home, port
        self.t0 = time.monotonic()
        self.service: subprocess.Popen | None = None
        self.client: Client | None = None
        self.said_phase: dict[str, str] = {}
        self.said_moves: dict[str, int] = {}
        self.last_progress = 0.0

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:5.0f} s] {text}", flush=True)

    # -- the service ------------------------------------------------------------------
    def start(self) -> None:
        from rightsize.service.store import Store

        database = self.home / "store.db"
        store = Store(str(database))
        token = store.create_token("demo")
        store.close()
        (self.home / "token").write_text(token + "\n")
        log = open(self.home / "serve.log", "ab")  # noqa: SIM115 (the service's whole life)
        self.service = subprocess.Popen(
            [sys.executable, "-m", "rightsize", "serve", "--database", str(database),
             "--workdir", str(self.home / "work"), "--port", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        self.client = Client(f"http://127.0.0.1:{self.port}", token)
        self.say(f"starting rightsize serve on http://127.0.0.1:{self.port} (store {database})")
        deadline = time.monotonic() + 120
        while True:
            try:
                self.client.call("GET", "/me")
                break
            except ServiceRefused:
                if self.service.poll() is not None or time.monotonic() > deadline:
                    tail = (self.home / "serve.log").read_text(errors="replace")[-1500:]
                    raise SystemExit(f"error: the service did not start:\n{tail}") from None
                time.sleep(0.5)
        self.say(f"web pages: http://127.0.0.1:{self.port}/ui/  (sign in with the token in "
                 f"{self.home / 'token'})")  # fmt: skip

    def stop(self) -> None:
        if self.service is not None and self.service.poll() is None:
            self.service.send_signal(signal.SIGTERM)
            try:
                self.service.wait(90)
            except subprocess.TimeoutExpired:
                self.service.kill()

    # -- the jobs ---------------------------------------------------------------------
    def submit(self, job: dict[str, Any], why: str) -> str:
        assert self.client is not None
        view = self.client.call("POST", "/jobs", job)
        self.say(f"submitted {view['name']} ({why}): {view['phase']}")
        self.said_phase[view["name"]] = view["phase"]
        return view["name"]

    def watch(self, names: list[str], until: list[str], moved: str | None = None) -> None:
        """Say what changes for ``names`` until every job in ``until`` is done (or, with
        ``moved``, until that job has made its first move)."""
        assert self.client is not None
        while True:
            rows = {r["job"]["name"]: r for r in self.client.call("GET", "/queue")}
            for name in names:
                self.news(name, rows[name])
            if moved is not None and self.said_moves.get(moved, 0):
                return
            if all(JobPhase(rows[n]["job"]["phase"]).done for n in until):
                return
            if time.monotonic() - self.last_progress >= PROGRESS_EVERY_S:
                self.progress([rows[n] for n in names])
            time.sleep(POLL_S)

    def news(self, name: str, row: dict[str, Any]) -> None:
        assert self.client is not None
        job = row["job"]
        if job["phase"] != self.said_phase.get(name):
            self.said_phase[name] = job["phase"]
            launched = (f", launched from {job['launch_source']}: {job['launch_note']}"
                        if job["phase"] == "running" and job["launch_source"] else "")  # fmt: skip
            self.say(f"{name}: {job['phase']}{launched}")
        if job["phase"] == "waiting":
            return
        shapes = self.client.call("GET", f"/jobs/{name}")["shapes"]
        moves = [s for s in shapes if s["applied"] and s["action"] != "launch"]
        for move in moves[self.said_moves.get(name, 0):]:
            self.say(f"{name}: {move['action']} at {move['time_s']:.0f} s: {move['reason']}")
        self.said_moves[name] = len(moves)

    def progress(self, rows: list[dict[str, Any]]) -> None:
        self.last_progress = time.monotonic()
        parts = []
        for row in rows:
            job, latest = row["job"], row["latest"]
            if job["phase"] == "running" and latest:
                done = ""
                if job["samples_total"]:
                    share = latest["steps_done"] * job["batch_size"] / job["samples_total"]
                    done = f"{min(share, 1):.0%}, "
                parts.append(f"{job['name']} {done}{latest['samples_per_s']:.0f} samples/s "
                             f"on {latest['shape']}")  # fmt: skip
            else:
                parts.append(f"{job['name']} {job['phase']}")
        self.say("; ".join(parts))

    def summary(self, names: list[str]) -> None:
        from rightsize.cli.output import format_table

        assert self.client is not None
        rows = []
        for name in names:
            job = self.client.call("GET", f"/jobs/{name}")["job"]
            once = (job["accounting"] or {}).get("exactly_once")
            rows.append((name, job["phase"], job["policy"], job["launch_source"] or "-",
                         _time(job["predicted_time_s"]), _time(job["measured_time_s"]),
                         _time(job["time_to_95_s"]),
                         {True: "yes", False: "NO", None: "-"}[once]))  # fmt: skip
        print()
        print(format_table(("job", "phase", "policy", "launched from", "predicted",
                            "measured", "to 95% of best", "exactly once"), rows))  # fmt: skip
        print("\npredicted: the launch shape held to the end (from the model's profile, or from "
              "the speed a past run measured there); measured: the job's run from its launch "
              "to its last step.")  # fmt: skip


def _time(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def free_port(preferred: int) -> int:
    """``preferred`` if nothing listens there, else one the kernel picks."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rightsize.service.demo",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--dir", type=Path, default=Path("demo-output"),
                        help="where the demo's store, jobs and logs go (its service/ folder "
                             "is made afresh)")  # fmt: skip
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    home = args.dir.resolve() / "service"
    if home.exists():
        import shutil

        shutil.rmtree(home)
    home.mkdir(parents=True)
    demo = Demo(home, free_port(args.port))
    try:
        demo.start()
        first = demo.submit(MISSIZED, "mis-sized: a tenth of its budget on each node, nearchus+")
        demo.watch([first], until=[first], moved=first)
        second = demo.submit(QUEUED, "it needs 1 cpu: waits for the CPU the first one grew into")
        demo.watch([first, second], until=[first])
        third = demo.submit(AGAIN, "the first job again, initial_shape: auto")
        demo.watch([first, second, third], until=[second, third])
        demo.summary([first, second, third])
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    finally:
        demo.stop()
    token = (home / "token").read_text().strip()
    print(f"\nTo look at these jobs in the web pages again:\n"
          f"  .venv/bin/rightsize serve --background --database {home / 'store.db'} "
          f"--workdir {home / 'work'}\n"
          f"  open http://127.0.0.1:8765/ui/ and sign in with {token}")  # fmt: skip
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
