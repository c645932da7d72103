"""Every kind of run in one results table: fine-tuning, multitask (a row per head and the overall score) and MLM
pre-training with the fine-tunes it starts; paired tests that know which way a metric improves; foreign files
named and skipped."""
import json
import math

import pytest
import torch
from scipy import stats

from course_lib.lab import collect
from course_lib.lab.records import kind_of
from course_lib.methods.registry import get_method
from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig
from course_lib.training.finetune import finetune
from course_lib.training.multitask import train_multitask
from course_lib.training.mlm_data import generated_corpus
from course_lib.training.pretrain import pretrain


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a second thread only spins
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory, tiny_model_dir, keyword_glue):
    """Real tiny runs of each kind, as notebooks 01, 02 and 04 lay them out: two seeds of MLM and AG
    pre-training, a fine-tune started from each, a multitask run, and a plain fine-tune."""
    root = tmp_path_factory.mktemp("runs")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(generated_corpus(600)) + "\n")
    for method in ("mlm", "ag"):
        for seed in (0, 1):
            out = root / "04" / f"method={method},seed={seed}"
            pretrain(PretrainConfig.from_dict(dict(
                method=method, seed=seed, corpus=str(corpus), output_dir=str(out), max_steps=8, num_hidden_layers=2,
                hidden_size=32, num_attention_heads=4, intermediate_size=64, max_len=16, batch_size=16, eval_every=4,
                eval_blocks=16, ag_head_types="0,1,1,1")))
            finetune(FinetuneConfig(task="sst2", model=str(out), glue_dir=str(keyword_glue), seed=seed, epochs=1,
                                    max_len=16, max_train_samples=32, max_eval_samples=32, batch_size=16,
                                    output_dir=str(root / "04" / f"finetune_{method}_{seed}")))
    train_multitask(MultitaskConfig(tasks="sst2", model=str(tiny_model_dir), glue_dir=str(keyword_glue), epochs=1,
                                    max_len=16, max_train_samples=32, max_eval_samples=32, batch_size=16,
                                    output_dir=str(root / "02" / "seed=0")))
    finetune(FinetuneConfig(task="sst2", model=str(tiny_model_dir), glue_dir=str(keyword_glue), epochs=1,
                            max_len=16, max_train_samples=32, max_eval_samples=32, batch_size=16,
                            output_dir=str(root / "01" / "seed=0")))
    return root


def test_every_kind_is_collected_with_its_metrics_and_group(runs_dir, capsys):
    assert collect.main([str(runs_dir)]) == 0
    assert capsys.readouterr().err == ""  # nothing this repository wrote is "not a course_lib metrics.json"
    rows = collect.collect(runs_dir)
    by_run = {(row["run"], row["task"]): row for row in rows}
    assert {row["kind"] for row in rows} == {"finetune", "multitask", "pretrain"}

    pre = by_run["04/method=ag,seed=1", "mlm"]
    saved = json.loads((runs_dir / "04" / "method=ag,seed=1" / "metrics.json").read_text())
    assert saved["kind"] == "pretrain" and pre["method"] == "ag" and pre["baseline"] == "mlm"
    assert pre["metrics"]["held-out mlm_loss"] == saved["final"]["eval_mlm_loss"]
    assert math.isclose(pre["metrics"]["held-out perplexity"], math.exp(saved["final"]["eval_mlm_loss"]))

    heads = [row for row in rows if row["kind"] == "multitask"]
    saved = json.loads((runs_dir / "02" / "seed=0" / "metrics.json").read_text())
    assert {row["task"] for row in heads} == {"sst2", "overall"}
    assert by_run["02/seed=0", "sst2"]["metrics"] == {"dev accuracy": saved["dev"]["sst2"]["dev"]["accuracy"]}
    assert by_run["02/seed=0", "overall"]["metrics"] == {"dev overall": saved["overall"]}

    linked = by_run["04/finetune_ag_1", "sst2"]
    assert linked["pretrained"] == "04/method=ag,seed=1" and linked["method"] == "vanilla (ag-pretrained)"
    assert by_run["01/seed=0", "sst2"]["method"] == "vanilla" and "pretrained" not in by_run["01/seed=0", "sst2"]

    groups = {(g["kind"], g["task"], g["method"]): g for g in collect.summarize(rows)}
    assert groups["pretrain", "mlm", "ag"]["seeds"] == [0, 1]  # the two seeds of one recipe form one group
    assert groups["finetune", "sst2", "vanilla (mlm-pretrained)"]["seeds"] == [0, 1]
    table = (runs_dir / "results.md").read_text()
    for title in ("## Fine-tuning", "## Multitask", "## MLM pre-training", "## Each method against its baseline"):
        assert title in table
    assert "2.29 mlm_loss (Deshpande & Narasimhan 2020, Tab. 3" in table  # the paper column of AG's row


