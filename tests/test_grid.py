"""Notebook plumbing: grids of runs in one process (`course_lib.lab.grid`): their folders are named as the sweep
names its runs, a variant adds runs for the methods it names, each run takes from the grid's method options those
its method reads and keeps only its own, every option is checked first, and a finished run is read back."""
import json

import nbformat
import pytest
import yaml

from course_lib.lab import grid, sweep
from course_lib.lab import reuse
from course_lib.lab.grid import RunKey, Variant, dev_rows, plan_grid, run_grid
from course_lib.notebook.params import NOTEBOOK_DIR, load_preset
from course_lib.runtime.errors import UsageError
from course_lib.training import finetune as finetune_module
from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig

CONFIG_OF = {"00_bert_from_scratch": FinetuneConfig, "01_kou2020_ssa": FinetuneConfig,
             "02_multitask_bert_ssa": MultitaskConfig, "03_cui2019_sparse_attention": FinetuneConfig,
             "04_deshpande2020_attention_guidance": PretrainConfig,
             "05_wu2023_adversarial_self_attention": FinetuneConfig}


@pytest.mark.parametrize("name", sorted(CONFIG_OF))
@pytest.mark.parametrize("preset", ["smoke", "cpu", "paper"])
def test_every_notebook_preset_builds_its_config(name, preset, tmp_path):
    """The notebook's cells up to the one that builds its config, with the preset's values in place of the
    parameters cell: every preset is a valid run (the GPU presets included, which no CPU test trains)."""
    cells = [c for c in nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4).cells if c.cell_type == "code"]
    upto = next(i for i, c in enumerate(cells) if "nb.parameters(globals())" in c.source)
    namespace = {}
    for cell in cells[:upto + 1]:
        parameters = "parameters" in cell.metadata.get("tags", [])
        exec(compile("" if parameters else cell.source, name, "exec"), namespace)
        if parameters:
            namespace.update({**load_preset(name, preset), "output_dir": str(tmp_path)})
    assert isinstance(namespace["base"], CONFIG_OF[name]) and namespace["base"].output_dir == str(tmp_path)


def test_grid_folders_are_named_as_the_sweep_names_its_runs(tmp_path):
    base = FinetuneConfig(epochs=1)
    runs = plan_grid(base, tmp_path, tasks=["sst2", "rte"], methods=["vanilla", "ssaf"], seeds=[0, 1],
                     method_options={"ssa_label_mode": "code", "sparsegen_lambda": -2.0})
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump({"command": "finetune", "base": {"epochs": 1, "sparsegen_lambda": -2.0},
                                         "grid": {"task": ["sst2", "rte"], "method": ["vanilla", "ssaf"],
                                                  "seed": [0, 1]}}, sort_keys=False))
    swept = sweep.load_grid(grid_file, tmp_path)
    assert [r.name for r in runs] == [r.name for r in swept]  # the same names in the same order
    assert "task=sst2,method=vanilla,seed=0" in [r.name for r in runs]
    for run in runs:
        assert run.config.output_dir == str(tmp_path / run.name)
        assert run.key == (run.config.task, run.config.method, run.config.seed, "")


def test_a_variant_adds_runs_for_its_methods_and_each_run_keeps_only_its_own_options(tmp_path):
    options = {"ssa_label_mode": "code", "ssa_threshold": 0.5, "asa_tau": 0.1}
    base = FinetuneConfig(output_dir=str(tmp_path))
    runs = plan_grid(base, methods=["vanilla", "ssa-co", "ssa-hybrid"], seeds=[3], method_options=options,
                     variants=[Variant("paper labels", {"ssa_label_mode": "paper"}, methods=("ssa-co",))],
                     task_overrides={"sst2": {"ssa_share_weight": False}, "rte": {"epochs": 9}})
    by_key = {run.key: run for run in runs}
    assert list(by_key) == [("sst2", m, 3, "") for m in ("vanilla", "ssa-co", "ssa-hybrid")] + \
        [("sst2", "ssa-co", 3, "paper labels")]
    variant = by_key["sst2", "ssa-co", 3, "paper labels"]
    assert variant.name == "task=sst2,method=ssa-co,ssa_label_mode=paper,seed=3"
    assert variant.key.name == "ssa-co, paper labels" and variant.config.options.ssa_label_mode == "paper"
    vanilla, hybrid = by_key["sst2", "vanilla", 3, ""].config, by_key["sst2", "ssa-hybrid", 3, ""].config
    assert not {"ssa_threshold", "asa_tau", "ssa_share_weight"} & set(vanilla.to_dict())  # not vanilla's options
    assert (hybrid.options.ssa_threshold, hybrid.options.ssa_share_weight) == (0.5, False)
    assert "asa_tau" not in hybrid.to_dict()
    assert "ssa_threshold" not in by_key["sst2", "ssa-co", 3, ""].config.to_dict()  # ssa-co never reads it


