"""The multiple-choice family: DREAM, HellaSWAG and SWAG files read strictly, one pair encoded per choice with the
context cut and the choice kept, our head against transformers' BertForMultipleChoice on the real weights, and
fine-tuning end to end with the methods that do and do not apply to it."""
import csv
import json
import math
import os
import random
import sys
import types
from pathlib import Path

import pytest
import torch
import transformers

from course_lib.model.heads import MultipleChoiceHead
from course_lib.model.weights import load_pretrained
from course_lib.readers import choice_files
from course_lib.readers.choice_files import ChoiceQuestion
from course_lib.model.model_folder import load_tokenizer
from course_lib import cli
from course_lib.runtime.errors import UsageError
from course_lib.tasks import multiple_choice as mc
from course_lib.tasks.registry import get_family, get_task, run_task
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune

DREAM_DIR = os.environ.get("DREAM_DIR")
needs_dream = pytest.mark.skipif(not DREAM_DIR, reason="needs the real DREAM files: set DREAM_DIR to their folder "
                                                       "(CI sets it)")


def write_dream(path: Path, entries) -> Path:
    path.write_text(json.dumps(entries))
    return path


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_swag(path: Path, rows, header=("", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
                                         "ending0", "ending1", "ending2", "ending3", "label")) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


DIALOGUE = [["M: Shall we take the bus?", "W: No, let's walk, it is sunny."],
            [{"question": "How will they go?", "choice": ["By bus.", "On foot.", "By car."], "answer": "On foot."},
             {"question": "What is the weather like?", "choice": ["Rainy.", "Sunny.", "Windy."], "answer": "Sunny."}],
            "7-42"]
ENDINGS = {"ind": 24, "ctx": "A man is kneeling on a frozen lake. He", "label": "3",
           "endings": ["eats a fish.", "flies away.", "sings.", "drills a hole in the ice."]}
SWAG_ROW = {"": "0", "video-id": "v1", "fold-ind": "5", "sent1": "Students lower their eyes.",
            "sent2": "The teacher", "ending0": "sings.", "ending1": "hands out the exams.", "ending2": "flies.",
            "ending3": "melts.", "label": "1"}


# ----------------------------------------------------------------------------------------------
# Readers


def test_dream_questions_take_the_dialogue_as_context_and_the_answer_text_as_label(tmp_path):
    questions = choice_files.read_dream(write_dream(tmp_path / "dev.json", [DIALOGUE]))
    (_, bus), (_, weather) = questions
    assert (bus.id, weather.id) == ("7-42-0", "7-42-1")
    assert bus.context == "M: Shall we take the bus?\nW: No, let's walk, it is sunny."
    assert bus.question == "How will they go?" and bus.choices == ("By bus.", "On foot.", "By car.")
    assert (bus.label, weather.label) == (1, 1)


def test_hellaswag_lines_take_ctx_endings_and_a_label_given_as_int_or_text(tmp_path):
    no_ind = {k: v for k, v in ENDINGS.items() if k != "ind"} | {"label": 0}
    path = tmp_path / "hellaswag_val.jsonl"
    path.write_text(json.dumps(ENDINGS) + "\n\n" + json.dumps(no_ind) + "\n")  # a blank line is skipped
    (_, first), (where, second) = choice_files.read_hellaswag(path)
    assert (first.id, first.context, first.question, first.label) == ("24", ENDINGS["ctx"], "", 3)
    assert first.choices == tuple(ENDINGS["endings"])
    assert (second.id, second.label, where) == ("3", 0, f"{path}:3")  # no ind: the line number


def test_swag_rows_take_sent1_as_context_and_continue_sent2(tmp_path):
    path = write_swag(tmp_path / "val.csv", [SWAG_ROW, {**SWAG_ROW, "label": "3"}])
    (where, first), (_, second) = choice_files.read_swag(path)
    assert (first.id, first.context, first.question, first.label, second.label) == (
        "0", "Students lower their eyes.", "The teacher", 1, 3)
    assert first.choices[1] == "hands out the exams." and where == f"{path}:2"
    assert mc._second(first, first.choices[1]) == "The teacher hands out the exams."  # the encoded second segment


