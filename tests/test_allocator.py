"""keep_freed_memory: training steps reuse the pages earlier steps freed instead of faulting fresh ones in."""
import os
import subprocess
import sys

import pytest

from course_lib.allocator import OPT_OUT

STEPS = """
import resource, torch
from course_lib.allocator import keep_freed_memory
kept = keep_freed_memory()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 256))
x = torch.randn(4096, 256)
faults = []
for _ in range(4):  # training steps whose (4096, 4096) activations, 64 MiB each, are allocated and freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    model(x).square().mean().backward()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, sum(faults[1:]))  # the first step faults its memory in either way
"""


def _later_step_faults(keep: bool) -> tuple[str, int]:
    env = {**os.environ, OPT_OUT: "1" if keep else "0"}
    out = subprocess.run([sys.executable, "-c", STEPS], env=env, capture_output=True, text=True, check=True)
    kept, faults = out.stdout.split()
    return kept, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's; other platforms are untouched")
def test_later_steps_reuse_freed_memory_only_when_kept():
    kept, faults = _later_step_faults(keep=True)
    if kept != "True":
        pytest.skip("this Linux C library has no mallopt (not glibc)")
    opted_out, default_faults = _later_step_faults(keep=False)
    assert opted_out == "False"
    # glibc's default hands every large block back on free: each step faults its ~270 MiB in again (~69,000
    # pages). Kept, most steps reuse it; aligned allocations fragment the heap now and then (0-33,000 faults).
    assert default_faults > 3 * 50_000
    assert faults < default_faults / 2
