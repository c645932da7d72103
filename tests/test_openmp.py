"""How torch's OpenMP threads wait (course_lib.runtime.openmp): passive in every entry point, unless the user said
otherwise. Checked by behaviour, not by reading the environment: `idle_spin_seconds` measures the CPU time the
worker threads burn while the main thread sleeps, which only a spinning wait policy burns."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.runtime.openmp import SPIN_COUNT, WAIT_POLICY, idle_spin_seconds, use_passive_wait

ROOT = Path(__file__).resolve().parent.parent
SPINNING = 0.1  # CPU seconds over idle_spin_seconds' 40 pauses: ~0.3 s when threads spin, ~0.02 s when they sleep
pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no worker thread to spin")


def clean_env(**extra) -> dict:
    """The environment of a user who set nothing about threads (the test process's own setting removed)."""
    env = {k: v for k, v in os.environ.items() if k not in (WAIT_POLICY, SPIN_COUNT, "OMP_NUM_THREADS")}
    return {**env, **extra}


def spin_after(entry_point: str, env: dict) -> float:
    """Run `python -m ENTRY_POINT --help` in a fresh process as the shell would, then measure in that process."""
    code = (f"import runpy, sys; sys.argv = [{entry_point!r}, '--help']\n"
            f"try:\n    runpy.run_module({entry_point!r}, run_name='__main__', alter_sys=True)\n"
            "except SystemExit:\n    pass\n"
            "from course_lib.runtime.openmp import idle_spin_seconds; print(idle_spin_seconds())")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return float(out.stdout.strip().splitlines()[-1])


def test_the_users_own_setting_wins():
    assert use_passive_wait({}) == {WAIT_POLICY: "PASSIVE"}
    for mine in ({WAIT_POLICY: "ACTIVE"}, {SPIN_COUNT: "1000"}):
        environ = dict(mine)
        assert use_passive_wait(environ) == {} and environ == mine


def test_the_test_suite_itself_runs_with_passive_threads():
    """conftest imports course_lib before torch, so this process's libgomp read the setting."""
    assert idle_spin_seconds() < SPINNING


def test_the_command_line_starts_torch_with_passive_threads():
    """`python -m course_lib` is the one entry point; every command runs through it."""
    assert spin_after("course_lib", clean_env()) < SPINNING


def test_the_measurement_sees_spinning_threads_when_the_user_asks_for_them():
    """The check above can fail: with libgomp's default spin count set by the user the threads spin."""
    assert spin_after("course_lib", clean_env(**{SPIN_COUNT: "300000"})) > SPINNING


def test_a_child_process_inherits_the_setting():
    """The sweep's runs and papermill's kernels are child processes of a course_lib command."""
    code = ("import course_lib, subprocess, sys\n"
            "subprocess.run([sys.executable, '-c', 'import torch\\n"
            "from course_lib.runtime.openmp import idle_spin_seconds\\nprint(idle_spin_seconds())'], check=True)")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) < SPINNING


@pytest.mark.slow
def test_the_contention_bench_runs_each_setting_in_a_process_that_has_it():
    from benchmarks import contention

    settings = ("libgomp default (spin 300k)", "passive wait", "one thread")  # spinning, sleeping, one thread:
    #   the three behaviours the assertions read (the other settings are environments of the same mechanism)
    result = contention.contention(busy_counts=(0, 1), rounds=1, steps=1, batch_size=2, seq_len=8, settings=settings)
    cell = {(c["setting"], c["busy"]): c for c in result["cells"]}
    assert set(cell) == {(name, busy) for name in settings for busy in (0, 1)}
    assert cell["libgomp default (spin 300k)", 0]["idle_spin_s"] > SPINNING  # what every run did before
    assert cell["passive wait", 1]["idle_spin_s"] < SPINNING
    assert cell["one thread", 0]["threads"] == 1 and cell["passive wait", 0]["threads"] == os.cpu_count()
    assert all(s > 0 for c in result["cells"] for s in c["seconds"])
    table = contention.format_contention(result)
    assert "| passive wait | 2/2 |" in table.replace(f"{os.cpu_count()}/{os.cpu_count()}", "2/2")


@pytest.mark.parametrize("argv, message", [
    (["--busy", "1", "2"], "--busy 1 2: give distinct counts of busy programs starting with 0"),
    (["--busy", "0", "-1"], "--busy 0 -1: give distinct counts"),
    (["--rounds", "0"], "--rounds must be >= 1, got 0"),
])
def test_bad_contention_arguments_are_one_line_errors_before_anything_runs(argv, message, capsys):
    from benchmarks.__main__ import main as bench

    assert bench(["contention", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