def test_pretraining_and_its_fine_tunes_are_paired_against_plain_mlm(runs_dir):
    rows = collect.collect(runs_dir)
    tests = {(t["kind"], t["method"]): t for t in collect.paired_tests(rows)}
    loss = {(r["method"], r["config"]["seed"]): r["metrics"]["held-out mlm_loss"] for r in rows if r["kind"] == "pretrain"}
    ag = tests["pretrain", "ag (ag_head_types=0,1,1,1)"]  # a method option off its default names the row
    assert ag["baseline"] == "mlm" and ag["pairs"] == 2 and ag["lower_is_better"]
    assert math.isclose(ag["mean_difference"], (loss["ag", 0] + loss["ag", 1] - loss["mlm", 0] - loss["mlm", 1]) / 2)
    downstream = tests["finetune", "vanilla (ag-pretrained)"]
    assert downstream["baseline"] == "vanilla (mlm-pretrained)" and downstream["pairs"] == 2


def write(folder, result: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(result))


def pretrain_result(method: str, seed: int, loss: float) -> dict:
    return {"kind": "pretrain", "status": "complete", "method": method, "eval_curve": [],
            "config": {"method": method, "seed": seed, "output_dir": f"x/{method}{seed}"},
            "final": {"eval_mlm_loss": loss, "eval_ag_loss": 0.1}}


def test_a_paired_test_on_a_loss_prefers_the_lower_value_and_holm_corrects_the_table(tmp_path):
    mlm, ag = [3.0, 3.2, 3.1, 3.4], [2.8, 3.1, 2.9, 3.1]  # AG lower in every seed: better
    for seed, (a, b) in enumerate(zip(mlm, ag)):
        write(tmp_path / f"mlm{seed}", pretrain_result("mlm", seed, a))
        write(tmp_path / f"ag{seed}", pretrain_result("ag", seed, b))
    accuracy = {"vanilla": [0.80, 0.82, 0.81, 0.79], "asa": [0.79, 0.80, 0.82, 0.77]}
    for method, values in accuracy.items():
        for seed, value in enumerate(values):
            write(tmp_path / f"{method}{seed}", {
                "kind": "finetune", "status": "complete", "task": "sst2", "main_metric": "accuracy",
                "config": {"task": "sst2", "method": method, "seed": seed, **get_method(method).options().to_dict()},
                "dev": {"accuracy": value}})
    tests = {t["method"]: t for t in collect.paired_tests(collect.collect(tmp_path))}
    assert tests["ag"]["mean_difference"] < 0 and tests["ag"]["better"] is True
    assert tests["asa"]["mean_difference"] < 0 and tests["asa"]["better"] is False  # accuracy: higher is better
    p = {m: stats.ttest_rel(*pair).pvalue for m, pair in (("ag", (ag, mlm)), ("asa", tuple(accuracy.values())[::-1]))}
    assert math.isclose(tests["ag"]["p_value"], p["ag"]) and math.isclose(tests["asa"]["p_value"], p["asa"])
    low, high = sorted(p.values())
    holm = {m: (2 * v if v == low else max(2 * low, high)) for m, v in p.items()}  # m = 2 tests
    assert all(math.isclose(tests[m]["p_holm"], min(1.0, holm[m])) for m in p)