BAD_INPUTS = [
    ("dev.json", lambda p: write_dream(p, [[DIALOGUE[0], [{**DIALOGUE[1][0], "answer": "By boat."}], "7-42"]]),
     r"dev\.json: entry 0 question 0: answer 'By boat\.' is not one of its choices"),
    ("dev.json", lambda p: write_dream(p, [[DIALOGUE[0], [{"question": "?", "answer": "x"}], "7-42"]]),
     r"dev\.json: entry 0 question 0: missing 'choice' \(expected question, choice, answer\)"),
    ("dev.json", lambda p: write_dream(p, [["just text"]]),
     r"dev\.json: entry 0: expected \[turns, questions, dialogue_id\]"),
    ("val.jsonl", lambda p: write_jsonl(p, [ENDINGS, {**ENDINGS, "label": 5}]),
     r"val\.jsonl:2: label 5 is out of range \(valid: 0 to 3\)"),
    ("val.jsonl", lambda p: write_jsonl(p, [{"ctx": "c", "label": 0}]),
     r"val\.jsonl:1: missing 'endings' \(expected ctx, endings, label\)"),
    ("test.jsonl", lambda p: write_jsonl(p, [ENDINGS, {k: v for k, v in ENDINGS.items() if k != "label"}]),
     r"test\.jsonl:2: no label \(valid: 0 to 3\); .* give a labelled file"),
    ("val.jsonl", lambda p: write_jsonl(p, [{**ENDINGS, "label": "three"}]),
     r"val\.jsonl:1: label 'three' is not a choice index \(valid: 0 to 3\)"),
    ("val.jsonl", lambda p: write_jsonl(p, [ENDINGS, {**ENDINGS, "endings": ENDINGS["endings"][:3], "label": 0}]),
     r"val\.jsonl:2: 3 choices, but .*val\.jsonl:1 has 4 \(every question of a split needs the same number\)"),
    ("val.jsonl", lambda p: p.write_text('{"ctx": "c",\n'), r"val\.jsonl:1: not a JSON line"),
    ("val.csv", lambda p: write_swag(p, [SWAG_ROW, {**SWAG_ROW, "label": "-1"}]),
     r"val\.csv:3: label -1 is out of range \(valid: 0 to 3\)"),
    ("val.csv", lambda p: write_swag(p, [SWAG_ROW], header=("sent1", "sent2", "ending0", "ending1", "ending2",
                                                           "ending3")),
     r"val\.csv:1: missing 'label' \(expected sent1, sent2, ending0\.\.ending3, label\)"),
    ("val.csv", lambda p: write_swag(p, []), r"val\.csv: holds no questions"),
]


@pytest.mark.parametrize("name, write, message", BAD_INPUTS)
def test_a_bad_file_is_one_line_naming_the_file_and_where(name, write, message, tmp_path):
    path = tmp_path / name
    write(path)
    cfg = FinetuneConfig(task="custom", task_type="multiple-choice", train_file=str(path), validation_file=str(path))
    with pytest.raises(UsageError, match=message) as err:
        get_family(mc.MULTIPLE_CHOICE).read(run_task(cfg), "train", cfg)
    assert "\n" not in str(err.value)


