"""Public torchrun scripts under `rightsize torchrun`: overhead, grown from a too-small start, a
SIGKILLed rank survived.

Issue 37 item 6: scripts nobody here wrote, each read from a copy outside the repository
(their code is theirs and is never committed: ``--prepare`` writes the copies from a
clone or mirror of each repository at the pinned commit, changing only the lines that
pin CUDA or NCCL — the same lines docs/runtime.md lists — and generates their data):

- ``ddp-tutorial``: pytorch/examples ``distributed/ddp-tutorial-series/multigpu_torchrun.py``
  (BSD 3-Clause): DDP, a DistributedSampler, a snapshot every few epochs it resumes from;
- ``nanogpt``: karpathy/nanoGPT ``train.py`` (MIT): DDP with gradient accumulation, AdamW
  through a GradScaler, no DataLoader (``np.memmap`` batches), a checkpoint every
  ``eval_interval`` iterations; it resumes from it through its own ``configurator.py``
  (a one-line config file, ``init_from = 'resume' if ... else 'scratch'``), not by an edit.

For each, timed by the script itself (nanoGPT prints each logged iteration's ms) or by
when its own progress lines appear (the DDP tutorial prints each epoch's start, untimed:
seconds per epoch between its second and last epoch lines, read as they are written):

1. **overhead**: plain ``torchrun --standalone`` against ``rightsize torchrun --policy
   static``, 2 ranks of 1 cpu, alternating, ``--repeats`` pairs;
2. **grown**: 1 rank of 0.5 cpu on a 2-cpu budget under ``--policy`` (default goodput),
   against the same start kept static: its moves and both JCTs;
3. **killed**: 2 ranks with ``--max-restarts 3``, rank 1 SIGKILLed once the script has
   saved its first checkpoint: the exit status, the restart, and the script's own
   "resuming" line.

    python benchmarks/torchrun/public_scripts.py --prepare --examples-git DIR --nanogpt-git DIR --dir /tmp/public
    python benchmarks/torchrun/public_scripts.py --dir /tmp/public --out benchmarks/results/public_scripts.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from benchmarks.torchrun.torchrun_common import BIN

EXAMPLES_COMMIT = "77f55b912142e11fcfdf5b530231fb9c52f181e8"
NANOGPT_COMMIT = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"
TUTORIAL = "distributed/ddp-tutorial-series"
#: The lines changed for a CPU (only those pinning CUDA or NCCL): (old, new) in order.
TUTORIAL_CPU = (
    ('    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))\n', ""),
    ('init_process_group(backend="nccl")', 'init_process_group(backend="gloo")'),
    ("self.model = model.to(self.gpu_id)", 'self.model = model.to("cpu")'),
    ("self.model = DDP(self.model, device_ids=[self.gpu_id])", "self.model = DDP(self.model)"),
    ('loc = f"cuda:{self.gpu_id}"', 'loc = "cpu"'),
    ("source = source.to(self.gpu_id)", 'source = source.to("cpu")'),
    ("targets = targets.to(self.gpu_id)", 'targets = targets.to("cpu")'),
)
NANOGPT_CPU = (
    ("    device = f'cuda:{ddp_local_rank}'\n    torch.cuda.set_device(device)\n",
     "    if 'cuda' in device:\n        device = f'cuda:{ddp_local_rank}'\n"
     "        torch.cuda.set_device(device)\n"),
    ("model = DDP(model, device_ids=[ddp_local_rank])",
     "model = DDP(model, device_ids=[ddp_local_rank] if 'cuda' in device else None)"),
)  # fmt: skip
AUTORESUME = "init_from = 'resume' if os.path.exists(os.path.join(out_dir, 'ckpt.pt')) else 'scratch'\n"
NANOGPT_ARGS = ["--dataset=synthetic", "--out_dir=out-synthetic", "autoresume.py", "--device=cpu",
                "--compile=False", "--dtype=float32", "--backend=gloo", "--n_layer=2",
                "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=8",
                "--gradient_accumulation_steps=2", "--warmup_iters=50", "--learning_rate=1e-3",
                "--min_lr=1e-4", "--eval_interval=500", "--eval_iters=20",
                "--log_interval=100"]  # fmt: skip
ITER_LINE = re.compile(r"iter (\d+): loss [0-9.]+, time ([0-9.]+)ms")


def prepare(examples_git: Path, nanogpt_git: Path, out: Path) -> None:
    """Write both copies into ``out`` from the repositories' git directories."""
    def show(git: Path, commit: str, path: str) -> str:
        return subprocess.run(["git", f"--git-dir={git}", "show", f"{commit}:{path}"],
                              check=True, capture_output=True, text=True).stdout  # fmt: skip

    tutorial = out / "ddp-tutorial"
    tutorial.mkdir(parents=True, exist_ok=True)
    text = show(examples_git, EXAMPLES_COMMIT, f"{TUTORIAL}/multigpu_torchrun.py")
    (tutorial / "multigpu_torchrun.py").write_text(edited(text, TUTORIAL_CPU))
    (tutorial / "datautils.py").write_text(show(examples_git, EXAMPLES_COMMIT,
                                                f"{TUTORIAL}/datautils.py"))  # fmt: skip
    nano = out / "nanogpt"
    (nano / "data" / "synthetic").mkdir(parents=True, exist_ok=True)
    for name in ("train.py", "model.py", "configurator.py"):
        text = show(nanogpt_git, NANOGPT_COMMIT, name)
        (nano / name).write_text(edited(text, NANOGPT_CPU) if name == "train.py" else text)
    (nano / "autoresume.py").write_text(AUTORESUME)
    synthetic_tokens(nano / "data" / "synthetic")