def test_multitask_and_pretraining_grids_name_what_their_configs_have(tmp_path):
    multitask = MultitaskConfig(tasks="sst2,stsb", output_dir=str(tmp_path))
    runs = plan_grid(multitask, seeds=[0, 1], label="SSA off",
                     variants=[Variant("SSA on", {"ssa": "all", "ssa_label_mode": "paper"})])
    assert [r.name for r in runs] == ["seed=0", "seed=1", "ssa=all,ssa_label_mode=paper,seed=0",
                                      "ssa=all,ssa_label_mode=paper,seed=1"]
    assert [r.key.name for r in runs] == ["SSA off", "SSA off", "SSA on", "SSA on"]
    assert runs[0].key == RunKey(None, None, 0, "SSA off")
    pretraining = plan_grid(PretrainConfig(output_dir=str(tmp_path)), methods=["mlm", "ag"])
    assert [(r.name, r.key.name) for r in pretraining] == [("method=mlm,seed=0", "mlm"), ("method=ag,seed=0", "ag")]


@pytest.mark.parametrize("kwargs, message", [
    ({"tasks": ["sst2"]}, "cannot cross tasks: the config has no 'task'"),
    ({"variants": [Variant("x", {"seed": 1})]}, "variant 'x' sets 'seed', which the grid sets for each run"),
    ({"variants": [Variant("x", {"shedule": "x"})]},
     "grid run shedule=x,seed=0: unknown MultitaskConfig option 'shedule'"),
    ({"variants": [Variant("x", {"ssa": "all"}), Variant("x", {"ssa": "sst2"})]}, "share the folder or key"),
    ({"seeds": 0}, "the grid's seeds must be a non-empty list"),
])
def test_a_bad_grid_is_one_line_before_any_run(kwargs, message, tmp_path):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        plan_grid(MultitaskConfig(tasks="sst2", output_dir=str(tmp_path)), **kwargs)
    assert not any(tmp_path.iterdir())


def test_a_grid_runs_resumes_and_reads_finished_runs_back(tiny_model_dir, keyword_glue, tmp_path, monkeypatch):
    base = FinetuneConfig(model=str(tiny_model_dir), glue_dir=str(keyword_glue), max_train_samples=32,
                          max_eval_samples=16, epochs=1, max_len=32, batch_size=16, lr=1e-3,
                          output_dir=str(tmp_path))
    contrast = [Variant("paper labels", {"ssa_label_mode": "paper"}, methods=("ssa-co",))]
    results = run_grid(base, methods=["vanilla", "ssa-co"], variants=contrast)
    assert list(results) == [("sst2", "vanilla", 0, ""), ("sst2", "ssa-co", 0, ""),
                             ("sst2", "ssa-co", 0, "paper labels")]
    folder = tmp_path / "task=sst2,method=ssa-co,ssa_label_mode=paper,seed=0"
    saved = json.loads((folder / "metrics.json").read_text())
    assert saved == results["sst2", "ssa-co", 0, "paper labels"] and saved["config"]["output_dir"] == str(folder)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("metrics.json")}

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")
    monkeypatch.setattr("course_lib.training.finetune.TrainingLoop", no_training)
    assert run_grid(base, methods=["vanilla", "ssa-co"], variants=contrast) == results
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("metrics.json")} == stamps

    rows = dev_rows(results)
    assert [(r["run"], r["task"], r["metric"]) for r in rows] == [
        ("vanilla", "sst2", "accuracy"), ("ssa-co", "sst2", "accuracy"), ("ssa-co, paper labels", "sst2", "accuracy")]
    assert rows[0]["dev score"] == 100 * results["sst2", "vanilla", 0, ""]["dev"]["accuracy"]  # in points


def test_another_folders_identical_finished_run_is_copied_not_trained_and_a_changed_one_trains(
        tiny_model_dir, keyword_glue, tmp_path, monkeypatch):
    """What lets `make demo` read back the runs `make test`'s nbval finished (course_lib.lab.reuse, asked by
    `run_grid` before each run)."""
    base = FinetuneConfig(model=str(tiny_model_dir), glue_dir=str(keyword_glue), max_train_samples=32,
                          max_eval_samples=16, epochs=1, max_len=32, batch_size=16, lr=1e-3,
                          output_dir=str(tmp_path / "nbval"))
    first = run_grid(base, methods=["vanilla"])
    donor = tmp_path / "nbval" / "task=sst2,method=vanilla,seed=0"
    donor_metrics = (donor / "metrics.json").read_bytes()
    monkeypatch.setenv(reuse.FINISHED_RUNS_ENV, str(tmp_path / "nbval"))
    trained = []
    real_loop = finetune_module.TrainingLoop
    monkeypatch.setattr(finetune_module, "TrainingLoop", lambda *a, **k: trained.append(a[0]) or real_loop(*a, **k))

    again = run_grid(base, tmp_path / "demo", methods=["vanilla"])
    copy = tmp_path / "demo" / "task=sst2,method=vanilla,seed=0"
    assert trained == [] and (copy / "metrics.json").is_file()
    saved = json.loads((copy / "metrics.json").read_text())
    assert saved == again["sst2", "vanilla", 0, ""] and saved["config"]["output_dir"] == str(copy)
    assert {**saved, "config": None} == {**first["sst2", "vanilla", 0, ""], "config": None}
    weights = [p.name for p in donor.iterdir() if p.suffix == ".safetensors"]
    assert weights and all((copy / w).stat().st_ino == (donor / w).stat().st_ino for w in weights)  # hard links
    assert (donor / "metrics.json").read_bytes() == donor_metrics  # the donor's own file never changes
    assert not list((tmp_path / "demo").glob(".*copying"))

    changed = run_grid(base.replace(lr=2e-3), tmp_path / "changed", methods=["vanilla"])
    assert len(trained) == 1 and changed["sst2", "vanilla", 0, ""]["config"]["lr"] == 2e-3  # any field differs: trains


