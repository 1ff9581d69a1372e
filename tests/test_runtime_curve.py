"""CURVE on a job's sockets: only processes holding the job's keys can join, pull or push.

A real job (local backend, ``runtime.curve: true``) while an intruder on the same
host tries the master's and the parameter server's sockets without keys and with
keys of its own; a client with the job's keys, as the control, is answered. The
exactly-once check reads the servers' update logs: a push that got through would
show its samples twice.
"""

from __future__ import annotations

import threading

import pytest
import zmq

from rightsize.runtime.curve import KEYS_ENV, JobContext, JobKeys
from rightsize.runtime.master import Master
from rightsize.runtime.protocol import Message, Pull, Push, Register, Role, Sender
from rightsize.runtime.transport import Client, Counters
from rightsize.scaling.registry import make_policy
from test_runtime_jobs import assert_exactly_once, job_spec, run_until

PROBE_TIMEOUT_S = 1.5  # a CURVE handshake on loopback takes milliseconds


def test_job_keys_travel_through_the_environment():
    keys = JobKeys.generate()
    assert JobKeys.from_env(keys.to_env()) == keys
    assert JobKeys.from_env({}) is None
    with pytest.raises(ValueError, match=KEYS_ENV):
        JobKeys.from_env({KEYS_ENV: "not:keys"})


def answered(keys: JobKeys | None, address: str, header: dict) -> bool:
    """Whether a client with ``keys`` (None: plain TCP) gets any answer from ``address``."""
    context = JobContext().secure(None)
    context.keys = keys  # a client's keys only: an intruder runs no ZAP handler of the job's
    client = Client(context, address, Counters())
    try:
        client.call(header, timeout_s=PROBE_TIMEOUT_S)
        return True
    except TimeoutError:
        return False
    finally:
        client.close()
        context.destroy(linger=0)


@pytest.mark.integration
def test_a_process_without_the_job_s_keys_cannot_join_pull_or_push(tmp_path):
    spec = job_spec(tmp_path, epochs=1000, runtime={"curve": True})
    master = Master(spec, make_policy("static"))
    assert master.keys is not None
    results: dict[str, bool] = {}

    def intrude() -> None:
        ps = master.job.nodes.get("ps-0")
        master_address, ps_address = master.server.address, ps.address
        generation = master.job.generation
        join = Message(Sender("intruder", 1, None), Register(Role.WORKER)).to_header()
        pull = Pull(generation, ()).to_header()
        push = Push(generation, (0, 0, 0), (), ()).to_header()
        strangers = {"no keys": None, "other keys": JobKeys.generate()}
        for who, keys in strangers.items():
            results[f"{who}: join"] = answered(keys, master_address, join)
            results[f"{who}: pull"] = answered(keys, ps_address, pull)
            results[f"{who}: push"] = answered(keys, ps_address, push)
        results["job's keys: pull"] = answered(master.keys, ps_address, pull)

    prober = None
    sample = master.sample

    def sample_then_probe(*args, **kwargs):
        nonlocal prober
        out = sample(*args, **kwargs)
        ps = master.job.nodes.get("ps-0")
        if prober is None and ps is not None and ps.address and master.job.shards.batches_done:
            prober = threading.Thread(target=intrude, daemon=True)
            prober.start()
        return out

    master.sample = sample_then_probe
    # the job trains until the intruder has tried everything (then ends as if out of data)
    report = run_until(master, lambda: prober is not None and not prober.is_alive())
    assert results["job's keys: pull"], "the control probe was not answered: the test is void"
    refused = {k: v for k, v in results.items() if not k.startswith("job's")}
    assert len(refused) == 6 and not any(refused.values()), refused
    assert_exactly_once(spec, 1797, master.job.shards.epoch, partial=True)
    assert report["accounting"]["exactly_once"]


def test_a_context_without_keys_talks_plain_tcp():
    context = JobContext().secure(None)
    server = context.socket(zmq.ROUTER)
    context.serve(server)  # no keys: nothing set
    assert server.curve_server == 0
    server.close(linger=0)
    context.destroy(linger=0)
