"""keep_freed_memory: training steps reuse the pages earlier steps freed instead of faulting fresh ones in."""
import os
import subprocess
import sys

import pytest

from course_lib.fast.allocator import OPT_OUT

STEPS = """
import resource, torch
from course_lib.fast.allocator import keep_freed_memory
def minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
before = minflt()  # the yardstick, before malloc is changed: faults to first touch a fresh 64 MiB block
block = torch.empty(4096, 4096).fill_(1.0)
fresh = minflt() - before
del block
kept = keep_freed_memory()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 256))
x = torch.randn(4096, 256)
faults = []
for _ in range(4):  # training steps whose (4096, 4096) activations, 64 MiB each, are allocated and freed
    before = minflt()
    model(x).square().mean().backward()
    faults.append(minflt() - before)
print(kept, fresh, sum(faults[1:]))  # the first step faults its memory in either way
"""


def _later_step_faults(keep: bool) -> tuple[str, int, int]:
    """(kept, faults of one fresh 64 MiB block, faults of steps 2-4), in a fresh process: mallopt is process-wide."""
    env = {**os.environ, OPT_OUT: "1" if keep else "0"}
    out = subprocess.run([sys.executable, "-c", STEPS], env=env, capture_output=True, text=True, check=True)
    kept, fresh, faults = out.stdout.split()
    return kept, int(fresh), int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's; other platforms are untouched")
def test_later_steps_reuse_freed_memory_only_when_kept():
    """Counts relative to the process's own fault cost of a 64 MiB block, so page size and huge pages cancel."""
    kept, _, faults = _later_step_faults(keep=True)
    if kept != "True":
        pytest.skip("this Linux C library has no mallopt (not glibc)")
    opted_out, fresh, default_faults = _later_step_faults(keep=False)
    assert opted_out == "False" and fresh > 0
    # glibc's default hands every large block back on free, so each later step faults its ~270 MiB (about four
    # blocks) in again: at least one block a step, or the workload no longer shows what keeping memory saves.
    # Kept, most steps reuse it; aligned allocations fragment the heap now and then (up to half a step's faults).
    assert default_faults >= 3 * fresh, (default_faults, fresh)
    assert faults < default_faults / 2, (faults, default_faults)
