"""Every run archived under results/runs/ loads strictly as a config of today's code, and that config is the run
that was saved: the file says its kind, its config holds every key the run read (the recipe, the task, the method
and its options, the task family's options) and no other, so `from_dict` takes it without dropping anything and
`first_difference` finds nothing, and it is laid out as the training loop writes a metrics.json. The archive was
migrated to this shape once; nothing reads an older one. What lets a fresh clone resume and report from it.

The lesson compares a saved config strictly: a field the file lacks differs, since a version that did not save it
may have done something else there."""
import json
from pathlib import Path

import pytest

from course_lib.lab.records import KINDS
from course_lib.runtime.errors import UsageError
from course_lib.runtime.run_folder import check_same_run
from course_lib.runtime.settings import first_difference
from course_lib.training.config import FinetuneConfig

ROOT = Path(__file__).resolve().parent.parent
ARCHIVED = sorted((ROOT / "results" / "runs").rglob("metrics.json"))


def test_the_archive_is_there():
    assert len(ARCHIVED) >= 100


@pytest.mark.parametrize("path", ARCHIVED, ids=lambda p: str(p.relative_to(ROOT / "results" / "runs")))
def test_an_archived_run_loads_strictly_as_the_run_it_was(path):
    text = path.read_text()
    result = json.loads(text)
    assert text == json.dumps(result, indent=2, sort_keys=True) + "\n"  # as `repro.write_json` writes it
    saved = result["config"]
    cfg = KINDS[result["kind"]].config_class.from_dict(saved)  # an unknown key or another method's: refused
    assert first_difference(saved, cfg) is None
    assert cfg.to_dict() == saved  # every key the run read, and no other


def test_the_lesson_counts_a_field_an_older_version_did_not_save_as_a_difference(tmp_path):
    cfg = FinetuneConfig(method="asa")
    assert first_difference(cfg.to_dict(), cfg) is None
    old = {k: v for k, v in cfg.to_dict().items() if k != "asa_clip_scope"}
    assert first_difference(old, cfg) == "asa_clip_scope"
    with pytest.raises(UsageError, match=r"saved by an older version, which did not record asa_clip_scope \(this "
                                         r"run has asa_clip_scope='learner'\); delete it to run again"):
        check_same_run(old, cfg, tmp_path)
