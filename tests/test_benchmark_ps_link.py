"""The shaped-link PS benchmark (benchmarks/ps/ps_link.py): its link, and its fits on curves
made by hand."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo root: `benchmarks.`

from benchmarks.ps import ps_link  # noqa: E402

MOVED = ps_link.moved_per_step()  # MLP-3: 3.7 MB of gradients in, 3.7 MB of parameters out
CORES = 0.3  # each worker's quota
SETTING = ps_link.Setting(ps_cores=0.5, worker_cores=CORES)


def rows(efficiency: float, update_s=0.0046, cpu_s=0.014, rates=("400", "1200", "2400")):
    """Unshaped rows of quota'd workers and a PS with these costs, then each rate's curve by
    the queueing model at ``efficiency`` (a made-up link, so that the fit has a known answer)."""
    worker = ps_link.WorkerSpec(batch=1, compute_s=cpu_s, link_bytes_per_s=float("inf"),
                                cores=CORES, cpu_s_per_step=cpu_s)  # fmt: skip
    spec = ps_link.PSSpec(1, update_s, SETTING.ps_cores, float("inf"))
    cpu = []
    for n in range(1, 5):
        steps = ps_link.ps_throughput_queueing([worker] * n, spec, MOVED // 2).steps_per_s
        cpu.append({"rate": "none", "workers": n, "ps_cpu": SETTING.ps_cores, "steps_per_s": steps,
                    "ps_cpu_used": steps * update_s, "ps_bytes_per_s": steps * MOVED,
                    "bytes_per_step": MOVED, "kernel_bytes_per_step": MOVED,
                    "worker_cpu_s_per_step": cpu_s})  # fmt: skip
    f = ps_link.costs(cpu, CORES)["queueing"]
    shaped = [
        {**cpu[n - 1], "rate": rate, "link_bytes_per_step": MOVED * 1.05,
         "steps_per_s": ps_link.predict(f, rate, n, MOVED, efficiency, "queueing", SETTING)}
        for rate in rates for n in range(1, 5)
    ]  # fmt: skip
    return cpu + shaped


def test_the_link_efficiency_comes_back_held_out():
    made = rows(0.9)
    f = ps_link.costs([r for r in made if r["rate"] == "none"], CORES)["queueing"]
    fitted = ps_link.fit_efficiency(made, ["400", "1200"], SETTING, f, MOVED)
    assert fitted == pytest.approx(0.9, abs=0.005)
    out = ps_link.held_out(made, SETTING)
    assert out["moved_bytes_per_step"] == MOVED
    assert out["fits"]["queueing"]["worker_cpu_s"] == pytest.approx(0.014)
    assert set(out["rates"]) == {"400", "1200", "2400"}
    for entry in out["rates"].values():
        assert entry["fitted_efficiency"] == pytest.approx(0.9, abs=0.005)
        assert entry["queueing"]["mape"] < 0.01
        # at line rate the model is faster than the link allows once the link binds
        assert entry["queueing@line-rate"]["mape"] > entry["queueing"]["mape"]
    # 400 Mbit/s carries 50 MB/s: at most 0.9 x 50 / 7.4 = 6.1 steps/s, reached early
    slow = out["rates"]["400"]
    assert max(slow["measured"].values()) <= 0.9 * 50e6 / MOVED + 1e-9
    assert slow["measured_saturation_at"] is not None
    assert slow["goodput_fraction"] <= 0.9 + 1e-9
    assert slow["line_utilisation"] == pytest.approx(slow["goodput_fraction"] * 1.05)


def test_repeats_merge_to_one_row_per_rate_and_worker_count():
    made = rows(0.9)
    again = [{**r, "steps_per_s": r["steps_per_s"] * 1.2} for r in made]
    failed = {"rate": "400", "workers": 1, "error": "no steady samples"}
    out = ps_link.merged([*made, *again, failed], ps_cpu=0.5)
    assert len(out) == len(made)
    first = next(r for r in out if r["rate"] == "400" and r["workers"] == 1)
    original = next(r for r in made if r["rate"] == "400" and r["workers"] == 1)
    assert first["repeats"] == 2
    assert first["steps_per_s"] == pytest.approx(original["steps_per_s"] * 1.1)


@pytest.mark.parametrize("rates", ["200,400", "none,200", "none,fast,200"])
def test_bad_rates_are_refused_before_anything_runs(rates, capsys):
    assert ps_link.main(["--rates", rates, "--out", "/nonexistent/x.json"]) == 2
    assert "--rates" in capsys.readouterr().err


def own_network_namespace() -> bool:
    """Whether this process may make a network namespace and shape its loopback (root, not in
    a container that forbids it)."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("tc")):
        return False
    probe = "ip link set lo up && tc qdisc add dev lo root tbf rate 80mbit burst 64kb latency 50ms"
    return subprocess.run(["unshare", "--net", "--", "sh", "-c", probe],
                          capture_output=True).returncode == 0  # fmt: skip


@pytest.mark.skipif(
    not own_network_namespace(),
    reason="needs root, unshare and tc, and leave to make a network namespace",
)
def test_the_shaped_loopback_carries_no_more_than_its_rate_and_counts_what_it_carried():
    script = f"""
import socket, sys, threading, time
sys.path.insert(0, {str(ROOT)!r})
from benchmarks.ps import ps_link
ps_link.shape("80", 1500)
before, charged = ps_link.carried_bytes(), ps_link.charged_bytes()
server = socket.create_server(("127.0.0.1", 0))
got = []
def drain():
    conn, _ = server.accept()
    got.append(sum(iter(lambda: len(conn.recv(1 << 20)), 0)))
reader = threading.Thread(target=drain)
reader.start()
sender = socket.create_connection(server.getsockname())
start = time.monotonic()
sender.sendall(b"x" * (5 << 20))
sender.close()
reader.join()
print(got[0], time.monotonic() - start, ps_link.carried_bytes() - before,
      ps_link.charged_bytes() - charged)
"""
    out = subprocess.run(["unshare", "--net", "--", sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    received, seconds, carried, charged = out.stdout.split()
    payload = 5 << 20
    assert int(received) == payload
    # 80 Mbit/s is 10 MB/s: 5 MiB take at least ~0.5 s (less the 64 KiB burst)
    assert payload / float(seconds) < 10e6 * 1.02
    # the device counts a header per offloaded packet (up to 64 KiB, however the kernel
    # gathered them); the link charges every segment of at most 1500 bytes its headers (~4.5%),
    # and the ACKs
    assert payload < int(carried) < int(charged)
    assert 1.03 * payload < int(charged) < 1.2 * payload


def test_results_of_one_setting_pool_with_their_repeats_numbered_on():
    setting = {"case": "mlp3", "mtu": 1500, "ps_cpu": 0.5, "worker_cpu": 0.3}
    first = {**setting, "all_runs": [{"repeat": 0}, {"repeat": 1}]}
    second = {**setting, "overlap": False, "all_runs": [{"repeat": 0}, {"repeat": 1}]}
    assert [r["repeat"] for r in ps_link.pooled([first, second])] == [0, 1, 2, 3]
    with pytest.raises(SystemExit, match="one setting"):
        ps_link.pooled([first, {**second, "overlap": True}])
