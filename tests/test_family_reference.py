"""`python -m benchmarks reference`'s pieces: transformers' tagging and multiple-choice models enter a run with our head's initial
weights, so both runs start from the same function; and the binomial test against chance."""
import json

import pytest
import torch

from benchmarks.family_reference import HFTaskModel, above_chance, build_reference
from course_lib.model.weights import load_pretrained
from course_lib.tasks.registry import get_family, run_task
from course_lib.training.config import FinetuneConfig


def _conll(path, sentences):
    path.write_text("\n\n".join("\n".join(f"{w}\t{t}" for w, t in s) for s in sentences) + "\n", encoding="utf-8")
    return str(path)


def _dream(path):
    entries = [[["M: Where is the bus stop?", "W: Next to the bank, on Main Street."],
                [{"question": "Where is the stop?", "choice": ["Main Street", "the park", "the station"],
                  "answer": "Main Street"}], "d1"]]
    path.write_text(json.dumps(entries), encoding="utf-8")
    return str(path)


@pytest.fixture
def tagging_config(tmp_path, minilm_dir):
    sentences = [[("Paris", "B-location"), ("is", "O"), ("big", "O")], [("Bob", "B-person"), ("ran", "O")]]
    files = {name: _conll(tmp_path / f"{name}.conll", sentences) for name in ("train", "dev")}
    return FinetuneConfig(task="custom", task_type="tagging", train_file=files["train"],
                          validation_file=files["dev"], model=str(minilm_dir), output_dir=str(tmp_path / "run"))


@pytest.fixture
def choice_config(tmp_path, minilm_dir):
    files = {name: _dream(tmp_path / f"{name}.json") for name in ("train", "dev")}
    return FinetuneConfig(task="custom", task_type="multiple-choice", train_file=files["train"],
                          validation_file=files["dev"], model=str(minilm_dir), output_dir=str(tmp_path / "run"))


@pytest.mark.parametrize("config", ["tagging_config", "choice_config"])
def test_transformers_model_starts_as_our_plain_head_does(config, request):
    cfg = request.getfixturevalue(config)
    task = run_task(cfg)
    family = get_family(task.family)
    models = {}
    for name, build in (("ours", family.build_head), ("reference", build_reference)):
        torch.manual_seed(cfg.seed)  # as finetune: seed, load the encoder, build the task model
        encoder, tokenizer = load_pretrained(cfg.model)
        models[name] = build(cfg, encoder, task, tokenizer).eval()
    ours, reference = models["ours"], models["reference"]  # the reference draws our head first: the same start
    assert isinstance(reference, HFTaskModel)
    torch.testing.assert_close(reference.model.classifier.weight, ours.classifier.weight, rtol=0, atol=0)
    batch = family.collate(family.encode(family.read(task, "dev", cfg), tokenizer, cfg, training=False),
                           tokenizer.pad_token_id)
    with torch.no_grad():
        mine = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"])
        theirs = reference(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels=batch["labels"])
    torch.testing.assert_close(theirs.logits, mine.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(theirs.loss, mine.loss, rtol=1e-4, atol=1e-5)


def test_above_chance_is_a_one_sided_binomial_test():
    assert above_chance(0.45, 1000, 3) < 1e-12  # 450 of 1,000 against 1/3: far above chance
    assert 0.4 < above_chance(1 / 3, 999, 3) < 0.6  # exactly chance: no evidence either way
    assert above_chance(0.2, 1000, 3) > 0.999  # below chance is no evidence of being above it