def edited(text: str, changes) -> str:
    for old, new in changes:
        if old not in text:
            raise SystemExit(f"the upstream file changed: {old!r} is not in it")
        text = text.replace(old, new, 1)
    return text


def synthetic_tokens(folder: Path) -> None:
    """nanoGPT's data format (uint16 ids, meta.pkl with the vocabulary): a learnable chain
    ``x[t+1] = (5 x[t] + r) mod 65``, so the loss falls and a resume shows."""
    import pickle

    import numpy as np

    rng = np.random.default_rng(0)

    def tokens(n: int) -> np.ndarray:
        steps = rng.integers(0, 4, size=n)
        x = np.empty(n, dtype=np.int64)
        x[0] = 0
        for t in range(1, n):
            x[t] = (5 * x[t - 1] + steps[t]) % 65
        return x.astype(np.uint16)

    tokens(1_000_000).tofile(folder / "train.bin")
    tokens(100_000).tofile(folder / "val.bin")
    chars = [chr(32 + i) for i in range(65)]
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 65, "itos": dict(enumerate(chars)),
                     "stoi": {c: i for i, c in enumerate(chars)}}, f)  # fmt: skip


# -- running them ----------------------------------------------------------------------------
def cases(root: Path, iters: int, epochs: int) -> dict[str, dict]:
    return {
        "ddp-tutorial": {"dir": root / "ddp-tutorial", "script": "multigpu_torchrun.py",
                         "args": [str(epochs), "5", "--batch_size", "4"],
                         "state": ["snapshot.pt"], "saved": "snapshot.pt",
                         "resumed": "Resuming training from snapshot"},
        "nanogpt": {"dir": root / "nanogpt", "script": "train.py",
                    "args": [*NANOGPT_ARGS, f"--max_iters={iters}", f"--lr_decay_iters={iters}"],
                    "state": ["out-synthetic"], "saved": "out-synthetic/ckpt.pt",
                    "resumed": "Resuming training from out-synthetic"},
    }  # fmt: skip


def reset(case: dict) -> None:
    for name in case["state"]:
        path = case["dir"] / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    shutil.rmtree(case["dir"] / "checkpoints", ignore_errors=True)