def test_a_bad_file_through_the_command_line_exits_2_before_training(tmp_path, capsys):
    good = write_jsonl(tmp_path / "train.jsonl", [ENDINGS] * 4)
    bad = write_jsonl(tmp_path / "dev.jsonl", [ENDINGS, {**ENDINGS, "label": 4}])
    argv = ["finetune", "--task", "custom", "--task-type", "multiple-choice", "--train-file", str(good),
            "--validation-file", str(bad), "--output-dir", str(tmp_path / "run")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"error: {bad}:2: label 4 is out of range (valid: 0 to 3)\n"
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_custom_reads_the_layout_its_suffix_names_and_refuses_others(tmp_path):
    swag = write_swag(tmp_path / "train.csv", [SWAG_ROW])
    cfg = FinetuneConfig(task="custom", task_type="multiple-choice", train_file=str(swag), validation_file=str(swag))
    task = run_task(cfg)
    assert (task.name, task.format, task.dev_splits, task.num_labels) == ("custom", "swag", ("dev",), 1)
    text = tmp_path / "train.txt"
    text.write_text("x")
    with pytest.raises(UsageError, match=r"unknown suffix '\.txt' for multiple-choice questions \(valid: \.json "
                                         r"\(dream\), \.jsonl \(hellaswag\), \.csv \(swag\)\)"):
        run_task(FinetuneConfig(task="custom", task_type="multiple-choice", train_file=str(text),
                                validation_file=str(swag)))
    dream = write_dream(tmp_path / "dev.json", [DIALOGUE])
    with pytest.raises(UsageError, match=r"--validation-file .*dev\.json' is not a \.csv file like --train-file"):
        run_task(FinetuneConfig(task="custom", task_type="multiple-choice", train_file=str(swag),
                                validation_file=str(dream)))


def fake_datasets(monkeypatch, load_dataset) -> None:
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))


def test_hub_rows_become_the_same_questions_and_offline_says_what_to_give(monkeypatch):
    dream_rows = [{"id": i, "dialogue_id": "7-42", "dialogue": DIALOGUE[0], **q} for i, q in enumerate(DIALOGUE[1])]
    rows = {"dataset-org/dream": dream_rows, "Rowan/hellaswag": [ENDINGS],
            "allenai/swag": [{**SWAG_ROW, "label": 1}]}
    asked = []

    def load_dataset(name, config, split):
        asked.append((name, config, split))
        return rows[name]

    fake_datasets(monkeypatch, load_dataset)
    for name in ("DREAM_DIR", "HELLASWAG_DIR", "SWAG_DIR"):
        monkeypatch.delenv(name, raising=False)
    cfg = FinetuneConfig(task="dream")
    read = {name: mc.read(get_task(name).bind(cfg), "dev", cfg) for name in ("dream", "hellaswag", "swag")}
    assert [q.id for q in read["dream"]] == ["7-42-0", "7-42-1"] and read["dream"][1].label == 1
    assert (read["hellaswag"][0].label, read["swag"][0].label, read["swag"][0].question) == (3, 1, "The teacher")
    assert asked == [("dataset-org/dream", None, "validation"), ("Rowan/hellaswag", None, "validation"),
                     ("allenai/swag", "regular", "validation")]
    assert "test" in get_task("dream").bind(cfg).paths and "test" not in get_task("swag").bind(cfg).paths

    def offline(name, config, split):
        raise ConnectionError("no network")

    fake_datasets(monkeypatch, offline)
    with pytest.raises(UsageError, match=r"could not load hellaswag train from the hub 'Rowan/hellaswag' "
                                         r"\(ConnectionError\): give --train-file FILE, or set HELLASWAG_DIR"):
        mc.read(get_task("hellaswag").bind(cfg), "train", cfg)


# ----------------------------------------------------------------------------------------------
# Features and batches


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return load_tokenizer(minilm_dir)


def test_a_long_context_is_cut_and_every_choice_kept_whole(tokenizer):
    context = " ".join(f"word{i}" for i in range(200))
    long_choice = "a much longer candidate answer that runs on for quite a few words"
    question = ChoiceQuestion("q", context, "What happens?", ("yes.", "no.", long_choice), 2)
    cfg = types.SimpleNamespace(max_len=48)
    (feature,) = mc.encode([question], tokenizer, cfg, training=False)
    assert feature["label"] == 2 and feature["question"] is question
    for ids, types_, choice in zip(feature["input_ids"], feature["token_type_ids"], question.choices):
        second = tokenizer(f"What happens? {choice}", add_special_tokens=False)["input_ids"]
        assert len(ids) == len(types_) == 48  # the context filled what the choice left
        assert ids[-len(second) - 1:] == second + [tokenizer.sep_token_id]  # the choice whole, at the end
        assert types_.count(1) == len(second) + 1 and ids[0] == tokenizer.cls_token_id
    too_long = ChoiceQuestion("r", context, "", ("short.", " ".join(["very"] * 80)), 0)
    (cut,) = mc.encode([too_long], tokenizer, cfg, training=True)  # the choice alone is over max_len: both cut
    assert [len(ids) for ids in cut["input_ids"]][1] == 48 and "question" not in cut


