"""Multitask BERT: schedule properties, one task = finetune, resume, a real three-task run, bad input."""
import json
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from sentiment_words import BAD, FILLER, GOOD

from course_lib import cli
from course_lib.runtime.errors import UsageError
from course_lib.training import loop
from course_lib.training import multitask
from course_lib.training.config import MultitaskConfig
from course_lib.training.finetune import finetune
from course_lib.training.multitask import task_config, train_multitask
from course_lib.training.task_schedules import epoch_plan, schedule_alpha, task_schedule

SIZES = [7, 3, 5]  # batches per task


@pytest.fixture(scope="module")
def toy_glue(keyword_glue, tmp_path_factory) -> Path:
    """SST-2 (one sentiment word decides), RTE and STS-B in their GLUE TSV layouts, small enough for seconds."""
    root = tmp_path_factory.mktemp("toy_glue")
    (root / "SST-2").symlink_to(keyword_glue / "SST-2")
    rng = random.Random(1)
    for split, n in (("train", 96), ("dev", 32)):
        rte, sts = ["index\tsentence1\tsentence2\tlabel"], [
            "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"]
        for i in range(n):
            a = rng.choices(FILLER + GOOD + BAD, k=rng.randint(4, 10))
            b = rng.sample(a, k=rng.randint(1, len(a))) if rng.random() < 0.5 else rng.choices(FILLER, k=4)
            rte.append(f"{i}\t{' '.join(a)}\t{' '.join(b)}\t{'entailment' if set(b) <= set(a) else 'not_entailment'}")
            shared = len(set(a) & set(b)) / len(set(a) | set(b))
            sts.append(f"{i}\tg\tf\t2012\t{i}\ts\ts\t{' '.join(a)}\t{' '.join(b)}\t{5 * shared:.3f}")
        for folder, lines in (("RTE", rte), ("STS-B", sts)):
            (root / folder).mkdir(exist_ok=True)
            (root / folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return root


def numbers(result: dict) -> dict:
    """metrics.json without wall-clock times (the only thing allowed to differ) and the output folder."""
    result = json.loads(json.dumps(result))
    result.pop("timing")
    result["config"].pop("output_dir")
    for entry in result["history"]:
        for task in entry.get("tasks", {"": entry}).values():
            task.pop("label_seconds", None)
    return result


# ----------------------------------------------------------------------------------------------
# The schedule


def test_round_robin_visits_each_task_equally():
    order = task_schedule("round_robin", SIZES, seed=0, epoch=0, epochs=2)
    assert len(order) == sum(SIZES)
    assert Counter(order) == {0: 5, 1: 5, 2: 5}
    assert all(sorted(order[i:i + 3]) == [0, 1, 2] for i in range(0, len(order), 3))


def test_proportional_counts_match_sizes_and_order_depends_on_seed_and_epoch():
    order = task_schedule("proportional", SIZES, seed=0, epoch=0, epochs=2)
    assert Counter(order) == dict(enumerate(SIZES))
    assert order == task_schedule("proportional", SIZES, seed=0, epoch=0, epochs=2)
    assert order != task_schedule("proportional", SIZES, seed=0, epoch=1, epochs=2)
    assert order != task_schedule("proportional", SIZES, seed=1, epoch=0, epochs=2)


def test_annealed_goes_from_proportional_towards_uniform():
    sizes = [60, 6, 30]
    assert [schedule_alpha("annealed", e, 5, 0.2) for e in range(5)] == pytest.approx([1, 0.8, 0.6, 0.4, 0.2])
    assert task_schedule("annealed", sizes, 3, 0, 5) == task_schedule("proportional", sizes, 3, 0, 5)
    for epoch in range(5):
        counts = Counter(task_schedule("annealed", sizes, 3, epoch, 5))
        alpha = schedule_alpha("annealed", epoch, 5, 0.2)
        expected = [96 * n ** alpha / sum(m ** alpha for m in sizes) for n in sizes]
        assert sum(counts.values()) == 96 and all(abs(counts[k] - expected[k]) < 1 for k in range(3))
    assert Counter(task_schedule("annealed", sizes, 3, 4, 5))[1] > 3 * 6  # the small task gains


@pytest.mark.parametrize("sizes, epoch, counts", [
    # alpha 0.2 (annealed's last of 5 epochs): quotas 96 N^0.2 / sum = 38.377, 24.214, 33.409; the floors 38 + 24
    #   + 33 leave 1 step, which goes to the largest remainder, .409 (the smallest, .214, would give 38, 25, 33)
    ([60, 6, 30], 4, [38, 24, 34]),
    # alpha 0.4 (epoch 3 of 5): quotas 12 N^0.4 / sum = 5.176, 3.136, 3.688; floors 5 + 3 + 3, the step to .688
    ([7, 2, 3], 3, [5, 3, 4]),
])
def test_steps_left_by_the_floors_go_to_the_largest_remainders(sizes, epoch, counts):
    order = task_schedule("annealed", sizes, seed=0, epoch=epoch, epochs=5)
    assert [Counter(order)[k] for k in range(len(sizes))] == counts


@pytest.mark.parametrize("schedule", ["round_robin", "proportional", "annealed"])
def test_each_task_reads_whole_shuffled_passes_in_order(schedule):
    """Across epochs, a task's batches are its passes one after another: every row once per pass."""
    lengths = [[5] * 20, [5] * 9, [5] * 15]  # 7, 3 and 5 batches of 3
    read = {k: [] for k in range(3)}
    for epoch in range(3):
        plan = epoch_plan(schedule, lengths, 3, seed=0, epoch=epoch, epochs=3)
        assert len(plan) == sum(SIZES)
        for k, rows in plan:
            read[k].extend(rows)
    for k, lens in read.items():
        n = len(lengths[k])
        for start in range(0, len(lens) - n + 1, n):
            assert sorted(lens[start:start + n]) == list(range(n))
    if schedule == "proportional":
        assert all(len(rows) == 3 * len(lengths[k]) for k, rows in read.items())  # three epochs, three passes


# ----------------------------------------------------------------------------------------------
# Training


def tiny(model_dir, glue_dir, out, **extra) -> MultitaskConfig:
    return MultitaskConfig(**{"tasks": "sst2,rte,stsb", "model": str(model_dir), "glue_dir": str(glue_dir),
                              "output_dir": str(out), "epochs": 2, "batch_size": 16, "max_len": 32, "lr": 1e-3,
                              **extra})


def test_one_encoder_and_a_head_per_task_from_the_registry(tiny_model_dir):
    from course_lib.methods.ssa import SSAClassifier
    from course_lib.model.weights import load_pretrained

    encoder, tokenizer = load_pretrained(tiny_model_dir)
    model = multitask.build_multitask(MultitaskConfig(tasks="sst2,rte,stsb", ssa="rte"), encoder, tokenizer)
    assert all(head.encoder is model.encoder for head in model.heads.values())
    assert isinstance(model.heads["rte"], SSAClassifier) and not isinstance(model.heads["sst2"], SSAClassifier)
    n_encoder = sum(p.numel() for p in encoder.parameters())
    n_heads = sum(p.numel() for n, p in model.named_parameters() if n.startswith("heads."))
    assert sum(p.numel() for p in model.parameters()) == n_encoder + n_heads  # the encoder counted once
    batch = tokenizer(["a fine film", "dull"], padding=True, return_tensors="pt")
    widths = {name: model(name, batch["input_ids"], batch["attention_mask"]).logits.shape for name in model.heads}
    assert widths == {"sst2": (2, 2), "rte": (2, 2), "stsb": (2, 1)}  # STS-B is a regressor
    state = model.unique_state_dict()
    assert sum(v.numel() for k, v in state.items() if "weight" in k or "bias" in k) == n_encoder + n_heads


@pytest.mark.parametrize("ssa, method", [("none", "ssa-co"), ("all", "ssa-co"), ("all", "bert-mask")])
def test_one_task_is_exactly_finetune(tiny_model_dir, keyword_glue, tmp_path, ssa, method):
    """With one task, every schedule is 'all steps to it' and its batches are finetune's: the same model
    (same RNG draws), the same steps, so the same numbers, with the task's method on (SSA-Co, or another one of
    the registry) or off (vanilla)."""
    cfg = tiny(tiny_model_dir, keyword_glue, tmp_path / "multi", tasks="sst2", ssa=ssa, schedule="annealed",
               ssa_method=method)
    multi = numbers(train_multitask(cfg))
    single = numbers(finetune(task_config(cfg, "sst2")))
    assert single["config"]["method"] == (method if ssa == "all" else "vanilla")
    assert multi["config"]["ssa_method"] == method
    for m, s in zip(multi["history"], single["history"], strict=True):
        task = m["tasks"]["sst2"]
        assert task.pop("steps") == 12 and s.pop("epoch") == m["epoch"]
        assert task == s and m["train_loss"] == s["train_loss"]
    assert multi["dev"] == {"sst2": {"dev": single["dev"]}} and multi["overall"] == single["dev"]["accuracy"]
    if ssa == "all" and method == "ssa-co":
        assert single["history"][1]["labelled"] > 0 and "ssa_loss" in single["history"][1]


def test_resume_after_interruption_matches_an_uninterrupted_run(tiny_model_dir, toy_glue, tmp_path, monkeypatch,
                                                                capsys):
    extra = {"ssa": "sst2,stsb", "schedule": "annealed", "save_every": 4}
    reference = train_multitask(tiny(tiny_model_dir, toy_glue, tmp_path / "ref", **extra))
    steps = reference["train_steps"] // 2  # per epoch: 12 + 6 + 6 batches of 16
    real_step, calls = loop.guarded_step, []

    def dies_at_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == steps + 7:  # mid epoch 2: its SSA labels are cached, the last checkpoint is at step 28
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "guarded_step", dies_at_step)
    cfg = tiny(tiny_model_dir, toy_glue, tmp_path / "killed", **extra)
    with pytest.raises(KeyboardInterrupt):
        train_multitask(cfg)
    monkeypatch.undo()
    capsys.readouterr()
    resumed = train_multitask(cfg)
    assert f"at epoch 2, step {28 - steps}" in capsys.readouterr().out
    assert numbers(resumed) == numbers(reference)
    assert set(reference["dev"]) == {"sst2", "rte", "stsb"}
    assert reference["history"][1]["tasks"]["sst2"]["labelled"] > 0  # SSA probing ran in epoch 2
    assert "ssa_loss" in reference["history"][1]["tasks"]["stsb"] and "ssa_loss" not in \
        reference["history"][1]["tasks"]["rte"]
    assert (tmp_path / "killed" / "model.safetensors").exists() and not (tmp_path / "killed" / "checkpoint.pt").exists()


