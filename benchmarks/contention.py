"""`python -m benchmarks contention`: a training step quiet and beside busy programs, per thread setting.

A laptop that trains is also running a browser, an editor, a video call. This bench starts 0, 1 or 2 programs that
each keep one core busy (a Python loop), and beside them times a training step of the packaged MiniLM (forward,
backward and torch's fused AdamW, the fast kernels in, on a linear head over the pooled [CLS]; batch 32 x 64 tokens
by default) under each OpenMP setting in SETTINGS. OpenMP reads its settings when torch is loaded, so every
(setting, load) pair runs in a fresh process; the rounds rotate the settings' order, so drift hits them alike. The
table gives each setting's median step time and its ratio to its own quiet time and to libgomp's default quiet time.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from course_lib.runtime.openmp import SPIN_COUNT, WAIT_POLICY, idle_spin_seconds
from course_lib.runtime.repro import progress

ROOT = Path(__file__).resolve().parents[1]  # `-m benchmarks.X` runs from the repository root

THREADS = "OMP_NUM_THREADS"
FREE_CORES = "ATTENTION_LAB_BENCH_FREE_CORES"  # a child told to take as many threads as cores are idle at start
SETTINGS = {  # name: the environment a child starts with (every other thread variable unset)
    "libgomp default (spin 300k)": {SPIN_COUNT: "300000"},  # the value libgomp uses when nothing is set
    "passive wait": {WAIT_POLICY: "PASSIVE"},
    "spin 1k": {SPIN_COUNT: "1000"},
    "passive, threads bound to cores": {WAIT_POLICY: "PASSIVE", "OMP_PROC_BIND": "true"},
    "one thread": {THREADS: "1", WAIT_POLICY: "PASSIVE"},
    "threads = idle cores, passive": {FREE_CORES: "1", WAIT_POLICY: "PASSIVE"},
}
BUSY_LOOP = "while True: pass"


def idle_cores(window: float = 0.5) -> float:
    """Cores idle over `window` seconds, from /proc/stat (Linux); the core count where it cannot be read."""
    def idle_total():
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)

    try:
        idle0, total0 = idle_total()
        time.sleep(window)
        idle1, total1 = idle_total()
    except OSError:
        return float(os.cpu_count() or 1)
    return (os.cpu_count() or 1) * (idle1 - idle0) / max(1, total1 - total0)


def step_times(steps: int, batch_size: int, seq_len: int) -> dict:
    """In this process: the threads it runs with and the seconds of `steps` training steps after one warm-up."""
    import torch  # loaded already (course_lib.runtime.repro): the process's OpenMP settings were fixed at its start

    from course_lib.fast import optimize
    from course_lib.fast.allocator import keep_freed_memory
    from course_lib.model.weights import load_pretrained

    if os.environ.get(FREE_CORES):
        torch.set_num_threads(max(1, round(idle_cores())))
    keep_freed_memory(batch_size, seq_len)  # as the command line does
    torch.manual_seed(0)
    model = optimize(load_pretrained(None)[0])
    head = torch.nn.Linear(model.config.hidden_size, 2)
    optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=2e-5, fused=True)
    ids = torch.randint(1000, model.config.vocab_size, (batch_size, seq_len))
    labels = torch.randint(0, 2, (batch_size,))
    model.train()
    seconds = []
    for _ in range(steps + 1):
        started = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(head(model(ids, torch.ones_like(ids), cls_only=True).pooler_output),
                                                 labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - started)
    return {"threads": torch.get_num_threads(), "seconds": seconds[1:], "idle_spin_s": round(idle_spin_seconds(), 3)}


def _child_env(setting: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in (WAIT_POLICY, SPIN_COUNT, THREADS, FREE_CORES, "OMP_PROC_BIND")}
    return {**env, **SETTINGS[setting], "TQDM_DISABLE": "1"}


def _in_fresh_process(setting: str, steps: int, batch_size: int, seq_len: int) -> dict:
    args = json.dumps([steps, batch_size, seq_len])
    out = subprocess.run([sys.executable, "-m", "benchmarks.contention", args], cwd=ROOT, env=_child_env(setting),
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"bench contention: the {setting!r} run failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def contention(busy_counts=(0, 1, 2), rounds: int = 2, steps: int = 4, batch_size: int = 32,
               seq_len: int = 64, settings: tuple[str, ...] = tuple(SETTINGS)) -> dict:
    """Every setting under every load, `rounds` times, each run a fresh process beside its busy programs.
    settings: a subset of SETTINGS that starts with libgomp's default, the yardstick of every ratio."""
    if settings[0] != next(iter(SETTINGS)) or not set(settings) <= set(SETTINGS):
        raise ValueError(f"settings {settings}: a subset of {tuple(SETTINGS)} that starts with the first")
    names, cells = list(settings), {}
    plan = [(r, busy) for r in range(rounds) for busy in busy_counts]
    for r, busy in progress(plan, desc="bench contention"):
        hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
        try:
            for name in names[r % len(names):] + names[:r % len(names)]:
                run = _in_fresh_process(name, steps, batch_size, seq_len)
                cell = cells.setdefault(f"{name}|{busy}", {"setting": name, "busy": busy, "seconds": []})
                cell["seconds"] += run["seconds"]
                cell["threads"], cell["idle_spin_s"] = run["threads"], run["idle_spin_s"]
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    for cell in cells.values():
        cell["median_s"] = round(statistics.median(cell["seconds"]), 3)
    return {"cores": os.cpu_count(), "batch_size": batch_size, "seq_len": seq_len, "steps": steps,
            "rounds": rounds, "busy_counts": list(busy_counts), "settings": names, "cells": list(cells.values())}


def format_contention(result: dict) -> str:
    cell = {(c["setting"], c["busy"]): c for c in result["cells"]}
    default = cell[(next(iter(SETTINGS)), 0)]["median_s"]
    busy = result["busy_counts"]
    lines = [f"Training step of the MiniLM, batch {result['batch_size']} x {result['seq_len']} tokens, on "
             f"{result['cores']} cores beside 0-{max(busy)} busy programs: median seconds of "
             f"{result['steps']} steps x {result['rounds']} rounds, each run a fresh process.",
             "(x own quiet: the slowdown under load; x default quiet: against libgomp's default on a quiet machine)",
             "(idle spin: CPU seconds the threads burn over 40 short pauses, measured in the run's process: about "
             "0.3 when they spin, 0.02 when they sleep)",
             "| setting | threads | idle spin s | " + " | ".join(f"{b} busy: s (x own quiet, x default quiet)"
                                                          for b in busy) + " |", "|---|---|---|" + "---|" * len(busy)]
    for name in result.get("settings", SETTINGS):  # results written before the subset option hold every one
        quiet = cell[(name, busy[0])]["median_s"]
        row = [f"{cell[(name, b)]['median_s']} ({cell[(name, b)]['median_s'] / quiet:.2f}, "
               f"{cell[(name, b)]['median_s'] / default:.2f})" for b in busy]
        threads = "/".join(str(cell[(name, b)]["threads"]) for b in busy)
        spin = cell[(name, busy[0])].get("idle_spin_s", "")
        lines.append(f"| {name} | {threads} | {spin} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(args) -> None:
    result = contention(tuple(args.busy), args.rounds, args.repeats, args.batch_size, args.seq_len)
    print(json.dumps(result, indent=2) if args.as_json else format_contention(result))


if __name__ == "__main__":  # one run, in the process `contention` starts for it
    print(json.dumps(step_times(*json.loads(sys.argv[1]))))
