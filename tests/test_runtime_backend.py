"""Cgroups (parsed from fake /proc and cgroupfs trees, and real ones), the local backend,
checkpoint files, the state file, and the transport."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import zmq

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.core.spec import Isolation, parse_job_spec
from rightsize.runtime.backends.cgroups import (
    CgroupUnavailable,
    Hierarchy,
    NodeCgroup,
    QuotaSharing,
    detect,
    held_by_masters,
    sweep_stale,
)
from rightsize.runtime.backends.local import LocalBackend, threads_for
from rightsize.runtime.checkpoint import (
    CheckpointDir,
    check_reachable,
    check_writable,
    load,
    save_atomic,
)
from rightsize.runtime.clock import FakeClock
from rightsize.runtime.state import CheckpointRow, LaunchRow, StateStore
from rightsize.runtime.transport import Client, Counters, Pacer, Server, decode, encode

GI = 2**30
BUSY = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"


def fake_proc(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "cgroup").write_text(cgroup)
    return proc


def test_detects_cgroup_v1_under_the_masters_own_cgroup(tmp_path):
    root = tmp_path / "fs"
    mountinfo = "".join(
        f"3{i} 31 0:2{i} / {root / c} rw,relatime - cgroup cgroup rw,{c}\n"
        for i, c in enumerate(["cpu", "cpuacct", "memory"])
    )
    proc = fake_proc(tmp_path, mountinfo, "4:memory:/box/7\n2:cpuacct:/\n1:cpu:/\n")
    hierarchy = detect(proc)
    assert hierarchy.version == 1
    assert hierarchy.bases == {"cpu": root / "cpu", "cpuacct": root / "cpuacct",
                               "memory": root / "memory/box/7"}  # fmt: skip


def test_detects_cgroup_v2_only_with_cpu_and_memory(tmp_path):
    unified = tmp_path / "unified"
    (unified / "me").mkdir(parents=True)
    (unified / "me" / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    proc = fake_proc(tmp_path, f"41 31 0:38 / {unified} rw - cgroup2 cgroup2 rw\n", "0::/me\n")
    assert detect(proc) == Hierarchy(2, {"unified": unified / "me"})
    (unified / "me" / "cgroup.controllers").write_text("pids\n")
    with pytest.raises(CgroupUnavailable):
        detect(proc)


def test_v1_and_v2_limits_and_usage_files(tmp_path):
    v1 = NodeCgroup(
        Hierarchy(1, {c: tmp_path / c for c in ("cpu", "cpuacct", "memory")}), Path("n")
    )
    v1.create()
    v1.set_cpu(1.5)
    v1.set_memory(GI)
    assert (tmp_path / "cpu/n/cpu.cfs_quota_us").read_text() == "150000"
    assert (tmp_path / "memory/n/memory.limit_in_bytes").read_text() == str(GI)
    (tmp_path / "cpuacct/n/cpuacct.usage").write_text("2500000000\n")
    (tmp_path / "memory/n/memory.usage_in_bytes").write_text("1000\n")
    (tmp_path / "memory/n/memory.stat").write_text("cache 5\ntotal_inactive_file 300\n")
    (tmp_path / "memory/n/memory.oom_control").write_text("oom_kill_disable 0\noom_kill 2\n")
    assert (v1.cpu_seconds(), v1.memory_bytes(), v1.oom_kills()) == (2.5, 700, 2)
    v1.set_cpu(0.001)  # below the kernel's minimum quota
    assert (tmp_path / "cpu/n/cpu.cfs_quota_us").read_text() == "1000"

    v2 = NodeCgroup(Hierarchy(2, {"unified": tmp_path / "u"}), Path("n"))
    v2.create()
    v2.set_cpu(0.5)
    assert (tmp_path / "u/n/cpu.max").read_text() == "50000 100000"
    (tmp_path / "u/n/cpu.stat").write_text("usage_usec 1500000\nuser_usec 1\n")
    (tmp_path / "u/n/memory.current").write_text("4096\n")
    (tmp_path / "u/n/memory.events").write_text("oom 1\noom_kill 1\n")
    assert (v2.cpu_seconds(), v2.memory_bytes(), v2.oom_kills()) == (1.5, 4096, 1)


def test_threads_follow_the_cpu_allocation():
    assert [threads_for(c, 8) for c in (0.2, 0.5, 1.4, 1.5, 3.0, 20.0)] == [1, 1, 1, 1, 3, 8]


def _cpu_rate(backend: LocalBackend, name: str, window_s: float = 1.5) -> float:
    before, t0 = backend.reading(name)[0], time.monotonic()
    time.sleep(window_s)
    return (backend.reading(name)[0] - before) / (time.monotonic() - t0)


@pytest.mark.integration
def test_local_backend_limits_and_resizes_a_process_in_place(tmp_path):
    backend = LocalBackend(Isolation.AUTO, tmp_path / "logs", warn=print)
    try:
        node = NodeSpec("w", NodeRole.WORKER, Resources(0.2, GI))
        pid = backend.launch(node, [sys.executable, "-c", BUSY], {})
        time.sleep(0.5)
        if backend.mode.startswith("cgroup"):
            assert f"rightsize/{os.getpid()}-" in Path(f"/proc/{pid}/cgroup").read_text()
            assert _cpu_rate(backend, "w") < 0.2 * 1.15  # the quota holds
        backend.resize("w", Resources(1.0, GI))
        assert backend.pid("w") == pid  # resized, not restarted
        # a loaded machine may lend less than a core: look at a few windows
        assert max(_cpu_rate(backend, "w") for _ in range(3)) > 0.3
    finally:
        backend.close()
    assert backend.exits() == [] and not backend.procs
    if backend.cgroups is not None:
        assert not any(d.exists() for d in backend.cgroups.job.dirs.values())


@pytest.mark.integration
def test_a_burst_quota_keeps_its_average_and_lets_a_period_s_worth_through(tmp_path):
    backend = LocalBackend(Isolation.AUTO, tmp_path / "logs", warn=print,
                           sharing=QuotaSharing(burst=True))
    try:
        if backend.cgroups is None:
            pytest.skip("no cgroups here")
        node = NodeSpec("w", NodeRole.WORKER, Resources(0.3, GI))
        backend.launch(node, [sys.executable, "-c", BUSY], {})
        cpu_dir = backend.procs["w"].cgroup._dir("cpu")
        burst = cpu_dir / ("cpu.max.burst" if backend.cgroups.hierarchy.version == 2
                           else "cpu.cfs_burst_us")  # fmt: skip
        if not burst.exists():
            pytest.skip("this kernel has no CFS burst")
        assert int(burst.read_text()) == 30_000  # one period's quota
        time.sleep(0.5)
        assert _cpu_rate(backend, "w", window_s=3.0) < 0.3 * 1.15  # the average holds
        backend.resize("w", Resources(0.5, GI))
        assert int(burst.read_text()) == 50_000
        backend.resize("w", Resources(0.2, GI))  # below the old burst: the kernel allows it
        assert int(burst.read_text()) == 20_000
    finally:
        backend.close()


@pytest.mark.integration
def test_a_pooled_job_lends_a_waiting_rank_s_share_and_holds_its_sum(tmp_path):
    """Two ranks of 0.5 core each: alone, the busy one runs past its own share on what the
    idle one leaves; both busy, the job stays within 1 core; the kernel's books (what the
    service reads) count the job's 1 core, not each rank's raised quota."""
    backend = LocalBackend(Isolation.AUTO, tmp_path / "logs", warn=print,
                           sharing=QuotaSharing(pool=True))  # fmt: skip
    try:
        if backend.cgroups is None or len(backend.cpus) < 2:
            pytest.skip("needs cgroups and two CPUs")
        rank = Resources(0.5, GI)
        backend.launch(NodeSpec("r0", NodeRole.WORKER, rank), [sys.executable, "-c", BUSY], {})
        backend.launch(NodeSpec("r1", NodeRole.WORKER, rank),
                       [sys.executable, "-c", "import time; time.sleep(60)"], {})  # fmt: skip
        time.sleep(0.5)
        # a loaded machine may lend less than its quota: the best of a few windows
        assert max(_cpu_rate(backend, "r0") for _ in range(3)) > 0.5 * 1.3
        held = held_by_masters(backend.cgroups.hierarchy)[os.getpid()]
        assert held == (pytest.approx(1.0), 2 * GI)
        backend.stop("r1")
        backend.launch(NodeSpec("r1", NodeRole.WORKER, rank), [sys.executable, "-c", BUSY], {})
        time.sleep(0.5)
        both = _cpu_rate(backend, "r0", 3.0) + _cpu_rate(backend, "r1", 3.0)
        assert both < 1.0 * 1.2  # the job's sum holds (each rate read over its own window)
        backend.resize("r0", Resources(0.25, GI))  # shrinking: ranks first, then the job
        assert held_by_masters(backend.cgroups.hierarchy)[os.getpid()][0] == pytest.approx(0.75)
        backend.resize("r0", Resources(1.5, GI))  # growing: the job first
        assert held_by_masters(backend.cgroups.hierarchy)[os.getpid()][0] == pytest.approx(2.0)
        threads = backend.resize("r1", Resources(0.5, GI))
        assert threads == 1  # threads follow the rank's own share
    finally:
        backend.close()


@pytest.mark.integration
def test_affinity_fallback_pins_and_measures(tmp_path):
    backend = LocalBackend(Isolation.AFFINITY, tmp_path / "logs", warn=print)
    try:
        assert backend.mode == "affinity" and backend.cgroups is None
        pid = backend.launch(NodeSpec("w", NodeRole.WORKER, Resources(1, GI)),
                             [sys.executable, "-c", BUSY], {})  # fmt: skip
        time.sleep(0.3)
        assert len(os.sched_getaffinity(pid)) == 1
        backend.resize("w", Resources(len(backend.cpus), GI))
        assert os.sched_getaffinity(pid) == set(backend.cpus)
        cpu_s, memory = backend.reading("w")
        assert cpu_s > 0 and memory > 1_000_000
    finally:
        backend.close()


@pytest.mark.integration
def test_stale_job_cgroups_of_a_dead_master_are_swept():
    try:
        hierarchy = detect()
        base = next(iter(hierarchy.bases.values()))
        probe = subprocess.Popen([sys.executable, "-c", "pass"])
        probe.wait()  # a pid that no longer runs
        node_dir = base / "rightsize" / f"{probe.pid}-stale" / "worker-0"
        node_dir.mkdir(parents=True)
    except (CgroupUnavailable, OSError):
        pytest.skip("no writable cgroup hierarchy here")
    sweep_stale(Hierarchy(hierarchy.version, {"x": base}))
    assert not node_dir.parent.exists()


def test_checkpoint_files_are_written_atomically(tmp_path):
    path = tmp_path / "v000001" / "ps-0.pt"
    save_atomic({"w": torch.ones(2)}, path)
    assert torch.equal(load(path)["w"], torch.ones(2))
    assert [p.name for p in path.parent.iterdir()] == ["ps-0.pt"]  # no temporary left
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SpecError, match=r"checkpoint.dir: cannot write to .*file/sub"):
        check_writable(blocker / "sub")


def test_checkpoints_at_an_fsspec_url_are_written_read_and_pruned(tmp_path):
    # what a cluster's hosts share: here a file:// URL (s3:// or gs:// go the same way)
    root = CheckpointDir(f"file://{tmp_path}/shared/job")
    for version in (1, 2, 3):
        save_atomic({"w": torch.full((2,), float(version))}, root.ps_file(version, "ps-0"))
    assert root.ps_file(2, "ps-0") == f"file://{tmp_path}/shared/job/v000002/ps-0.pt"
    assert torch.equal(load(root.ps_file(2, "ps-0"))["w"], torch.full((2,), 2.0))
    assert [p.name for p in (tmp_path / "shared/job/v000002").iterdir()] == ["ps-0.pt"]
    root.prune(keep={3})
    assert sorted(p.name for p in (tmp_path / "shared/job").iterdir()) == ["v000003"]
    check_reachable(f"file://{tmp_path}/elsewhere")  # created and probed
    assert (tmp_path / "elsewhere").is_dir() and not list((tmp_path / "elsewhere").iterdir())
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecError, match="checkpoint.url: cannot write to file://"):
        check_reachable(f"file://{tmp_path}/file/sub")


@pytest.mark.parametrize(("url", "message"), [
    ("/mnt/ckpt", "is not a URL"), ("nosuchfs://bucket/ckpt", "no filesystem for nosuchfs://")])  # fmt: skip
def test_a_checkpoint_url_is_checked_when_the_job_file_is_read(tmp_path, url, message):
    data = {"workload": "mlp3", "budget": {"cpu": 1, "memory": "1Gi"}, "steps": 1,
            "checkpoint": {"dir": str(tmp_path), "url": url}}  # fmt: skip
    with pytest.raises(SpecError, match=f"checkpoint.url.*{message}"):
        parse_job_spec(data)


def test_state_store_round_trip(tmp_path):
    store = StateStore(tmp_path / "job.sqlite")
    shape = ClusterShape.from_counts(1, 1, Resources(1, GI), Resources(1, GI))
    seq = store.start_job("j", {"a": 1}, "abc", 100.0, LaunchRow(shape, "launch", "why", {"note": "n"}))
    # the launch shape is there before any node starts: a master killed now can be resumed
    assert store.current_shape() == shape and store.timeline()[0]["transition_s"] is None
    store.set_transition(seq, 1.5, {"x": 1}, "why (done)")
    assert not store.repeats_last("add_ps", "no", ClusterShape())  # the last row was applied
    store.record_shape(5.0, "add_ps", "no", ClusterShape(), False)
    assert store.repeats_last("add_ps", "no", ClusterShape())  # the same declined plan again
    assert not store.repeats_last("add_ps", "no, again", ClusterShape())
    assert not store.repeats_last("add_ps", "no", shape)
    assert store.current_shape() == shape and store.timeline()[0]["notes"] == {"note": "n"}
    assert store.timeline()[0]["transition_s"] == 1.5 and store.timeline()[0]["reason"] == "why (done)"
    for v in (1, 2, 3):
        store.commit_checkpoint(CheckpointRow(v, v, {"epoch": v}, {"ps-0": "f"}, {}, 10 * v))
    store.forget_checkpoints({2, 3})
    assert store.checkpoint_versions() == [2, 3] and store.latest_checkpoint().shards == {
        "epoch": 3
    }
    store.update_job(status="finished")
    assert store.job()["status"] == "finished" and store.job()["spec"] == {"a": 1}
    store.close()


def test_a_file_that_is_not_a_state_file_is_one_clear_error(tmp_path):
    path = tmp_path / "job.sqlite"
    path.write_bytes(b"\x00garbage, not SQLite" * 100)
    with pytest.raises(SpecError, match="is not a rightsize state file"):
        StateStore(path)
    assert path.read_bytes().startswith(b"\x00garbage")  # left as it was


def test_encode_packs_small_tensors_and_decodes_all():
    tensors = [torch.arange(5), torch.zeros(0, 8), torch.randn(300, 100), torch.tensor(2.5)]
    frames = encode({"op": "x"}, tensors)
    assert len(frames) == 3  # header, the packed small ones, the 120 kB one
    header, back = decode(frames)
    assert header == {"op": "x"}
    assert all(torch.equal(a, b) for a, b in zip(tensors, back, strict=True))


def test_client_server_round_trip_counts_bytes():
    context = zmq.Context()
    server_counts, client_counts = Counters(), Counters()
    server = Server(context, server_counts)
    client = Client(context, server.address, client_counts)
    try:
        client.send({"op": "ping"}, [torch.ones(1000)])
        identity, header, tensors = server.receive()
        server.reply(identity, {"rid": header["rid"], "ok": True}, [tensors[0] * 2])
        assert client.ready(10)
        reply, out = client.receive()
        assert reply["ok"] and out[0].sum().item() == 2000
        assert client_counts.bytes_out == server_counts.bytes_in > 4000
        assert client_counts.bytes_in == server_counts.bytes_out > 4000
    finally:
        client.close()
        server.close()
        context.term()


def test_pacer_emulates_a_link():
    clock = FakeClock()
    pacer = Pacer(100.0, clock=clock.now, sleep=clock.sleep)
    for _ in range(3):
        pacer.wait(50)  # 50 bytes at 100 B/s: half a second each
    assert clock.now() == 1.5
    Pacer(None).wait(10**9)  # no cap: no wait
