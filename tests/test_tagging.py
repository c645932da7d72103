"""The token-tagging family: CoNLL reading (IOB1 read as IOB2), first-sub-word labels with the real tokenizer,
entity scores by seqeval, one-line errors for bad files, and fine-tuning end to end, per method."""
import json
import math
import random
import re
import sys
import types
from pathlib import Path

import pytest
import torch
import transformers

from course_lib.model.heads import IGNORE_INDEX
from course_lib.readers import conll, local_data, sources
from course_lib import cli
from course_lib.runtime.errors import UsageError
from course_lib.tasks import tagging
from course_lib.tasks.registry import get_task, run_task
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune

WNUT17_DIR = local_data.data_folder("WNUT17_DIR")  # $WNUT17_DIR, else the repository's data/wnut17: never skipped


def write_conll(path: Path, sentences, columns: int = 2) -> Path:
    """Sentences of (word, tag) pairs as a CoNLL file; 4 columns put dummy POS and chunk tags in between."""
    middle = ["NNP", "I-NP"][:columns - 2]
    path.write_text("\n\n".join("\n".join(" ".join([word, *middle, tag]) for word, tag in sentence)
                                for sentence in sentences) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return transformers.AutoTokenizer.from_pretrained(str(minilm_dir))


# ----------------------------------------------------------------------------------------------
# Reading


@pytest.mark.parametrize("iob1, iob2", [
    (["I-PER", "I-PER", "O"], ("B-PER", "I-PER", "O")),  # an entity opened by I-
    (["I-PER", "B-PER", "I-PER"], ("B-PER", "B-PER", "I-PER")),  # B- between two adjacent entities stays
    (["I-LOC", "I-PER", "O", "I-PER"], ("B-LOC", "B-PER", "O", "B-PER")),  # a type change opens an entity
    (["B-ORG", "I-ORG", "O"], ("B-ORG", "I-ORG", "O")),  # IOB2 is left as it is
    (["O", "O"], ("O", "O")),
])
def test_iob1_becomes_iob2(iob1, iob2):
    assert conll.to_iob2(iob1) == iob2
    assert conll.to_iob2(iob2) == iob2


def test_blank_lines_docstart_and_tabs_separate_sentences(tmp_path):
    path = tmp_path / "mixed.conll"
    path.write_text("-DOCSTART-\tO\n\nParis\tB-location\nrocks\tO\n\t\n\n\nI   O\n   \nsaw\tO\r\nBob\tB-person\n",
                    encoding="utf-8")
    sentences = conll.read_conll(path)
    assert [s.words for s in sentences] == [("Paris", "rocks"), ("I",), ("saw", "Bob")]
    assert sentences[2].tags == ("O", "B-person") and sentences[0].tag_ids == ()  # no label set: no ids


def test_a_conll2003_folder_with_four_columns_and_iob1_reads_as_iob2(tmp_path):
    (tmp_path / "train.txt").write_text(
        "-DOCSTART- -X- -X- O\n\n"
        "EU NNP B-NP I-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP I-MISC\ncall NN I-NP O\n\n"
        "Peter NNP B-NP I-PER\nBlackburn NNP I-NP I-PER\n\n", encoding="utf-8")
    write_conll(tmp_path / "valid.txt", [[("Bonn", "I-LOC")]], columns=4)
    write_conll(tmp_path / "test.txt", [[("Bonn", "I-LOC"), ("Berlin", "B-LOC")]], columns=4)
    task = run_task(FinetuneConfig(task="conll2003", data_dir=str(tmp_path)))
    assert task.dev_splits == ("dev", "test") and task.num_labels == 9
    train = tagging.read(task, "train", None)
    assert [s.tags for s in train] == [("B-ORG", "O", "B-MISC", "O"), ("B-PER", "I-PER")]
    assert train[1].tag_ids == (1, 2) and task.label_names[:3] == ("O", "B-PER", "I-PER")
    assert tagging.read(task, "dev", None)[0].tags == ("B-LOC",)
    assert tagging.read(task, "test", None)[0].tags == ("B-LOC", "B-LOC")  # IOB1's B-: a second entity


def test_a_custom_label_set_is_the_training_files_or_the_option(tmp_path):
    train = write_conll(tmp_path / "train.conll", [[("Ann", "B-per"), ("in", "O"), ("Rome", "I-loc")]])
    cfg = FinetuneConfig(task="custom", task_type="tagging", train_file=str(train), validation_file=str(train))
    assert run_task(cfg).label_names == ("O", "B-loc", "B-per", "I-loc", "I-per")  # O, then sorted, B and I
    cfg.task_options.labels = "O,B-per,I-per,B-loc,I-loc"
    assert run_task(cfg).label_names == ("O", "B-per", "I-per", "B-loc", "I-loc")  # ids in the order given
    for labels, why in (("B-per,I-per", "O is missing"), ("O,B-per", "'I-per' is missing"),
                        ("O,per", "malformed tag 'per'")):
        cfg.task_options.labels = labels
        with pytest.raises(UsageError, match=why):
            run_task(cfg)


def test_the_hub_rows_map_tag_ids_in_the_hubs_order(monkeypatch, no_shipped_data):
    """The hub's wnut_17 numbers its tags O, B-corporation, I-corporation, ..., B-product, I-product."""
    def load_dataset(path, name, split):
        assert (path, split) == ("leondz/wnut_17", "validation")
        return [{"tokens": ["Ann", "Lee", "at", "Apple"], "ner_tags": [9, 10, 0, 1]}]

    monkeypatch.delenv("WNUT17_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    task = run_task(FinetuneConfig(task="wnut17"))
    assert task.paths == {"train": None, "dev": None, "test": None} and task.dev_splits == ("dev", "test")
    [sentence] = tagging.read(task, "dev", None)
    assert sentence.tags == ("B-person", "I-person", "O", "B-corporation") and sentence.tag_ids == (9, 10, 0, 1)


def test_offline_the_hub_error_says_what_to_give_instead(monkeypatch, no_shipped_data):
    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.delenv("WNUT17_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    task = run_task(FinetuneConfig(task="wnut17"))
    with pytest.raises(UsageError, match=r"could not load wnut17 train from the hub 'leondz/wnut_17' "
                                         r"\(ConnectionError\): give --train-file FILE, or set WNUT17_DIR"):
        tagging.read(task, "train", None)


# ----------------------------------------------------------------------------------------------
# Bad files: one line naming the file and line, exit code 2 from the command line


@pytest.mark.parametrize("text, label_names, message", [
    ("Ann B-person\nlives\nhere O\n", None, r":2: 'lives' has no tag \(expected 'token \.\.\. tag'\)"),
    ("Ann B-person\n\nRome B-city\n", tagging.PRESETS[0].label_names,
     r":3: unknown tag 'B-city' \(valid: O, B-corporation, I-corporation, B-creative-work"),
    ("Ann B-person\nRome LOC\n", None, r":2: malformed tag 'LOC' \(expected O, B-type or I-type\)"),
    ("Ann NNP B-person\nRome B-location\n", None, r":2: 2 columns, but line 1 has 3"),
    ("\n-DOCSTART- O\n\n", None, r": no sentences \(expected 'token \.\.\. tag' lines"),
])
def test_a_bad_conll_file_is_one_line_naming_file_and_line(tmp_path, text, label_names, message):
    path = tmp_path / "bad.conll"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=re.escape(str(path)) + message) as err:
        conll.read_conll(path, label_names)
    assert "\n" not in str(err.value)


def test_bytes_that_are_not_utf8_are_named_by_line(tmp_path):
    path = tmp_path / "latin1.conll"
    path.write_bytes("Ann B-person\nZürich B-location\n".encode("latin-1"))
    with pytest.raises(UsageError, match=re.escape(f"{path}:2: not UTF-8 text")):
        conll.read_conll(path)


def test_the_command_line_exits_2_with_one_line_before_training(tmp_path, tiny_model_dir, capsys):
    good = write_conll(tmp_path / "good.conll", [[("Ann", "B-person"), ("smiled", "O")]])
    bad = tmp_path / "bad.conll"
    bad.write_text("Ann B-person\nsmiled O\n\nBob\n", encoding="utf-8")
    base = ["finetune", "--task", "custom", "--task-type", "tagging", "--model", str(tiny_model_dir), "--max-len", "32",
            "--output-dir", str(tmp_path / "run")]
    for files, message in (
            (["--train-file", str(bad), "--validation-file", str(good)],
             f"error: {bad}:4: 'Bob' has no tag (expected 'token ... tag')"),
            (["--train-file", str(good), "--validation-file", str(bad)],
             f"error: {bad}:4: 'Bob' has no tag (expected 'token ... tag')"),
            (["--train-file", str(tmp_path / "missing.conll"), "--validation-file", str(good)],
             "error: --train-file: "),
            (["--train-file", str(good), "--validation-file", str(good), "--text-columns", "a"],
             "error: option 'text_columns' belongs to task family sentence, not to this run")):
        assert cli.main(base + files) == 2
        stderr = capsys.readouterr().err
        assert stderr.startswith(message) and stderr.count("\n") == 1, stderr
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


# ----------------------------------------------------------------------------------------------
# Features, decoding and scores with the real tokenizer


def one_hot_rows(features, tag_ids_per_feature, num_labels: int, width: int) -> list[torch.Tensor]:
    """Logit rows (width, C) as a padded batch gives them, the given tag id winning on each word's first
    sub-word (and junk on every other position, which decoding must not read)."""
    rows = []
    for feature, tag_ids in zip(features, tag_ids_per_feature):
        row = torch.randn(width, num_labels)
        for position, tag_id in zip(feature["first_subword"], tag_ids):
            if position >= 0:
                row[position] = -10.0
                row[position, tag_id] = 10.0
        rows.append(row)
    return rows


def test_a_word_is_labelled_on_its_first_sub_word_only(tokenizer):
    task = tagging.PRESETS[0]
    sentence = conll.TaggedSentence(("Pxleyes", "rocks"), ("B-corporation", "O"), (1, 0))
    cfg = FinetuneConfig(task="wnut17", max_len=128)
    [feature] = tagging.encode([sentence], tokenizer, cfg, training=False)
    assert tokenizer.convert_ids_to_tokens(feature["input_ids"]) == \
        ["[CLS]", "p", "##xley", "##es", "rocks", "[SEP]"]
    assert feature["label"] == [IGNORE_INDEX, 1, IGNORE_INDEX, IGNORE_INDEX, 0, IGNORE_INDEX]
    assert feature["first_subword"] == [1, 4] and tagging.length(feature) == 6
    [train_feature] = tagging.encode([sentence], tokenizer, cfg, training=True)
    assert set(train_feature) == {"input_ids", "token_type_ids", "label"}  # training keeps no words
    batch = tagging.collate([train_feature, *tagging.encode([conll.TaggedSentence(("Hi",), ("O",), (0,))],
                                                            tokenizer, cfg)], tokenizer.pad_token_id)
    assert batch["labels"].tolist()[1] == [IGNORE_INDEX, 0, IGNORE_INDEX] + [IGNORE_INDEX] * 3  # padding ignored
    assert batch["attention_mask"].tolist()[1] == [1, 1, 1, 0, 0, 0]
    assert task.num_labels == 13


def test_gold_logits_decode_to_f1_one_and_seqeval_agrees_with_hand_counts(tokenizer, tmp_path):
    task = tagging.PRESETS[0]
    words = ("Alice", "Smith", "visited", "New", "York", "with", "Acme")
    gold = ("B-person", "I-person", "O", "B-location", "I-location", "O", "B-corporation")
    ids = {name: i for i, name in enumerate(task.label_names)}
    sentences = [conll.TaggedSentence(words, gold, tuple(ids[t] for t in gold)),
                 conll.TaggedSentence(("Pxleyes", "rocks"), ("B-corporation", "O"), (1, 0))]
    features = tagging.encode(sentences, tokenizer, FinetuneConfig(task="wnut17"), training=False)
    exact = tagging.decode(task, one_hot_rows(features, [s.tag_ids for s in sentences], 13, 12), features)
    scores, problem = tagging.score(task, exact, features)
    assert scores == {"f1": 1.0, "precision": 1.0, "recall": 1.0, "accuracy": 1.0} and problem is None
    # predicted: person(0) cut short, product(2) invented, location(3-4) right, group(6) for corporation
    predicted = ("B-person", "O", "B-product", "B-location", "I-location", "O", "B-group")
    rows = one_hot_rows(features, [[ids[t] for t in predicted], sentences[1].tag_ids], 13, 12)
    decoded = tagging.decode(task, rows, features)
    assert decoded[0].predicted == predicted and decoded[0].gold == gold and decoded[0].words == words
    scores, _ = tagging.score(task, decoded[:1], features[:1])
    precision, recall = 1 / 4, 1 / 3  # 1 right of 4 predicted entities, of 3 gold ones
    assert scores["precision"] == pytest.approx(precision) and scores["recall"] == pytest.approx(recall)
    assert scores["f1"] == pytest.approx(2 * precision * recall / (precision + recall))
    assert scores["accuracy"] == pytest.approx(4 / 7)
    tagging.write_predictions(tmp_path / "dev_predictions.conll", task, decoded, scores)
    lines = (tmp_path / "dev_predictions.conll").read_text(encoding="utf-8").split("\n")
    assert lines[:2] == ["Alice\tB-person\tB-person", "Smith\tI-person\tO"] and lines[7] == ""
    assert lines[8:11] == ["Pxleyes\tB-corporation\tB-corporation", "rocks\tO\tO", ""]


def test_words_cut_off_by_max_len_are_predicted_o_and_counted(tokenizer):
    task = tagging.PRESETS[0]
    words = ("Paris", *["and"] * 39)
    sentence = conll.TaggedSentence(words, ("B-location", *["O"] * 39), (7, *[0] * 39))
    [feature] = tagging.encode([sentence], tokenizer, FinetuneConfig(task="wnut17", max_len=16), training=False)
    assert len(feature["input_ids"]) == 16 and feature["truncated"] == 40 - 14
    [prediction] = tagging.decode(task, one_hot_rows([feature], [[9] * 40], 13, 16), [feature])  # all B-person
    assert prediction.predicted == ("B-person",) * 14 + ("O",) * 26
    scores, problem = tagging.score(task, [prediction], [feature])
    assert scores["truncated_words"] == 26 and scores["precision"] == 0.0 and problem is None


def test_a_constant_tagger_is_flagged():
    task = tagging.PRESETS[0]
    predictions = [tagging.TagPrediction(("Ann", "ran"), ("B-person", "O"), ("O", "O")),
                   tagging.TagPrediction(("Bo",), ("B-person",), ("O",))]
    scores, problem = tagging.score(task, predictions, [])
    assert scores["f1"] == 0.0 and problem == "all 3 words are tagged 'O': no entity predicted"


# ----------------------------------------------------------------------------------------------
# The real WNUT-17 files


def test_the_wnut17_files_read_with_the_presets_label_set():
    """The training file separates its tweets by tab-only lines and groups them by empty ones: both are blank
    lines, so it holds 3,394 sentences, as many as the hub's copy has rows."""
    task = run_task(FinetuneConfig(task="wnut17"))
    assert task.dev_splits == ("dev", "test")
    counts = {}
    for split in ("train", "dev", "test"):
        sentences = tagging.read(task, split, None)
        counts[split] = len(sentences)
        assert {tag for s in sentences for tag in s.tags} <= set(task.label_names)
        assert all(len(s.words) == len(s.tags) == len(s.tag_ids) > 0 for s in sentences)
    assert counts == {"train": 3394, "dev": 1009, "test": 1287}


# ----------------------------------------------------------------------------------------------
# Fine-tuning end to end


NAMES = ["Alice", "Bruno", "Chen", "Dana", "Emeka"]
CITIES = ["Paris", "Lagos", "Oslo", "Lima", "Kyoto"]
FILLER = ["we", "met", "in", "today", "and", "then", "left", "for", "the", "big", "market"]


def toy_sentences(n: int, seed: int):
    """Filler words with a person name (B-person, sometimes I-person for a second name) and a city."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        sentence = [(w, "O") for w in rng.choices(FILLER, k=rng.randint(3, 8))]
        sentence.insert(rng.randint(0, len(sentence)), (rng.choice(CITIES), "B-location"))
        person = [(rng.choice(NAMES), "B-person")] + ([(rng.choice(NAMES), "I-person")] if rng.random() < 0.5 else [])
        at = rng.randint(0, len(sentence))
        sentences.append(sentence[:at] + person + sentence[at:])
    return sentences


@pytest.fixture(scope="module")
def toy_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy_tagging")
    return (write_conll(root / "train.conll", toy_sentences(48, 0)),
            write_conll(root / "dev.conll", toy_sentences(16, 1)))


def toy_config(files, model, out, **overrides) -> FinetuneConfig:
    return FinetuneConfig.from_dict(dict(task="custom", task_type="tagging", model=str(model), train_file=str(files[0]),
                                         validation_file=str(files[1]), epochs=1, max_len=32, batch_size=8, lr=1e-3,
                                         output_dir=str(out), **overrides))


@pytest.mark.parametrize("method, options", [("vanilla", {}), ("asa", {}), ("bernoulli-mask", {}), ("ssaf", {}),
                                             ("asa", {"asa_tagging_divergence": "word-mean"})])
def test_a_tiny_tagging_run_finishes_and_writes_conll_predictions(method, options, toy_files, tiny_model_dir, tmp_path):
    result = finetune(toy_config(toy_files, tiny_model_dir, tmp_path, method=method, **options))
    assert result["status"] == "complete" and result["task"] == "custom"
    assert all(math.isfinite(entry["train_loss"]) for entry in result["history"])
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert {"f1", "precision", "recall", "accuracy"} <= set(saved["dev"])
    assert all(0.0 <= saved["dev"][k] <= 1.0 for k in ("f1", "precision", "recall", "accuracy"))
    rows = [line.split("\t") for line in (tmp_path / "dev_predictions.conll").read_text().split("\n") if line]
    gold = [pair for sentence in toy_sentences(16, 1) for pair in sentence]
    assert [(word, tag) for word, tag, _ in rows] == gold  # every dev word, in file order, beside its gold tag
    labels = set(run_task(toy_config(toy_files, tiny_model_dir, tmp_path)).label_names)
    assert {predicted for _, _, predicted in rows} <= labels


@pytest.mark.parametrize("method", ["ssa-co", "ssa-hybrid", "bert-mask"])
def test_sentence_only_methods_are_refused_on_tagging(method, toy_files, tiny_model_dir, tmp_path):
    with pytest.raises(UsageError, match=rf"method '{method}' does not apply to tagging tasks"):
        finetune(toy_config(toy_files, tiny_model_dir, tmp_path / "run", method=method))
    assert not (tmp_path / "run").exists()


def test_minilm_on_wnut17_lowers_its_training_loss(minilm_dir, tmp_path):
    """The real MiniLM on 128 WNUT-17 training tweets, twice (about 20 s on 2 idle cores); dev and test capped
    at 64 tweets each."""
    cfg = FinetuneConfig(task="wnut17", model=str(minilm_dir), max_train_samples=128, max_eval_samples=64,
                         epochs=2, lr=5e-5, batch_size=16, eval_batch_size=64, max_len=64, bucket_by_length=True,
                         output_dir=str(tmp_path))
    result = finetune(cfg)
    first, second = (entry["train_loss"] for entry in result["history"])
    assert second < first, result["history"]
    assert get_task("WNUT17").name == "wnut17" and {"f1", "precision", "recall"} <= set(result["test"])
    assert len((tmp_path / "test_predictions.conll").read_text().strip().split("\n\n")) == 64


def test_own_train_and_dev_files_make_the_test_split_optional(tmp_path, monkeypatch):
    """`--task conll2003 --train-file A --validation-file B` and no CONLL2003_DIR: the run goes on without a test
    split (one note says so) instead of stopping at the hub's; a --test-file given is still scored."""
    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.delenv("CONLL2003_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    sentences = [[("Ann", "I-PER"), ("ran", "O")], [("Bonn", "I-LOC"), ("rains", "O")]]
    files = {name: str(write_conll(tmp_path / f"{name}.txt", sentences, columns=4)) for name in ("a", "b", "c")}
    cfg = FinetuneConfig(task="conll2003", train_file=files["a"], validation_file=files["b"])
    task = run_task(cfg)
    assert "test" not in task.paths and task.dev_splits == ("dev",)
    assert sources.skipped_test_note(task, cfg) == ("note: no test split: --train-file and --validation-file "
                                                    "were given without --test-file")
    cfg = FinetuneConfig(task="conll2003", train_file=files["a"], validation_file=files["b"], test_file=files["c"])
    task = run_task(cfg)
    assert task.dev_splits == ("dev", "test") and sources.skipped_test_note(task, cfg) is None
