"""keep_freed_memory: asked for, training steps reuse the pages earlier steps freed instead of faulting fresh ones
in; by default only for small attention maps, since a heap that keeps large blocks fragments into a peak far above
glibc's (`python -m benchmarks memory`, results/memory.md: how far depends on where small blocks land, so it is measured there,
not asserted here)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.fast.allocator import SETTING

ROOT = Path(__file__).resolve().parents[1]
glibc_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's; others untouched")

STEPS = """
import resource, sys, torch
from course_lib.fast.allocator import keep_freed_memory
def minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
width = int(sys.argv[1])  # activations (width, width) float32: 16 MiB at 2048, 64 MiB at 4096
before = minflt()  # the yardstick, before malloc is changed: faults to first touch one fresh activation
block = torch.empty(width, width).fill_(1.0)
fresh = minflt() - before
del block
kept = keep_freed_memory()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, width), torch.nn.GELU(), torch.nn.Linear(width, 256))
x = torch.randn(width, 256)
faults = []
for _ in range(4):  # training steps whose activations are allocated and freed
    before = minflt()
    model(x).square().mean().backward()
    faults.append(minflt() - before)
print(kept, fresh, sum(faults[1:]))  # the first step faults its memory in either way
"""

def _run(script: str, mode: str, *args: str) -> list[str]:
    """The script's printed words, in a fresh process: mallopt is process-wide."""
    env = {**os.environ, SETTING: mode}
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def _later_step_faults(mode: str, width: int) -> tuple[str, int, int]:
    """(kept, faults of one fresh activation, faults of steps 2-4)."""
    kept, fresh, faults = _run(STEPS, mode, str(width))
    return kept, int(fresh), int(faults)


@glibc_only
def test_later_steps_reuse_freed_memory_only_when_kept():
    """64 MiB activations. Counts are relative to the process's own fault cost of one activation, so page size
    and huge pages cancel."""
    width = 4096
    kept, _, faults = _later_step_faults("1", width)
    if kept != "True":
        pytest.skip("this Linux C library has no mallopt (not glibc)")
    opted_out, fresh, default_faults = _later_step_faults("0", width)
    assert opted_out == "False" and fresh > 0
    # glibc's default hands large blocks back (mmap, or a trim of the heap's top), so each later step faults its
    # activations in again: at least one a step, or the workload no longer shows what keeping memory saves.
    # Kept, most steps reuse them; aligned allocations fragment the heap now and then (up to half a step's faults).
    assert default_faults >= 3 * fresh, (default_faults, fresh)
    assert faults < default_faults / 2, (faults, default_faults)


@pytest.mark.parametrize("batch_size, max_len, kept", [(16, 384, "False"), (32, 128, "True"), (None, None, "False")])
def test_by_default_malloc_keeps_freed_memory_only_for_small_attention_maps(batch_size, max_len, kept):
    """auto: SQuAD's 16 x 384 (113 MiB maps) leaves malloc alone, SST-2's 32 x 128 keeps; a non-training call,
    nothing."""
    env = {k: v for k, v in os.environ.items() if k != SETTING}
    script = ("from course_lib.fast.allocator import keep_freed_memory; "
              f"print(keep_freed_memory({batch_size}, {max_len}))")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    if sys.platform.startswith("linux") or kept == "False":
        assert out.stdout.split() == [kept]


def test_an_unknown_setting_is_a_one_line_error():
    out = subprocess.run([sys.executable, "-m", "benchmarks", "sparsemax", "--repeats", "1"], cwd=ROOT,
                         env={**os.environ, SETTING: "yes"}, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert f"unknown {SETTING} 'yes' (valid: 0, 1, auto)" in out.stderr.strip().splitlines()[-1]
