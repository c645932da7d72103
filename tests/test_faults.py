"""Faults that end cleanly: a damaged checkpoint, a full disk and a busy run folder are one line each, never a
traceback or two runs writing the same files; a scheduler's SIGTERM is a checkpoint and a resumable exit."""
import errno
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from course_lib import cli
from course_lib.runtime import run_folder
from course_lib.runtime.errors import RunFailed
from course_lib.runtime.repro import atomic_write, save_torch
from course_lib.training import loop as loop_module


def tiny_run(model_dir, glue_dir, out, *extra) -> list[str]:
    return ["finetune", "--task", "sst2", "--model", str(model_dir), "--glue-dir", str(glue_dir), "--output-dir",
            str(out), "--epochs", "2", "--batch-size", "16", "--max-len", "32", "--lr", "1e-3", *extra]


def test_a_truncated_checkpoint_is_one_line_with_exit_2(tiny_model_dir, keyword_glue, tmp_path, capsys):
    """A checkpoint cut short on disk (a copy interrupted, a full disk outside this library): the rerun names the
    file and what to do, exit 2, instead of torch's PytorchStreamReader traceback."""
    out = tmp_path / "run"
    assert cli.main(tiny_run(tiny_model_dir, keyword_glue, out, "--keep-checkpoint")) == 0
    checkpoint = out / "checkpoint.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    (out / "metrics.json").write_text(json.dumps({**json.loads((out / "metrics.json").read_text()),
                                                  "status": "running"}))  # so the rerun resumes
    capsys.readouterr()
    assert cli.main(tiny_run(tiny_model_dir, keyword_glue, out, "--keep-checkpoint")) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"checkpoint '{checkpoint}' is damaged" in err and "delete it" in err, err


def test_a_full_disk_is_one_line_and_keeps_the_previous_file(tmp_path):
    """ENOSPC while writing: one RunFailed line naming the file, bytes written and free; the old file and no
    temporary are left."""
    path = tmp_path / "checkpoint.pt"
    save_torch(path, {"step": 1})
    before = path.read_bytes()

    def fills_the_disk(f):
        f.write(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(RunFailed) as caught:
        atomic_write(path, fills_the_disk)
    message = str(caught.value)
    assert "\n" not in message and f"no space left on the disk of {path}: 1000 bytes were written" in message
    assert f"the previous checkpoint.pt ({len(before)} bytes) is kept" in message and "bytes are free" in message
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_a_full_disk_during_training_ends_the_run_with_one_line(tiny_model_dir, keyword_glue, tmp_path,
                                                                 monkeypatch, capsys):
    """torch's writer reports ENOSPC as a RuntimeError ('unexpected pos ...' after the OSError): the run still
    ends with one 'run failed' line, exit 1, before a partial file is left."""
    def full_disk(path, obj):
        def write(f):
            f.write(b"x" * 10)
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as err:
                raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos 35456 vs 35350") from err
        atomic_write(path, write)

    monkeypatch.setattr(loop_module, "save_torch", full_disk)
    out = tmp_path / "run"
    assert cli.main(tiny_run(tiny_model_dir, keyword_glue, out)) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"run failed: no space left on the disk of {out / 'checkpoint.pt'}"), err
    assert not list(out.glob("*.tmp")) and not (out / "checkpoint.pt").exists()


def test_a_second_process_in_a_busy_run_folder_refuses_at_start(tiny_model_dir, keyword_glue, tmp_path):
    """While one process trains in a folder (here: this test holds its lock), a second one started there stops
    before its first step or write, with one line naming the folder and the holder; a lock file that no live process
    holds (its run was killed) does not block, and neither does this process's own lock for its own runs."""
    out = tmp_path / "run"
    out.mkdir()
    run_folder.lock_run_folder(out)
    try:
        done = subprocess.run([sys.executable, "-m", "course_lib", *tiny_run(tiny_model_dir, keyword_glue, out)],
                              capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
        assert done.returncode == 2 and not (out / "metrics.json").exists(), done.stderr
        assert done.stderr.strip() == (f"error: output folder '{out.resolve()}' is in use by process {os.getpid()} "
                                       f"on {socket.gethostname()}: wait for that run to end, or give another "
                                       f"--output-dir")
        assert cli.main(tiny_run(tiny_model_dir, keyword_glue, out)) == 0  # the holder's own run goes on
    finally:
        run_folder.unlock_run_folder(out)
    (out / "metrics.json").unlink()
    assert (out / run_folder.RUN_LOCK).read_text().startswith("process ")  # left behind, held by nobody
    done = subprocess.run([sys.executable, "-m", "course_lib", *tiny_run(tiny_model_dir, keyword_glue, out)],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("method", ["vanilla", "ssa-co"])
def test_sigterm_saves_at_the_step_boundary_exits_75_and_the_rerun_ends_identical(method, tiny_model_dir,
                                                                                   keyword_glue, tmp_path,
                                                                                   monkeypatch, capsys):
    """A scheduler's SIGTERM in the middle of epoch 1 (step 3 of 12 per epoch): the run checkpoints at that step
    boundary and exits with 75 (requeue); the same command resumes there and ends with the metrics of a run
    never interrupted. SSA-Co's resume also reads back the epoch's relabelled training set from its cache."""
    def numbers(out):  # without the wall-clock timings: the run's, and SSA's labelling time
        result = json.loads((out / "metrics.json").read_text())
        result.pop("timing"), result["config"].pop("output_dir")
        return {**result, "history": [{k: v for k, v in e.items() if k != "label_seconds"} for e in result["history"]]}

    handler = signal.getsignal(signal.SIGTERM)
    assert cli.main(tiny_run(tiny_model_dir, keyword_glue, tmp_path / "whole", "--method", method)) == 0
    real_step, calls = loop_module.guarded_step, []

    def step_then_sigterm(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the step is in flight
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop_module, "guarded_step", step_then_sigterm)
    monkeypatch.setenv("TQDM_DISABLE", "1")  # no bar on stderr, even where an earlier test imported ipykernel
    out = tmp_path / "preempted"
    capsys.readouterr()
    assert cli.main(tiny_run(tiny_model_dir, keyword_glue, out, "--method", method)) == 75
    err = capsys.readouterr().err.strip().splitlines()  # the log's data-ready line, then the stop
    assert err[0].startswith("data ready: ") and len(err) == 2, err
    assert err[1] == f"preempted: SIGTERM at step 3: checkpoint saved in {out}; run the same command to resume", err
    assert (out / "checkpoint.pt").exists() and signal.getsignal(signal.SIGTERM) == handler  # restored
    assert (out / "epoch1_train.pt").exists() == (method == "ssa-co")
    monkeypatch.setattr(loop_module, "guarded_step", real_step)
    assert cli.main(tiny_run(tiny_model_dir, keyword_glue, out, "--method", method)) == 0
    assert numbers(out) == numbers(tmp_path / "whole")
