"""Mistakes found before any training (an output folder that cannot be written, a damaged model), and runs
that learnt nothing said to be such (every dev prediction the same class) instead of reported as results."""
import contextlib
import ctypes
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from course_lib.lab import sweep, sweep_cli
from course_lib.model.weights import check_model
from course_lib.model.model_folder import read_weights, read_model_config
from course_lib import cli
from course_lib.runtime import repro
from course_lib.runtime.errors import UsageError
from course_lib.training import finetune as train
from course_lib.training import multitask
from course_lib.training import pretrain
from course_lib.training.config import FinetuneConfig

ENTRY_POINTS = ["finetune", "multitask", "pretrain", "sweep"]


class Started(Exception):
    """Raised by the stand-ins for each entry point's first costly step: reaching one means a check came late."""


@pytest.fixture
def no_training(monkeypatch):
    """Every entry point's first costly step (the model, the corpus, a child run) fails the test if reached."""
    def started(*args, **kwargs):
        raise Started("the run got past its checks")

    monkeypatch.setenv("CI", "true")
    for module, name in ((train, "load_encoder"), (multitask, "load_from_folder"), (pretrain, "load_corpus"),
                         (sweep, "execute")):
        monkeypatch.setattr(module, name, started)


def run_entry_point(name: str, out: Path, model_dir: Path, glue_dir: Path, tmp_path: Path) -> int:
    """One call of the command line, as a user types it, with a tiny model and data; returns the exit code."""
    shared = {"model": str(model_dir), "glue_dir": str(glue_dir), "epochs": 1, "batch_size": 16, "max_len": 32}
    if name == "sweep":
        grid = tmp_path / "grid.yaml"
        grid.write_text(yaml.safe_dump({"command": "finetune", "base": shared, "grid": {"seed": [0]}}))
        return sweep_cli.main([str(grid), "--output-dir", str(out)])
    if name == "pretrain":
        corpus = tmp_path / "corpus.txt"
        corpus.write_text("the cat sees the dog .\n" * 50)
        options = {"corpus": str(corpus), "max_steps": 2, "num_hidden_layers": 1, "hidden_size": 32,
                   "num_attention_heads": 2, "intermediate_size": 64, "max_len": 32, "ag_head_types": "0,1"}
    else:
        options = {**shared, **({"tasks": "sst2"} if name == "multitask" else {})}
    args = [x for k, v in {**options, "output_dir": str(out)}.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    return cli.main([name, *args])


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


# ----------------------------------------------------------------------------------------------
# The output folder


@pytest.mark.parametrize("where", ["is_the_file", "under_the_file"])
@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_an_output_folder_that_is_a_file_is_refused_before_training(name, where, tiny_model_dir, keyword_glue,
                                                                    tmp_path, capsys, no_training):
    blocker = tmp_path / "results.txt"
    blocker.write_text("not a folder\n")
    out = blocker if where == "is_the_file" else blocker / "run"
    assert run_entry_point(name, out, tiny_model_dir, keyword_glue, tmp_path) == 2
    err = one_line_error(capsys)
    assert f"output folder '{out}' cannot be written: {blocker} is a file, not a folder" in err
    assert "--output-dir" in err and blocker.read_text() == "not a folder\n"


CAP_DAC_OVERRIDE = 1  # <linux/capability.h>: what lets root write into a folder whose mode bits say no


@contextlib.contextmanager
def root_held_to_mode_bits():
    """As root (CI runs as root), drop CAP_DAC_OVERRIDE from this thread's effective set for the block: root is
    then held to a folder's mode bits like any owner, so a folder it made read-only is read-only to it; the
    capability stays permitted and comes back after. For any other user, nothing to do."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3; pid 0: this thread
    caps = (ctypes.c_uint32 * 6)()  # (effective, permitted, inheritable) of capabilities 0-31, then of 32-63
    assert libc.capget(header, caps) == 0, os.strerror(ctypes.get_errno())
    saved = list(caps)
    caps[0] &= ~(1 << CAP_DAC_OVERRIDE)
    assert libc.capset(header, caps) == 0, os.strerror(ctypes.get_errno())
    try:
        yield
    finally:
        caps[:] = saved
        assert libc.capset(header, caps) == 0, os.strerror(ctypes.get_errno())


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_a_read_only_output_folder_is_refused_before_training(name, tiny_model_dir, keyword_glue, tmp_path,
                                                              capsys, no_training):
    """A folder whose mode forbids writing to its owner; as root, root without its override (root_held_to_mode_bits),
    so the kernel's own refusal of the probe is what the one-line error reports."""
    out = tmp_path / "read_only"
    out.mkdir()
    out.chmod(0o500)
    try:
        with root_held_to_mode_bits():
            assert run_entry_point(name, out, tiny_model_dir, keyword_glue, tmp_path) == 2
    finally:
        out.chmod(0o700)
    assert f"output folder '{out}' cannot be written: Permission denied" in one_line_error(capsys)
    assert list(out.iterdir()) == [], "nothing may be written into the read-only folder"


def test_a_probe_that_cannot_be_written_names_the_reason_and_a_good_folder_is_left_clean(tmp_path, monkeypatch):
    """The file system's refusal of the probe, whatever the reason (here a read-only file system), is the message."""
    out = repro.check_writable_dir(tmp_path / "new" / "run")
    assert out.is_dir() and not list(out.iterdir()), "the probe file must not stay behind"

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(repro.tempfile, "mkstemp", refuse)
    with pytest.raises(UsageError, match=r"cannot be written: Read-only file system \(give an --output-dir"):
        repro.check_writable_dir(out)


# ----------------------------------------------------------------------------------------------
# The model


@pytest.fixture
def damaged_model(tiny_model_dir, tmp_path) -> Path:
    """The tiny BERT folder with its model.safetensors cut in half, as an interrupted download leaves it."""
    folder = tmp_path / "damaged_bert"
    shutil.copytree(tiny_model_dir, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return folder


@pytest.mark.parametrize("name", ["finetune", "multitask", "sweep"])
def test_a_damaged_model_is_one_line_naming_the_file(name, damaged_model, keyword_glue, tmp_path, capsys,
                                                     monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(sweep, "execute", lambda *args, **kwargs: pytest.fail("a child started"))
    assert run_entry_point(name, tmp_path / "out", damaged_model, keyword_glue, tmp_path) == 2
    err = one_line_error(capsys)
    assert f"{damaged_model / 'model.safetensors'} is not a readable checkpoint (SafetensorError: " in err
    assert "pass another --model" in err
    assert not (tmp_path / "out" / "checkpoint.pt").exists() and not (tmp_path / "out" / "seed=0" / "log.txt").exists()


@pytest.mark.parametrize("content", [b"", b"not a pickle", b"PK\x03\x04 cut short"])
def test_a_damaged_pytorch_bin_or_config_is_a_usage_error(tiny_model_dir, tmp_path, content):
    folder = tmp_path / "bin_bert"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(content)
    with pytest.raises(UsageError, match=r"pytorch_model.bin is not a readable checkpoint \(\w+"):
        read_weights(folder)
    (folder / "config.json").write_text('{"hidden_size": 32,')
    with pytest.raises(UsageError, match=r"config.json is not a readable BERT config \(JSONDecodeError: "):
        read_model_config(folder)
    assert check_model(tiny_model_dir) == tiny_model_dir  # a sound folder passes


# ----------------------------------------------------------------------------------------------
# A run that learnt nothing


def tiny_finetune(model_dir, glue_dir, out, **extra) -> FinetuneConfig:
    return FinetuneConfig(**{"task": "sst2", "model": str(model_dir), "glue_dir": str(glue_dir),
                             "output_dir": str(out), "epochs": 1, "batch_size": 16, "max_len": 32, "lr": 1e-3,
                             **extra})


def test_a_run_that_predicts_one_class_says_so_in_the_log_and_in_metrics_json(tiny_model_dir, keyword_glue,
                                                                              tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(train, "predict", lambda model, features, *args, **kwargs: torch.ones(len(features)))
    result = train.finetune(tiny_finetune(tiny_model_dir, keyword_glue, tmp_path))
    line = "sst2 dev: all 64 predictions are class 1: the scores are those of a constant guess"
    assert f"warning: {line}\n" in capsys.readouterr().err
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["warnings"] == result["warnings"] == saved["history"][0]["warnings"] == [line]
    labels = [row.split("\t")[1] for row in (keyword_glue / "SST-2" / "dev.tsv").read_text().splitlines()[1:]]
    assert saved["dev"]["accuracy"] == labels.count("1") / 64  # class 1's share: alone, it reads like a result


def test_only_the_epochs_whose_predictions_are_one_class_are_flagged(tiny_model_dir, keyword_glue, tmp_path,
                                                                     capsys):
    """A real run: the tiny BERT answers class 1 throughout epoch 1, then learns the sentiment word."""
    result = train.finetune(tiny_finetune(tiny_model_dir, keyword_glue, tmp_path, epochs=3, lr=1e-2))
    first, *rest = result["history"]
    assert first["warnings"] == ["sst2 dev: all 64 predictions are class 1: the scores are those of a constant guess"]
    assert all("warnings" not in entry and entry["dev"]["accuracy"] > 0.9 for entry in rest)
    assert result["warnings"] == [] == json.loads((tmp_path / "metrics.json").read_text())["warnings"]
    assert capsys.readouterr().err.count("warning: ") == 1