class LineClock:
    """When each line of a growing file (or a pipe) was first seen: the script's own progress
    lines, timed from outside (the DDP tutorial prints its epochs but not their times)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []
        self._stop = threading.Event()

    def follow_pipe(self, pipe) -> threading.Thread:
        def read() -> None:
            for line in pipe:
                self.seen.append((time.monotonic(), line))

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return thread

    def follow_file(self, path: Path) -> threading.Thread:
        def poll() -> None:
            offset = 0
            while not self._stop.is_set():
                if path.exists():
                    with open(path, errors="replace") as f:
                        f.seek(offset)
                        chunk = f.read()
                        offset = f.tell()
                    now = time.monotonic()
                    self.seen += [(now, line) for line in chunk.splitlines()]
                time.sleep(0.02)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def epoch_s(self) -> float | None:
        """Seconds per epoch between the second and the last epoch line of rank 0 (the DDP
        tutorial's ``[GPU0] Epoch N | ...``)."""
        marks = [(t, int(m.group(1))) for t, line in self.seen
                 if (m := TUTORIAL_EPOCH.search(line))]  # fmt: skip
        if len(marks) < 3:
            return None
        (t1, e1), (t2, e2) = marks[1], marks[-1]
        return (t2 - t1) / (e2 - e1)


TUTORIAL_EPOCH = re.compile(r"\[GPU0\] Epoch (\d+) \|")


def plain(case: dict, prefix: tuple[str, ...] = ()) -> dict:
    """Plain torchrun on ``case`` (behind ``prefix``: a command that runs it, say inside a
    cgroup)."""
    reset(case)
    argv = [*prefix, str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2",
            case["script"], *case["args"]]  # fmt: skip
    t0 = time.monotonic()
    # unbuffered, as rightsize's ranks are: each line is timed when it is printed
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(argv, cwd=case["dir"], stdout=subprocess.PIPE, env=env,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    clock = LineClock()
    reader = clock.follow_pipe(run.stdout)
    err = run.stderr.read()
    run.wait(timeout=1800)
    reader.join(timeout=5)
    text = "".join(line for _, line in clock.seen)
    return {"wall_s": time.monotonic() - t0, "code": run.returncode,
            "iter_ms": iteration_ms(text), "epoch_s": clock.epoch_s(),
            "aborted_at_exit": "terminate called without an active exception" in err}  # fmt: skip


def ours(case: dict, options: list[str], kill_after_save: bool = False) -> dict:
    reset(case)
    argv = [str(BIN / "rightsize"), "torchrun", "--quiet", "--fresh", "--database",
            str(case["dir"] / "store.db"), *options, case["script"], *case["args"]]  # fmt: skip
    t0 = time.monotonic()
    name = Path(case["script"]).stem
    log = case["dir"] / "checkpoints" / name / "logs" / "worker-0.log"
    clock = LineClock()
    clock.follow_file(log)
    run = subprocess.Popen(argv, cwd=case["dir"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    killed = None
    if kill_after_save:
        killed = kill_rank_after(case, run)
    out, err = run.communicate(timeout=1800)
    time.sleep(0.1)
    clock.stop()
    report_path = case["dir"] / "checkpoints" / f"{name}-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    text = log.read_text(errors="replace") if log.exists() else ""
    return {"wall_s": time.monotonic() - t0, "code": run.returncode, "stderr": err[-500:],
            "report": report, "rank0_log": text, "killed_at_s": killed,
            "iter_ms": iteration_ms(text), "epoch_s": clock.epoch_s()}  # fmt: skip


def kill_rank_after(case: dict, run: subprocess.Popen) -> float | None:
    from rightsize.runtime.chaos import node_processes

    t0 = time.monotonic()
    while not (case["dir"] / case["saved"]).exists():
        if run.poll() is not None or time.monotonic() - t0 > 600:
            return None
        time.sleep(0.2)
    time.sleep(1.0)
    pid = node_processes(run.pid).get("worker-1")
    if pid is None:
        return None
    os.kill(pid, signal.SIGKILL)
    return time.monotonic() - t0


def iteration_ms(text: str) -> list[float]:
    return [float(m.group(2)) for m in ITER_LINE.finditer(text) if int(m.group(1)) > 0]


def overhead(case: dict, repeats: int, cpu_per_proc: float = 1.0, pool: bool = True) -> dict:
    """Pairs of plain torchrun and rightsize torchrun at ``cpu_per_proc`` a rank (past the
    machine's share, a rank may burst as plain torchrun's do; below 2, one torch thread),
    the ranks sharing their quotas' sum (``pool``) or each held to its own."""
    pairs = []
    extra = ["--budget-cpu", str(2 * cpu_per_proc), "--oversubscribe"] if cpu_per_proc > 1 else []
    extra += [] if pool else ["--no-cpu-pool"]
    for _ in range(repeats):
        a = plain(case)
        b = ours(case, ["--nproc-per-node", "2", "--cpu-per-proc", str(cpu_per_proc),
                        "--policy", "static", *extra])  # fmt: skip
        if b["code"]:  # (plain torchrun may fail after its last step: gloo's teardown abort)
            raise SystemExit(f"a run failed: {b['stderr']}")
        row = {"plain_wall_s": a["wall_s"], "rightsize_wall_s": b["wall_s"],
               "wall_ratio": b["wall_s"] / a["wall_s"], "plain_exit": a["code"],
               "plain_aborted_at_exit": a["aborted_at_exit"]}  # fmt: skip
        if a["iter_ms"] and b["iter_ms"]:
            row["plain_iter_ms"] = statistics.median(a["iter_ms"])
            row["rightsize_iter_ms"] = statistics.median(b["iter_ms"])
            row["iter_ratio"] = row["rightsize_iter_ms"] / row["plain_iter_ms"]
        if a["epoch_s"] and b["epoch_s"]:
            row["plain_epoch_s"], row["rightsize_epoch_s"] = a["epoch_s"], b["epoch_s"]
            row["epoch_ratio"] = b["epoch_s"] / a["epoch_s"]
        pairs.append(row)
    key = next((k for k in ("iter_ratio", "epoch_ratio") if all(k in p for p in pairs)),
               "wall_ratio")  # fmt: skip
    ratios = [p[key] for p in pairs]
    return {"pairs": pairs, "measure": key, "overhead_median": statistics.median(ratios) - 1,
            "overhead_range": [min(ratios) - 1, max(ratios) - 1]}  # fmt: skip


def grown(case: dict, policy: str) -> dict:
    start = ["--nproc-per-node", "1", "--cpu-per-proc", "0.5", "--budget-cpu", "2",
             "--max-nproc", "2"]  # fmt: skip
    kept = ours(case, [*start, "--policy", "static"])
    moved = ours(case, [*start, "--policy", policy])
    for run in (kept, moved):
        if run["code"] or run["report"] is None:
            raise SystemExit(f"a run failed ({run['code']}): {run['stderr']}")
    report = moved["report"]
    return {"policy": policy, "code": moved["code"], "static_jct_s": kept["report"]["wall_time_s"],
            "jct_s": report.get("wall_time_s"), "final_shape": report.get("final_shape"),
            "moves": [{k: m[k] for k in ("time_s", "action", "taken", "reason", "restart_s",
                                          "samples_per_s_before", "samples_per_s_after")}
                      for m in report.get("moves", [])]}  # fmt: skip


def killed(case: dict) -> dict:
    run = ours(case, ["--nproc-per-node", "2", "--cpu-per-proc", "1", "--max-restarts", "3",
                      "--policy", "static"], kill_after_save=True)  # fmt: skip
    report = run["report"] or {}
    script = report.get("script", {})
    return {"code": run["code"], "killed_at_s": run["killed_at_s"], "wall_s": run["wall_s"],
            "failed_restarts": script.get("failed_restarts"),
            "restart": next((t["details"] for t in report.get("timeline", [])
                             if t["action"] == "restart_group"), None),
            "resumed_from_its_checkpoint": case["resumed"] in run["rank0_log"],
            "stderr": run["stderr"]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="where the prepared copies are (or go)")
    parser.add_argument("--prepare", action="store_true", help="write the copies first")
    parser.add_argument("--examples-git", help="pytorch/examples' git directory (--prepare)")
    parser.add_argument("--nanogpt-git", help="karpathy/nanoGPT's git directory (--prepare)")
    parser.add_argument("--cases", default="ddp-tutorial,nanogpt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policy", default="goodput")
    parser.add_argument("--iters", type=int, default=3000, help="nanoGPT's max_iters")
    parser.add_argument("--epochs", type=int, default=100, help="the tutorial's epochs")
    parser.add_argument("--overhead-cpu-per-proc", type=float, default=1.0, metavar="CPU",
                        help="each rank's quota in the overhead pairs (default 1: the "
                        "machine's share; 1.99 lets a rank burst with one torch thread)")  # fmt: skip
    parser.add_argument("--overhead-no-pool", action="store_true",
                        help="hold each rank to its own quota in the overhead pairs "
                        "(rightsize torchrun --no-cpu-pool)")
    parser.add_argument("--parts", default="overhead,grown,killed",
                        help="which of overhead, grown and killed to run (comma-separated)")
    parser.add_argument("--out", default="benchmarks/results/public_scripts.json")
    args = parser.parse_args(argv)
    root = Path(args.dir).resolve()
    if args.prepare:
        prepare(Path(args.examples_git), Path(args.nanogpt_git), root)
    table = cases(root, args.iters, args.epochs)
    results = {}
    for name in args.cases.split(","):
        case, parts = table[name], args.parts.split(",")
        row = {}
        if "overhead" in parts:
            o = row["overhead"] = overhead(case, args.repeats, args.overhead_cpu_per_proc,
                                               not args.overhead_no_pool)
            print(f"{name}: overhead {o['overhead_median']:+.1%} ({o['measure']}, median of "
                  f"{len(o['pairs'])} pairs)", flush=True)  # fmt: skip
        if "grown" in parts:
            g = row["grown"] = grown(case, args.policy)
            print(f"{name}: grown by {g['policy']}: {g['jct_s']:.1f}s against "
                  f"{g['static_jct_s']:.1f}s kept at 0.5 cpu, "
                  f"{sum(m['taken'] for m in g['moves'])} moves", flush=True)  # fmt: skip
        if "killed" in parts:
            k = row["killed"] = killed(case)
            print(f"{name}: killed rank: exit {k['code']}, resumed from its checkpoint: "
                  f"{k['resumed_from_its_checkpoint']}", flush=True)  # fmt: skip
        results[name] = row
    write_report(args.out, {"commits": {"pytorch/examples": EXAMPLES_COMMIT,
                                        "karpathy/nanoGPT": NANOGPT_COMMIT},
                            "results": results, "load": load_note()})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