def test_a_label_names_the_options_off_todays_defaults_that_its_task_reads(tmp_path):
    """An ASA run that cut rows clean, clipped all and took the squared divergence (as the archived runs from
    before those options did) is labelled with what sets it apart from today's defaults. A label leaves out an
    option its task does not read (the regression divergence on SST-2), and a vanilla run reads no method's options."""
    today = get_method("asa").options().to_dict()
    said = {**today, "asa_cut_row": "clean", "asa_clip_scope": "all", "asa_regression_divergence": "squared"}
    runs = {"said": ("sst2", "asa", said), "today": ("sst2", "asa", today), "stsb": ("stsb", "asa", said),
            "vanilla": ("sst2", "vanilla", {})}
    for name, (task, method, options) in runs.items():
        write(tmp_path / name, {"kind": "finetune", "status": "complete", "task": task, "main_metric": "accuracy",
                                "config": {"task": task, "method": method, "seed": 0, **options},
                                "dev": {"accuracy": 0.8}})
    labels = {row["run"]: collect._method_label(row) for row in collect.collect(tmp_path)}
    was = "asa (asa_clip_scope=all, asa_cut_row=clean"
    assert labels == {"said": was + ")", "today": "asa", "vanilla": "vanilla",
                      "stsb": was + ", asa_regression_divergence=squared)"}


def test_seed_points_keep_a_tasks_recipes_apart_and_count_a_run_in_two_folders_once(tmp_path):
    def finetune_run(folder, task, method, seed, lr, value):
        write(tmp_path / folder, {"kind": "finetune", "status": "complete", "task": task, "main_metric": "accuracy",
                                  "config": {"task": task, "method": method, "seed": seed, "lr": lr,
                                             "output_dir": folder, **get_method(method).options().to_dict()},
                                  "dev": {"accuracy": value}})
    for seed in (0, 1):
        finetune_run(f"a{seed}", "sst2", "vanilla", seed, 1e-4, 0.80 + seed / 100)
        finetune_run(f"b{seed}", "sst2", "vanilla", seed, 5e-5, 0.70 + seed / 100)
        finetune_run(f"c{seed}", "rte", "vanilla", seed, 3e-5, 0.55)  # one recipe on its task: no settings shown
    finetune_run("copy_of_a0", "sst2", "vanilla", 0, 1e-4, 0.80)
    finetune_run("d0", "sst2", "asa", 0, 1e-4, 0.81)
    points = collect.seed_points(collect.collect(tmp_path))
    by_label = {}
    for point in points:
        by_label.setdefault((point["task"], point["label"]), []).append(point["value"])
    expected = {("sst2", "vanilla [lr=0.0001]"): [80.0, 81.0], ("sst2", "vanilla [lr=5e-05]"): [70.0, 71.0],
                ("sst2", "asa [lr=0.0001]"): [81.0], ("rte", "vanilla"): [55.0, 55.0]}
    assert by_label.keys() == expected.keys()
    assert all(by_label[key] == pytest.approx(values) for key, values in expected.items())
    assert {point["metric"] for point in points} == {"dev accuracy (%)"}  # the tables' scale: percent


@pytest.mark.parametrize("content", ['{"status": "comp', '{"accuracy": 0.9}', "[1, 2]",
                                     '{"kind": "distillation", "status": "complete"}'])