@pytest.mark.glue
@pytest.mark.slow
def test_three_real_glue_tasks_loss_falls_and_each_task_is_scored(glue_dir, tmp_path):
    """SST-2 with SSA, RTE (the paraphrase slot: a pair-classification task) and STS-B on the real MiniLM.

    Too short to ask for accuracy; the loss must fall, and metrics.json must score every task its own way."""
    cfg = MultitaskConfig(tasks="sst2,rte,stsb", glue_dir=str(glue_dir), output_dir=str(tmp_path),
                          max_train_samples=64, max_eval_samples=64, epochs=2, max_len=32, batch_size=16,
                          lr=1e-4, schedule="round_robin", ssa="sst2")
    train_multitask(cfg)
    result = json.loads((tmp_path / "metrics.json").read_text())
    first, last = result["history"]
    assert last["train_loss"] < first["train_loss"]
    assert last["tasks"]["stsb"]["train_loss"] < first["tasks"]["stsb"]["train_loss"]  # MSE, from about 9
    assert result["status"] == "complete" and last["tasks"]["sst2"]["probes"] > 0
    assert set(result["dev"]["sst2"]["dev"]) == set(result["dev"]["rte"]["dev"]) == {"accuracy"}
    assert set(result["dev"]["stsb"]["dev"]) == {"pearson", "spearmanr", "combined_score"}
    primary = [result["dev"]["sst2"]["dev"]["accuracy"], result["dev"]["rte"]["dev"]["accuracy"],
               result["dev"]["stsb"]["dev"]["pearson"]]
    assert result["overall"] == pytest.approx(sum(primary) / 3)


