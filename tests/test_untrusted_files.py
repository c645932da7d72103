"""A run folder cannot run code: the files the library reads back (the checkpoint, each epoch's cached training
set) load with torch's weights-only unpickler, so an object planted in one is refused in one line, exit 2, before
any training, and never built. The payload here is the classic one: unpickling it calls `os.system`."""
import json
import os
import pickle

import pytest
import torch

from course_lib import cli


class Planted:
    """Unpickled by a full unpickler, this runs a shell command that leaves a file behind."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def ssa_run(model_dir, glue_dir, out) -> list[str]:
    return ["finetune", "--task", "sst2", "--method", "ssa-co", "--model", str(model_dir), "--glue-dir",
            str(glue_dir), "--output-dir", str(out), "--epochs", "2", "--batch-size", "16", "--max-len", "32",
            "--lr", "1e-3", "--keep-checkpoint"]


@pytest.fixture
def finished_ssa_run(tiny_model_dir, keyword_glue, tmp_path):
    """An SSA-Co run's folder (checkpoint and both epochs' caches kept), marked unfinished so a rerun resumes."""
    out = tmp_path / "run"
    assert cli.main(ssa_run(tiny_model_dir, keyword_glue, out)) == 0
    metrics = out / "metrics.json"
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "status": "running"}))
    assert (out / "checkpoint.pt").exists() and (out / "epoch1_train.pt").exists()
    return out


def plant(path, marker) -> None:
    """Add the payload to a file the run wrote, as someone handing the folder on could."""
    saved = torch.load(path, weights_only=True)  # the run's own file reads without any allowance
    torch.save({**saved, "payload": Planted(marker)}, path)


def written(folder) -> dict:
    """Each file the run wrote and when (the lock is rewritten by every start, so it is left out)."""
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.name != ".run.lock"}


@pytest.mark.parametrize("name, kind", [("checkpoint.pt", "checkpoint"), ("epoch1_train.pt", "epoch cache"),
                                        ("epoch2_train.pt", "epoch cache")])
def test_a_planted_object_is_refused_in_one_line_and_never_runs(name, kind, finished_ssa_run, tiny_model_dir,
                                                                keyword_glue, tmp_path, capsys):
    """epoch2's cache would be read only when epoch 2 begins: it is refused at the start all the same."""
    marker, target = tmp_path / "PAYLOAD_RAN", finished_ssa_run / name
    plant(target, marker)
    untouched = written(finished_ssa_run)
    capsys.readouterr()
    assert cli.main(ssa_run(tiny_model_dir, keyword_glue, finished_ssa_run)) == 2
    out, err = capsys.readouterr()
    assert not marker.exists(), "the planted object ran"
    assert "\n" not in err.strip() and f"{kind} '{target}' holds objects this library never writes" in err, err
    assert "posix.system" in err and "nothing in it ran" in err and "delete it" in err, err
    assert "epoch" not in out and "resuming" not in out, "training went on before the refusal"
    assert written(finished_ssa_run) == untouched


def test_a_bare_pickle_in_place_of_the_checkpoint_is_refused(finished_ssa_run, tiny_model_dir, keyword_glue,
                                                             tmp_path, capsys):
    """Not torch's zip at all: a plain pickle whose first object is the payload."""
    marker, target = tmp_path / "PAYLOAD_RAN", finished_ssa_run / "checkpoint.pt"
    target.write_bytes(pickle.dumps(Planted(marker), protocol=2))
    capsys.readouterr()
    assert cli.main(ssa_run(tiny_model_dir, keyword_glue, finished_ssa_run)) == 2
    err = capsys.readouterr().err.strip()
    assert not marker.exists(), "the planted object ran"
    assert "\n" not in err and f"checkpoint '{target}' holds objects this library never writes" in err, err
