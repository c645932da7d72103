"""Runs an older version saved: the lesson compares them strictly, the lab's archive reader reads a missing
option as what those runs did (`course_lib.lab.archive`)."""
import pytest

from course_lib.lab.archive import archived_difference, read_config
from course_lib.runtime.errors import UsageError
from course_lib.runtime.run_folder import check_same_run
from course_lib.runtime.validated import first_difference
from course_lib.training.config import FinetuneConfig, MultitaskConfig


def _saved_without(cfg, *names: str) -> dict:
    saved = cfg.to_dict()
    for name in names:
        saved.pop(name, None)
    return saved


def test_the_lesson_counts_a_field_an_older_version_did_not_save_as_a_difference(tmp_path):
    cfg = FinetuneConfig(method="asa")
    assert first_difference(cfg.to_dict(), cfg) is None
    old = _saved_without(cfg, "asa_clip_scope")
    assert first_difference(old, cfg) == "asa_clip_scope"
    with pytest.raises(UsageError, match=r"saved by an older version, which did not record asa_clip_scope \(this "
                                         r"run has asa_clip_scope='learner'\); delete it to run again"):
        check_same_run(old, cfg, tmp_path)


def test_asa_runs_saved_before_the_clip_scope_existed_read_as_clipping_everything():
    old = _saved_without(FinetuneConfig(method="asa"), "asa_clip_scope")
    assert archived_difference(old, FinetuneConfig(method="asa")) == "asa_clip_scope"
    assert archived_difference(old, FinetuneConfig.from_dict({"method": "asa", "asa_clip_scope": "all"})) is None
    assert read_config(FinetuneConfig, old).options.asa_clip_scope == "all"
    assert "asa_clip_scope" not in FinetuneConfig().to_dict()  # an option vanilla never reads is not its config's
    old_vanilla = {**FinetuneConfig().to_dict(), "asa_clip_scope": "all"}  # a vanilla run saved when it was
    assert archived_difference(old_vanilla, FinetuneConfig()) is None


def test_asa_runs_saved_before_the_regression_divergence_existed_read_as_squared():
    for method, scope in (("asa", {"asa_clip_scope": "all"}), ("bernoulli-mask", {})):  # bernoulli: no adversary
        old = _saved_without(FinetuneConfig(method=method, task="stsb"), "asa_regression_divergence",
                             "asa_clip_scope")  # the clip scope: an ASA option, bernoulli-mask never had it
        new = FinetuneConfig.from_dict(dict(method=method, task="stsb", asa_regression_divergence="squared", **scope))
        assert archived_difference(old, new) is None
        now = FinetuneConfig.from_dict(dict(method=method, task="stsb", **scope))
        assert archived_difference(old, now) == "asa_regression_divergence"


def test_ssa_runs_saved_before_the_sampler_and_head_init_options_read_as_the_old_ones():
    for method in ("ssa-co", "ssa-hybrid", "bert-mask"):
        old = _saved_without(FinetuneConfig(method=method), "ssa_sampler", "ssa_head_init")  # bert-mask: no head
        assert archived_difference(old, FinetuneConfig(method=method)) in ("ssa_sampler", "ssa_head_init")
        pinned = {"ssa_sampler": "rounded"} if method == "bert-mask" else {"ssa_sampler": "rounded",
                                                                          "ssa_head_init": "torch"}
        assert archived_difference(old, FinetuneConfig.from_dict({"method": method, **pinned})) is None


def test_multitask_runs_saved_before_the_options_read_as_the_old_ones():
    old = _saved_without(MultitaskConfig(ssa="all"), "ssa_sampler", "ssa_head_init", "ssa_method")
    assert archived_difference(old, MultitaskConfig(ssa="all")) in ("ssa_sampler", "ssa_head_init")
    rounded = MultitaskConfig.from_dict(dict(ssa="all", ssa_sampler="rounded", ssa_head_init="torch"))
    assert archived_difference(old, rounded) is None
    assert read_config(MultitaskConfig, old).ssa_method == "ssa-co"


def test_any_other_missing_field_reads_as_todays_default_as_the_run_resolves_it():
    squad = FinetuneConfig(task="squad")
    saved = _saved_without(squad, "max_len")  # saved before max_len existed
    assert archived_difference(saved, squad) is None  # counts as SQuAD's 384, not the class default of 128
    assert archived_difference(saved, FinetuneConfig(task="squad", max_len=128)) == "max_len"
    assert archived_difference({**saved, "epochs": 9, "lr": 1.0}, squad) == "epochs"  # the first by name