def test_each_task_whose_dev_predictions_are_constant_is_named(tiny_model_dir, toy_glue, tmp_path, monkeypatch,
                                                               capsys):
    """A classifier that answers one class and a regressor that answers one score: both flagged per task, in
    the log and in metrics.json, through the evaluation finetune uses too."""
    from course_lib.training import finetune as train

    monkeypatch.setattr(train, "predict", lambda model, features, *a, **k: torch.full((len(features),), 1.0))
    result = train_multitask(tiny(tiny_model_dir, toy_glue, tmp_path, tasks="sst2,stsb", epochs=1))
    sst2 = "sst2 dev: all 64 predictions are class 1: the scores are those of a constant guess"
    assert result["warnings"][0] == sst2 and result["warnings"][1].startswith("stsb dev: all 32 predictions are 1 (")
    assert [w for t in ("sst2", "stsb") for w in result["history"][0]["tasks"][t]["warnings"]] == result["warnings"]
    assert json.loads((tmp_path / "metrics.json").read_text())["warnings"] == result["warnings"]
    err = capsys.readouterr().err
    assert f"warning: {sst2}\n" in err and "warning: stsb dev: all 32 predictions are 1 (std 0, " in err


# ----------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("values, message", [
    ({"tasks": "sst2,mrcp"}, "unknown task 'mrcp' (valid: anli, cola, conll2003, cs224n_cfimdb, cs224n_para,"),
    ({"schedule": "random"}, "unknown schedule 'random' (valid: round_robin, proportional, annealed)"),
    ({"ssa": "sst2,cola"}, "unknown SSA task 'cola' (valid: all, none, rte, sst2, stsb)"),
    ({"tasks": "sst2,SST-2"}, "must name distinct task presets"),
    ({"pair_encoding": "siamese"}, "unknown pair_encoding 'siamese' (valid: separate, cross)"),
    ({"option": "freeze"}, "unknown option 'freeze' (valid: finetune, pretrain)"),
    ({"tasks": "sst2,stsb", "cs224n": True}, "--cs224n trains cs224n_sst,cs224n_para,cs224n_sts"),
    ({"cs224n": True, "ssa": "cs224n_para"}, "SSA on cs224n_para needs --pair-encoding cross"),
    ({"schedule_alpha_end": 1.5}, "MultitaskConfig.schedule_alpha_end must be in [0, 1], got 1.5"),
    ({"epoch": 2}, "unknown MultitaskConfig option 'epoch'"),
    ({"ssa_method": "asa"}, "unknown multitask method 'asa' (valid: bert-mask, mean-pool, ssa-co, ssa-hybrid,"),
    ({"ssa_method": "bert-mask", "ssa_cls_weight": 0.3}, "option 'ssa_cls_weight' belongs to method ssa-hybrid"),
])
def test_bad_config_names_the_value_and_the_valid_ones(values, message):
    with pytest.raises(UsageError) as err:
        MultitaskConfig.from_dict(values)
    assert message in str(err.value)


