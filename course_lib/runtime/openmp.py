"""How torch's OpenMP threads wait, chosen before torch is imported: a laptop is rarely idle.

torch's CPU wheel runs its parallel loops on GNU OpenMP (libgomp). By default a thread that reaches the end of a
parallel loop spins for about 300,000 turns (GOMP_SPINCOUNT; a few milliseconds) before it sleeps, in case the
next loop starts at once. On an idle machine that saves a wake-up; when another program holds a core, the
spinning thread burns the time slice its partner needs to finish, and a training step of the MiniLM (batch 32 x
64, 2 threads) took 3x as long beside two busy programs as with threads that sleep at once
(`python -m benchmarks contention`, results/contention.md).

libgomp reads its settings once, when torch loads it, so `use_passive_wait` must run before `import torch`:
`course_lib/__init__.py` calls it, which covers every `python -m course_lib...` command, the sweep's and
papermill's child processes (they inherit the environment), the test suite (tests/conftest.py imports course_lib
first) and the notebooks' kernel (`course_lib.kernel`). A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
"""
from __future__ import annotations

import os
import time

WAIT_POLICY, SPIN_COUNT = "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"
CHOSEN = {WAIT_POLICY: "PASSIVE"}  # what the project sets when the user has set neither


def use_passive_wait(environ=os.environ) -> dict:
    """Set CHOSEN in `environ` unless the user already chose how OpenMP threads wait; return what was set."""
    if WAIT_POLICY in environ or SPIN_COUNT in environ:
        return {}
    environ.update(CHOSEN)
    return dict(CHOSEN)


def idle_spin_seconds(rounds: int = 40, pause: float = 0.01) -> float:
    """CPU seconds this process burns while its main thread sleeps after short parallel loops.

    With spinning waits each of the `rounds` pauses costs the worker threads up to a few ms of CPU; with passive
    waits almost nothing. This measures the policy libgomp actually runs under, not what the environment says.
    """
    import torch

    x, y = torch.ones(1 << 20), torch.empty(1 << 20)  # 4 MiB: a loop OpenMP splits across the threads
    for _ in range(5):  # the thread pool starts, the pages of y are touched
        torch.add(x, x, out=y)
    before = time.process_time()
    for _ in range(rounds):
        torch.add(x, x, out=y)
        time.sleep(pause)
    return time.process_time() - before
