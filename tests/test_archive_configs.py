"""Every run archived under results/runs/ still loads as a config of today's code, and that config is the run
that was saved: each saved setting that belongs to the run (the recipe, the task, the method and its options)
comes back unchanged, and a setting that does not (another method's option, saved when every run config held
every method's options) is the only kind left out. What lets a fresh clone resume and report from the archive."""
import json
from pathlib import Path

import pytest

from course_lib.lab.archive import archived_difference, read_config
from course_lib.training.config import FinetuneConfig, MultitaskConfig

ROOT = Path(__file__).resolve().parent.parent
ARCHIVED = sorted((ROOT / "results" / "runs").rglob("metrics.json"))
CONFIGS = {"finetune": FinetuneConfig, "multitask": MultitaskConfig}


def test_the_archive_is_there():
    assert len(ARCHIVED) >= 100


@pytest.mark.parametrize("path", ARCHIVED, ids=lambda p: str(p.relative_to(ROOT / "results" / "runs")))
def test_an_archived_run_loads_as_the_run_it_was(path):
    result = json.loads(path.read_text())
    saved = result["config"]
    cfg = read_config(CONFIGS[result.get("kind", "finetune")], saved)
    assert archived_difference(saved, cfg) is None
    mine = cfg.to_dict()
    assert {k: v for k, v in saved.items() if k in mine} == {k: mine[k] for k in saved if k in mine}
    left_out = set(saved) - set(mine)
    assert left_out <= set(type(cfg).foreign(saved)), sorted(left_out)
