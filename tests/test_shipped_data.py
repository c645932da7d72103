"""The data a fresh clone ships in data/: its checksums, and a run on a newcomer's machine that reads it.

A newcomer has no data variable and no hub. These tests run in that setting on purpose (a subprocess with every
`*_DIR` removed and downloads off), so that a missing file in data/ or a reader that forgets the data/ fallback
fails here instead of being skipped.
"""
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from course_lib.readers import local_data

ROOT = Path(__file__).resolve().parents[1]


def newcomer_env() -> dict:
    """This machine's environment as a fresh clone's user has it: no data variable, no hub."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_DIR")}
    return env | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TQDM_DISABLE": "1"}


def test_every_shipped_file_has_the_checksum_its_readme_gives():
    """data/README.md lists each shipped file with its sha256; the files on disk are those files, unchanged."""
    listed = dict(re.findall(r"`([\w./-]+)` \| [^|]+ \| `([0-9a-f]{64})`", (ROOT / "data/README.md").read_text()))
    on_disk = {p.relative_to(ROOT / "data").as_posix() for p in (ROOT / "data").rglob("*")
               if p.is_file() and p.name != "README.md"}
    assert set(listed) == on_disk, f"README lists {sorted(set(listed) ^ on_disk)} differently from the disk"
    for name, digest in listed.items():
        assert hashlib.sha256((ROOT / "data" / name).read_bytes()).hexdigest() == digest, name


def test_the_shipped_folders_are_what_the_readers_fall_back_to():
    assert local_data.REPO_DATA == ROOT / "data"
    for env, name in local_data.SHIPPED.items():
        assert local_data.shipped_folder(env) == ROOT / "data" / name, env
    assert local_data.shipped_file("GLUE_DIR", "SST-2/train.tsv") is not None
    assert local_data.shipped_file("GLUE_DIR", "MRPC/train.tsv") is None  # not shipped: the hub's


def test_a_newcomers_finetune_reads_the_whole_shipped_sst2(tmp_path, tiny_model_dir):
    """No GLUE_DIR, hub off: `finetune --task sst2` trains on all 67,349 rows of data/glue/SST-2/train.tsv and
    scores all 872 dev rows (a tiny model, one epoch of long batches: seconds)."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "course_lib", "finetune", "--task", "sst2", "--model",
                           str(tiny_model_dir), "--max-len", "16", "--batch-size", "512", "--epochs", "1",
                           "--output-dir", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, env=newcomer_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "complete" and metrics["train_examples"] == 67_349
    predictions = next(out.glob("*dev*"))
    assert len(predictions.read_text().splitlines()) == 1 + 872  # a header and one row per dev sentence
