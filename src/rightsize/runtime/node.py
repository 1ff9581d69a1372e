"""One node of a job as its own process: ``python -m rightsize.runtime.node``.

The backend starts this inside the node's cgroup. It dies with the master
(Linux's parent-death signal), registers with the master, receives the job's
configuration, and runs its role: a parameter server (:mod:`ps`), a
parameter-server worker (:mod:`worker`), an allreduce rank (:mod:`allreduce`) or a
rank of the user's own script (:mod:`script_rank`). The roles talk to the master
through :mod:`node_link`: every message carries the node's counters (bytes in/out,
steps, samples, updates, loss), and every reply may carry commands; ``threads``
(torch's intra-op threads, which follow the CPU quota) is handled there for all roles.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import torch

from rightsize.core.processes import die_with_parent
from rightsize.runtime.node_link import MasterLost, NodeContext, build_workload
from rightsize.runtime.protocol import Role

__all__ = ["build_workload", "main"]  # build_workload: for callers that build the job's model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rightsize.runtime.node")
    parser.add_argument("--master", required=True, help="the master's address")
    parser.add_argument("--name", required=True)
    parser.add_argument("--role", required=True, choices=[str(r) for r in Role])
    parser.add_argument("--parent", type=int, required=True, help="the master's pid")
    args = parser.parse_args(argv)
    die_with_parent(args.parent)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # a terminal's Ctrl-C is the master's to handle (it checkpoints and stops its nodes)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctx = NodeContext(args.name, Role(args.role), args.master)
    # a line at each end of the node's life, so its log says how far it got
    print(f"{args.name}: {args.role} pid {os.getpid()}, {torch.get_num_threads()} torch threads, "
          f"master {args.master}", flush=True)
    try:
        code = _run_role(ctx)
    except MasterLost:
        print(f"{args.name}: the master stopped answering; exiting", flush=True)
        return 3
    finally:
        ctx.close()
    print(f"{args.name}: done (exit {code})", flush=True)
    return code


def _run_role(ctx: NodeContext) -> int:
    if ctx.role == Role.PS:
        from rightsize.runtime.ps import run_ps

        return run_ps(ctx)
    if ctx.role == Role.WORKER:
        from rightsize.runtime.worker import run_worker

        return run_worker(ctx)
    if ctx.role == Role.SCRIPT:
        from rightsize.runtime.script_rank import run_script_rank

        return run_script_rank(ctx)
    from rightsize.runtime.allreduce import run_rank

    return run_rank(ctx)


if __name__ == "__main__":
    sys.exit(main())
