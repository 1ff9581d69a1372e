"""``rightsize serve``: the service — API, store and scheduler — and its tokens."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

from rightsize.cli.args import bounded
from rightsize.cli.store_args import add_store_arguments, open_store
from rightsize.core.errors import SpecError
from rightsize.core.limits import Bound
from rightsize.core.resources import Resources
from rightsize.core.units import parse_cpu, parse_memory

DEFAULT_PORT = 8765
#: Seconds `serve --background` waits for the service to answer (imports, migrations).
BACKGROUND_START_S = 60.0
#: --cpu-overcommit: at least the machine (1), at most 8 times it (each job's quota is still
#: checked against the machine; past a few times, jobs only wait on each other's cores).
OVERCOMMIT = Bound(1, 8)


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the service: a REST API (OpenAPI at /openapi.json) over a store of every run "
        "and a scheduler that runs many real jobs on this machine's capacity (NEARCHUS's "
        "waiting, running and finished queues; FCFS or SJF), each under its policy, growing "
        "only into what is free. Every call needs a token: rightsize serve token create NAME."
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    add_store_arguments(parser)
    parser.add_argument(
        "--cpu", help="CPU cores all jobs may hold together (default: this machine's)"
    )
    parser.add_argument(
        "--memory", help="memory all jobs may hold together, e.g. 8Gi (default: this machine's)"
    )
    parser.add_argument(
        "--cpu-overcommit", type=bounded(OVERCOMMIT), default=1.0, metavar="F",
        help="let the jobs' CPU quotas sum to F times this machine's cores (default 1: never "
        "past it). A quota is a cap, so jobs that use less than they hold leave the rest to "
        "the others; measured in docs/benchmarks.md ('Jobs together')"
    )  # fmt: skip
    parser.add_argument(
        "--launch-share", choices=("fair", "free"), default="fair",
        help="while other jobs run or wait, a job its policy launches starts within an even "
        "split of the capacity (fair, the default; at least 1 cpu) or with its whole budget "
        "if that much is free (free: NEARCHUS's allocator); see docs/service.md"
    )  # fmt: skip
    parser.add_argument(
        "--order",
        choices=("fcfs", "sjf"),
        default="fcfs",
        help="queue order: first come or shortest job (fewest samples) first",
    )
    parser.add_argument(
        "--background", action="store_true",
        help="start the service in the background, return once it answers, and print its "
        "URL, process id and log file",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="where jobs' checkpoints and logs go "
        "(default: beside the SQLite store, else ./rightsize-service)",
    )
    parser.set_defaults(run=serve)
    sub = parser.add_subparsers(dest="serve_command", metavar="token")
    token = sub.add_parser("token", help="manage API tokens")
    token_sub = token.add_subparsers(dest="token_command", metavar="create")
    token_sub.required = True
    create = token_sub.add_parser("create", help="make a token for NAME and print it (once)")
    create.add_argument("name")
    create.add_argument("--database", dest="token_database", help="store URL or SQLite file")
    create.set_defaults(run=create_token)


def create_token(args: argparse.Namespace) -> int:
    from rightsize.service.store import Store

    store = Store(args.token_database or args.database)
    try:
        print(store.create_token(args.name))
    finally:
        store.close()
    print(
        "keep it: only its hash is stored; pass it as --token or $RIGHTSIZE_TOKEN", file=sys.stderr
    )
    return 0


def capacity(cpu: str | None, memory: str | None, cpu_overcommit: float = 1.0) -> Resources:
    """The service's capacity: the options, each capped by this machine (its cores times
    ``cpu_overcommit``; memory is never overcommitted: a job past it is OOM-killed)."""
    from rightsize.runtime.backends.local import machine_resources

    machine = machine_resources()
    books = machine.cpu_cores * cpu_overcommit
    cores = parse_cpu(cpu, "--cpu") if cpu else books
    memory_bytes = parse_memory(memory, "--memory") if memory else machine.memory_bytes
    return Resources(min(cores, books), min(memory_bytes, machine.memory_bytes))


def _check_port_free(host: str, port: int) -> None:
    """Before anything starts: a port another process listens on is one line, not a traceback
    from the server after the store was opened."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SpecError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}); "
                            "is a service already running? Choose another --port") from None


def serve(args: argparse.Namespace) -> int:
    _check_port_free(args.host, args.port)
    if args.background:
        return _in_background(args)
    import uvicorn

    from rightsize.service.allocator import Allocator, LaunchShare
    from rightsize.service.app import create_app
    from rightsize.service.profiles import ProfileBook
    from rightsize.service.simulations import Simulations

    limit = capacity(args.cpu, args.memory, args.cpu_overcommit)
    store = open_store(args)
    workdir = args.workdir or _default_workdir(store)
    share = LaunchShare(args.launch_share)
    allocator = Allocator(store, limit, workdir, args.order, launch_share=share)
    profiles = ProfileBook(workdir / "profiles")
    simulations = Simulations(store, workdir / "simulations")
    app = create_app(store, allocator, profiles, simulations)
    allocator.start()
    url = store.shown_url
    print(f"rightsize serve: http://{args.host}:{args.port} (API docs at /docs), store {url}, "
          f"capacity {limit}, {args.order}, launch share {args.launch_share}", file=sys.stderr,
          flush=True)  # fmt: skip
    try:
        uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port,
                                      log_level="warning")).run()  # fmt: skip
    except KeyboardInterrupt:
        # uvicorn stops on SIGINT/SIGTERM, then raises the signal again: for a service that
        # is how it is told to stop, not an error (its jobs resume on the next start)
        print("rightsize serve: stopped; running jobs resume when it starts again",
              file=sys.stderr)  # fmt: skip
    finally:
        simulations.stop()
        profiles.stop()
        allocator.stop()
        store.close()
    return 0


def _in_background(args: argparse.Namespace) -> int:
    """The same service in a process of its own (its own session: it outlives this shell's
    job control), answered once it serves; its output goes to ``WORKDIR/serve.log``."""
    import subprocess
    import time
    import urllib.request

    store = open_store(args)  # a bad store fails here, in one line
    workdir = args.workdir or _default_workdir(store)
    store.close()
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "rightsize", "serve", "--host", args.host, "--port",
            str(args.port), "--order", args.order, "--workdir", str(workdir),
            "--cpu-overcommit", str(args.cpu_overcommit), "--launch-share", args.launch_share]  # fmt: skip
    for flag, value in (("--database", args.database), ("--cpu", args.cpu),
                        ("--memory", args.memory), ("--instance-type", args.instance_type)):  # fmt: skip
        if value:
            argv += [flag, str(value)]
    log = workdir / "serve.log"
    with open(log, "ab") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    url = f"http://{host}:{args.port}"
    deadline = time.monotonic() + BACKGROUND_START_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise SpecError(f"the service stopped at once (status {child.returncode}): "
                            f"{tail[0]} (log {log})")  # fmt: skip
        try:
            with urllib.request.urlopen(f"{url}/openapi.json", timeout=2):
                break
        except OSError:
            time.sleep(0.3)
    else:
        child.terminate()
        raise SpecError(f"the service did not answer within {BACKGROUND_START_S:.0f} s (log {log})")
    print(f"rightsize serve: {url} (web pages at {url}/ui/), process {child.pid}, log {log}; "
          f"stop it with: kill {child.pid}")  # fmt: skip
    return 0


def _default_workdir(store) -> Path:
    database = store.engine.url.database
    if store.engine.dialect.name == "sqlite" and database:
        return Path(database).parent / "service"
    return Path("rightsize-service")