def test_cli_runs_and_reports_bad_input_in_one_line(tiny_model_dir, toy_glue, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert cli.main(["multitask", "--schedule", "magic"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: unknown schedule 'magic' (valid: round_robin, proportional, annealed)"
    args = ["multitask", "--model", str(tiny_model_dir), "--glue-dir", str(toy_glue), "--output-dir", str(tmp_path),
            "--tasks", "sst2,stsb", "--epochs", "1", "--max-len", "32", "--batch-size", "32", "--ssa", "stsb"]
    assert cli.main(args) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(printed["dev"]) == {"sst2", "stsb"} and 0 <= printed["overall"] <= 1


def test_a_skipped_step_is_left_out_of_its_tasks_and_the_epochs_mean_loss(tiny_model_dir, toy_glue, tmp_path,
                                                                           monkeypatch):
    """on_nonfinite_loss=skip: one step's loss made NaN is skipped; each task's train_loss and the epoch's are means
    over the steps taken, as recorded here; the task's `steps` still counts its share of the epoch."""
    real, taken = multitask.batch_loss, []

    def one_bad_step(head, *args, **kwargs):
        loss, stats = real(head, *args, **kwargs)
        name = next(n for n, h in model_heads.items() if h is head)
        if len(taken) == 2 and not hasattr(one_bad_step, "done"):
            one_bad_step.done = name
            return loss * float("nan"), stats
        taken.append((name, loss.item()))
        return loss, stats

    model_heads = {}
    real_build = multitask.MultitaskBert.__init__

    def remember_heads(self, *args, **kwargs):
        real_build(self, *args, **kwargs)
        model_heads.update(self.heads)

    monkeypatch.setattr(multitask.MultitaskBert, "__init__", remember_heads)
    monkeypatch.setattr(multitask, "batch_loss", one_bad_step)
    result = train_multitask(tiny(tiny_model_dir, toy_glue, tmp_path / "run", tasks="sst2,stsb", epochs=1,
                                  on_nonfinite_loss="skip"))
    epoch = result["history"][0]
    assert result["skipped_steps"] == 1 and sum(t["steps"] for t in epoch["tasks"].values()) == len(taken) + 1
    assert epoch["train_loss"] == pytest.approx(sum(v for _, v in taken) / len(taken), rel=1e-6)
    for name, task in epoch["tasks"].items():
        mine = [v for n, v in taken if n == name]
        assert task["train_loss"] == pytest.approx(sum(mine) / len(mine), rel=1e-6), name