def test_a_truncated_or_foreign_metrics_file_is_skipped_with_one_line_naming_it(tmp_path, capsys, content):
    write(tmp_path / "good", pretrain_result("mlm", 0, 3.0))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "metrics.json").write_text(content)
    rows = collect.collect(tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert [r["run"] for r in rows] == ["good"]
    assert len(err) == 1 and err[0].startswith(f"warning: skipping {tmp_path / 'odd' / 'metrics.json'}: ")


def test_a_file_is_of_the_kind_it_names_and_of_none_without_one():
    assert [kind_of({"kind": name, "config": {}}).name for name in ("finetune", "multitask", "pretrain")] == \
        ["finetune", "multitask", "pretrain"]
    assert kind_of({"config": {}, "task": "sst2", "dev": {}}) is None  # no kind: not guessed from its fields
    assert kind_of({"kind": "other", "config": {}, "task": "sst2"}) is None
    assert kind_of({"kind": ["finetune"], "config": {}}) is None


def finetune_result(task: str, method: str, seed: int, dev: dict, **config) -> dict:
    return {"kind": "finetune", "status": "complete", "task": task, "main_metric": next(iter(dev)),
            "config": {"task": task, "method": method, "seed": seed, **get_method(method).options().to_dict(),
                       **config}, "dev": dev}


def test_the_table_shows_every_score_in_percent_like_the_papers_and_counts_without_decimals(tmp_path):
    write(tmp_path / "a", finetune_result("sst2", "vanilla", 0, {"accuracy": 0.7925}))
    write(tmp_path / "b", finetune_result("squad", "vanilla", 0, {"exact_match": 30.9759, "f1": 46.2056}))
    write(tmp_path / "c", finetune_result("wnut17", "vanilla", 0, {"f1": 0.5124, "truncated_words": 8}))
    table = collect.kind_table(collect.collect(tmp_path))
    row = {line.split(" | ")[0].strip("| "): line for line in table if line.startswith("| ")}
    assert "| 79.25 |" in row["sst2"]  # a fraction x 100
    assert "| 30.98 | 46.21 |" in row["squad"]  # SQuAD's official scores are in percent already: not x 100
    assert "| 51.24 |" in row["wnut17"] and "| 8 |" in row["wnut17"]  # entity F1 x 100; a count stays whole
    assert "0.79" not in row["sst2"] and "8.0000" not in row["wnut17"]


def test_better_is_said_only_where_a_test_can_say_it(tmp_path):
    for seed, (base, asa) in enumerate([(0.80, 0.82)]):  # one pair: no test, so no "yes"
        write(tmp_path / f"v{seed}", finetune_result("sst2", "vanilla", seed, {"accuracy": base}))
        write(tmp_path / f"a{seed}", finetune_result("sst2", "asa", seed, {"accuracy": asa}))
    tests = collect.paired_tests(collect.collect(tmp_path))
    assert [collect.better_cell(t) for t in tests] == ["no test (1 pair)"]
    assert "+2.00 points" in collect.tests_table(tests)[2]  # the difference on the table's scale
    significant = {"better": True, "p_value": 0.001, "p_holm": 0.01, "pairs": 5}
    assert collect.better_cell(significant) == "yes"
    assert collect.better_cell({**significant, "better": False}) == "no, worse"
    assert collect.better_cell({**significant, "p_holm": 0.2}) == "not shown"


def test_rows_of_one_method_and_task_say_which_recipe_sets_them_apart(tmp_path):
    for notebook, samples in (("01_ssa", 1024), ("03_ssaf", 2000)):
        write(tmp_path / notebook / "smoke" / "vanilla", finetune_result(
            "sst2", "vanilla", 0, {"accuracy": 0.8}, max_train_samples=samples))
    notes = collect.recipe_notes(collect.collect(tmp_path))
    assert notes == ["- vanilla on sst2, 2 rows: max_train_samples 1024 (01_ssa); max_train_samples 2000 (03_ssaf)"]
    assert notes[0] in collect.kind_table(collect.collect(tmp_path))


def test_a_table_per_family_shows_each_row_only_the_settings_it_reads_and_that_vary(tmp_path):
    """ASA's options are no column when every ASA run used the same ones (vanilla saves none); the tagging
    divergence is read on tagging tasks only; each family's table has its own metrics; a run's own file is named
    relative to its folder, so two seeds that read their own copy group together."""
    for seed in (0, 1):
        write(tmp_path / f"v{seed}", finetune_result("sst2", "vanilla", seed, {"accuracy": 0.8}))
        run = tmp_path / f"a{seed}"
        write(run, finetune_result("sst2", "asa", seed, {"accuracy": 0.81}, train_file=str(run / "train.tsv")))
        write(tmp_path / f"w{seed}", finetune_result("wnut17", "asa", seed, {"f1": 0.5},
                                                     asa_tagging_divergence="kl"))
    table = collect.kind_table(collect.collect(tmp_path))
    sentence, tagging = "\n".join(table).split("### tagging tasks")
    assert sentence.startswith("### sentence tasks")
    header = next(line for line in sentence.splitlines() if line.startswith("| task"))
    assert "asa_tau" not in header and "asa_tagging_divergence" not in header and "dev f1" not in header
    assert "train_file" in header and "| train.tsv |" in sentence  # relative to its run folder (vanilla's: None)
    assert "| 2 |" in next(line for line in sentence.splitlines() if "| asa |" in line)  # both seeds, one group
    tagging_header = next(line for line in tagging.splitlines() if line.startswith("| task"))
    assert "dev accuracy" not in tagging_header and "dev f1" in tagging_header