def test_collate_pads_every_pair_to_the_batch_s_longest(tokenizer):
    questions = [ChoiceQuestion("a", "Short context.", "", ("one", "two", "three"), 0),
                 ChoiceQuestion("b", "A somewhat longer context than the first one.", "Why?",
                                   ("because it rained all day long", "no", "maybe"), 2)]
    features = mc.encode(questions, tokenizer, types.SimpleNamespace(max_len=128), training=True)
    batch = mc.collate(features, tokenizer.pad_token_id)
    L = max(mc.length(f) for f in features)
    assert {k: tuple(v.shape) for k, v in batch.items()} == {
        "input_ids": (2, 3, L), "attention_mask": (2, 3, L), "token_type_ids": (2, 3, L), "labels": (2,)}
    assert batch["attention_mask"].sum(-1).tolist() == [[len(ids) for ids in f["input_ids"]] for f in features]
    assert batch["labels"].tolist() == [0, 2]


def test_our_head_matches_hugging_faces_multiple_choice_model(minilm_dir, tokenizer):
    questions = [ChoiceQuestion("a", DIALOGUE[0][0] + " " + DIALOGUE[0][1], q["question"], tuple(q["choice"]),
                                   q["choice"].index(q["answer"])) for q in DIALOGUE[1]]
    questions.append(ChoiceQuestion("b", ENDINGS["ctx"], "", tuple(ENDINGS["endings"][:3]), 2))
    batch = mc.collate(mc.encode(questions, tokenizer, types.SimpleNamespace(max_len=128), training=True),
                       tokenizer.pad_token_id)
    encoder, _ = load_pretrained(str(minilm_dir))
    ours = MultipleChoiceHead(encoder, 1).eval()
    theirs = transformers.BertForMultipleChoice.from_pretrained(str(minilm_dir)).eval()
    ours.classifier.load_state_dict(theirs.classifier.state_dict())
    with torch.no_grad():
        logits, _ = ours.logits(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        want = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      token_type_ids=batch["token_type_ids"], labels=batch["labels"])
        loss = ours.loss(logits, batch["labels"])
    assert logits.shape == (3, 3)
    torch.testing.assert_close(logits, want.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(loss, want.loss, atol=1e-5, rtol=1e-5)


def test_decode_score_and_the_predictions_file(tmp_path):
    questions = [ChoiceQuestion(str(i), "c", "", ("x", "y", "z"), i % 3) for i in range(4)]
    features = [{"label": q.label, "question": q} for q in questions]
    task = get_task("dream")
    predictions = mc.decode(task, [torch.tensor([0.1, 0.9, 0.0]), torch.tensor([0.0, 2.0, 1.0]),
                                   torch.tensor([0.0, 0.0, 3.0]), torch.tensor([5.0, 0.0, 1.0])], features)
    assert predictions.indices.tolist() == [1, 1, 2, 0]
    scores, problem = mc.score(task, predictions, features)
    assert scores == {"accuracy": 0.75} and problem is None  # labels 0, 1, 2, 0
    mc.write_predictions(tmp_path / "dev_predictions.tsv", task, predictions, scores)
    rows = (tmp_path / "dev_predictions.tsv").read_text().splitlines()
    assert rows[0] == "id\tprediction\tanswer\tprediction_text\tanswer_text" and rows[1] == "0\t1\t0\ty\tx"
    constant = mc.decode(task, [torch.tensor([0.0, 1.0, 0.0])] * 4, features)
    assert mc.score(task, constant, features)[1] == ("all 4 predictions are choice 1: the accuracy is that of "
                                                     "always answering choice 1")


# ----------------------------------------------------------------------------------------------
# The real DREAM files


@needs_dream
def test_the_dream_files_hold_the_published_question_counts():
    cfg = FinetuneConfig(task="dream")
    task = run_task(cfg)
    assert task.dev_splits == ("dev", "test")
    for split, count in (("train", 6116), ("dev", 2040), ("test", 2041)):
        questions = mc.read(task, split, cfg)
        assert len(questions) == count and len({q.id for q in questions}) == count
        assert all(len(q.choices) == 3 and 0 <= q.label < 3 for q in questions)


# ----------------------------------------------------------------------------------------------
# Fine-tuning end to end


@pytest.fixture(scope="module")
def generated_questions(tmp_path_factory) -> tuple[Path, Path]:
    """HellaSWAG-style files whose right ending repeats the context's colour word: learnable, a few dozen lines."""
    colours, rng = ["red", "blue", "green", "yellow"], random.Random(0)
    folder = tmp_path_factory.mktemp("choices")

    def records(n):
        for i in range(n):
            colour, label = rng.choice(colours), rng.randrange(4)
            endings = [f"the {c} one" for c in rng.sample([c for c in colours if c != colour], 3)]
            endings.insert(label, f"the {colour} one")
            yield {"ind": i, "ctx": f"she picked up the {colour} ball and threw", "endings": endings, "label": label}

    return write_jsonl(folder / "train.jsonl", records(48)), write_jsonl(folder / "dev.jsonl", records(16))


def run_config(files, out, **overrides) -> FinetuneConfig:
    return FinetuneConfig(**{"task": "custom", "task_type": "multiple-choice", "train_file": str(files[0]),
                             "validation_file": str(files[1]), "epochs": 1, "batch_size": 8, "lr": 1e-3,
                             "max_len": 32, "output_dir": str(out), **overrides})


@pytest.mark.parametrize("method", ["vanilla", "asa", "bernoulli-mask", "ssaf"])
def test_a_tiny_multiple_choice_run_trains_and_writes_its_predictions(method, tiny_model_dir, generated_questions,
                                                                      tmp_path):
    result = finetune(run_config(generated_questions, tmp_path, model=str(tiny_model_dir), method=method))
    assert result["status"] == "complete" and result["task"] == "custom" and result["train_steps"] == 6
    assert all(math.isfinite(entry["train_loss"]) for entry in result["history"])
    assert 0.0 <= result["dev"]["accuracy"] <= 1.0 and set(result["dev"]) == {"accuracy"}
    rows = (tmp_path / "dev_predictions.tsv").read_text().splitlines()
    assert len(rows) == 17 and rows[0].startswith("id\tprediction\tanswer")
    if method in ("asa", "bernoulli-mask"):  # the attacked pass ran: per-layer masking fractions were logged
        assert len(result["history"][0]["masked_fraction"]) == 2


@pytest.mark.parametrize("method", ["ssa-co", "ssa-hybrid", "bert-mask"])
def test_sentence_only_methods_are_refused_on_multiple_choice(method, tiny_model_dir, generated_questions, tmp_path):
    with pytest.raises(UsageError, match=rf"method '{method}' does not apply to multiple_choice tasks "
                                         rf"\(it applies to: sentence\)"):
        finetune(run_config(generated_questions, tmp_path / "run", model=str(tiny_model_dir), method=method))
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


@needs_dream
def test_a_short_dream_run_with_the_real_minilm_lowers_the_training_loss(tmp_path):
    """32 questions twice at 64 tokens (seconds of training on idle cores): epoch 2's mean loss is about 0.01 below
    epoch 1's, near ln 3 = 1.099 where an untrained head starts."""
    cfg = FinetuneConfig(task="dream", max_train_samples=32, max_eval_samples=16, epochs=2, batch_size=8,
                         lr=3e-4, max_len=64, bucket_by_length=True, output_dir=str(tmp_path))
    result = finetune(cfg)
    first, second = (entry["train_loss"] for entry in result["history"])
    assert second < first, result["history"]
    assert set(result["dev"]) == set(result["test"]) == {"accuracy"}
