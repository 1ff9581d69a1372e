"""``rightsize serve``: the service — API, store and scheduler — and its tokens."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rightsize.cli.store_args import add_store_arguments, open_store
from rightsize.core.resources import Resources
from rightsize.core.units import parse_cpu, parse_memory

DEFAULT_PORT = 8765


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
        "--order",
        choices=("fcfs", "sjf"),
        default="fcfs",
        help="queue order: first come or shortest job (fewest samples) first",
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


def capacity(cpu: str | None, memory: str | None) -> Resources:
    """The service's capacity: the options, each capped by this machine."""
    from rightsize.runtime.backends.local import machine_resources

    machine = machine_resources()
    cores = parse_cpu(cpu, "--cpu") if cpu else machine.cpu_cores
    memory_bytes = parse_memory(memory, "--memory") if memory else machine.memory_bytes
    return Resources(min(cores, machine.cpu_cores), min(memory_bytes, machine.memory_bytes))


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from rightsize.service.allocator import Allocator
    from rightsize.service.app import create_app
    from rightsize.service.profiles import ProfileBook
    from rightsize.service.simulations import Simulations

    limit = capacity(args.cpu, args.memory)
    store = open_store(args)
    workdir = args.workdir or _default_workdir(store)
    allocator = Allocator(store, limit, workdir, args.order)
    profiles = ProfileBook(workdir / "profiles")
    simulations = Simulations(store, workdir / "simulations")
    app = create_app(store, allocator, profiles, simulations)
    allocator.start()
    url = store.engine.url.render_as_string(hide_password=True)
    print(f"rightsize serve: http://{args.host}:{args.port} (API docs at /docs), store {url}, "
          f"capacity {limit}, {args.order}", file=sys.stderr, flush=True)  # fmt: skip
    try:
        uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port,
                                      log_level="warning")).run()  # fmt: skip
    finally:
        simulations.stop()
        profiles.stop()
        allocator.stop()
        store.close()
    return 0


def _default_workdir(store) -> Path:
    database = store.engine.url.database
    if store.engine.dialect.name == "sqlite" and database:
        return Path(database).parent / "service"
    return Path("rightsize-service")