def test_a_data_file_written_into_each_folder_is_the_same_data_when_its_bytes_are(tmp_path, keyword_glue):
    """Notebook 04 writes its corpus into its own output folder, so nbval's run and make demo's name different
    files: the same bytes are the same data (read back), other bytes are not (trained)."""
    from course_lib.training.config import PretrainConfig

    text = (keyword_glue / "SST-2" / "train.tsv").read_text()
    paths = {name: tmp_path / name / "corpus.txt" for name in ("nbval", "demo", "other")}
    for name, path in paths.items():
        path.parent.mkdir()
        path.write_text(text if name != "other" else text + "one more line\n")
    saved = PretrainConfig(corpus=str(paths["nbval"]), output_dir=str(tmp_path / "nbval" / "run")).to_dict()
    matched = reuse.matching_config(saved, PretrainConfig(corpus=str(paths["demo"]), output_dir="x"))
    assert matched == {**saved, "corpus": str(paths["demo"])}  # as the new run names it, so its own check agrees
    assert reuse.matching_config(saved, PretrainConfig(corpus=str(paths["other"]), output_dir="x")) is None
    assert reuse.matching_config(saved, PretrainConfig(corpus=str(paths["demo"]), max_steps=7, output_dir="x")) is None


def test_dev_rows_of_a_multitask_run_give_each_task_and_overall():
    result = {"overall": 0.5, "dev": {"sst2": {"dev": {"accuracy": 0.75}}, "stsb": {"dev": {"pearson": 0.25}}}}
    rows = dev_rows({RunKey(None, None, 1, "SSA off"): result})
    assert [(r["run"], r["task"], r["metric"], r["seed"], r["dev score"]) for r in rows] == [
        ("SSA off", "sst2", "accuracy", 1, 75.0), ("SSA off", "stsb", "pearson", 1, 25.0),
        ("SSA off", "Overall", "overall", 1, 50.0)]  # in points, the papers' scale
    assert grid.RUNNERS[MultitaskConfig].__name__ == "train_multitask"


def test_a_multitask_grid_gives_another_methods_option_to_the_runs_of_that_method(tmp_path):
    """ssa_cls_weight is SSA-Hybrid's: the SSA-Co base does not hold it, the hybrid variant's runs take it from
    the grid's method options; a bad value is refused before any run, though the base does not read it."""
    base = MultitaskConfig(tasks="sst2", output_dir=str(tmp_path))
    hybrid = Variant("hybrid", {"ssa": "all", "ssa_method": "ssa-hybrid"})
    runs = plan_grid(base, seeds=[0], label="co", variants=[hybrid], method_options={"ssa_cls_weight": 0.9})
    assert "ssa_cls_weight" not in base.to_dict()
    assert [r.config.to_dict().get("ssa_cls_weight") for r in runs] == [None, 0.9]
    with pytest.raises(UsageError, match="ssa_cls_weight"):
        plan_grid(base, seeds=[0], method_options={"ssa_cls_weight": "heavy"})


def test_a_method_option_reaches_its_methods_runs_only_and_a_bad_or_unknown_one_stops_the_grid_first(tmp_path):
    """Notebook 05's section 10: ASA at its own tau, vanilla untouched; an option of a method the grid does not
    run is still checked (a notebook's parameters hold every method's), a name no method has is refused."""
    base = FinetuneConfig(task="wnut17", output_dir=str(tmp_path))
    runs = plan_grid(base, methods=["vanilla", "asa"], seeds=[0], method_options={"asa_tau": 0.5, "bernoulli_p": 0.1})
    assert [run.config.to_dict().get("asa_tau") for run in runs] == [None, 0.5]
    assert all("bernoulli_p" not in run.config.to_dict() for run in runs)
    with pytest.raises(UsageError, match=r"BernoulliOptions.bernoulli_p must be|bernoulli_p"):
        plan_grid(base, methods=["vanilla"], method_options={"bernoulli_p": "often"})
    with pytest.raises(UsageError, match=r"unknown method option 'asa_taus' \(valid: .*asa_tau"):
        plan_grid(base, methods=["vanilla", "asa"], method_options={"asa_taus": 0.5})
