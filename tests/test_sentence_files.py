"""The sentence family from any CSV, TSV or JSONL file: strict readers, label sets, `--task custom`, the presets
sst5, anli, paws_qqp, scitail and semeval2013 (files, hub rows, the offline error), and fine-tuning on such files
with every sentence method."""
import csv
import json
import math
import random
import sys
import types
from dataclasses import replace

import pytest

from course_lib.methods.registry import get_method
from course_lib.readers import sentence_files
from course_lib import cli
from course_lib.runtime.errors import UsageError
from course_lib.tasks import batching, glue
from course_lib.tasks.registry import get_task, run_task
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune
from sentiment_words import BAD, FILLER, GOOD

ROWS = [("Funny, warm and \"smart\".", "positive"), ("Dull, dull, dull.", "negative"),
        ("It is a film.", "neutral"), ("Say \"no\"\tto it", "negative")]  # commas, quotes, a tab inside a field


def custom_cfg(tmp_path, train, dev=None, **options) -> FinetuneConfig:
    return FinetuneConfig.from_dict(dict(task="custom", task_type=options.pop("task_type", "classification"),
                                         train_file=str(train), validation_file=str(dev or train),
                                         output_dir=str(tmp_path / "run"), **options))


def write_delimited(path, header, rows, delimiter):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter=delimiter, lineterminator="\n")
        writer.writerows([header, *rows])
    return path


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def read(cfg, split="train"):
    task = run_task(cfg)
    return task, [(ex.texts, ex.label) for ex in task.load(split, cfg)]


# ----------------------------------------------------------------------------------------------
# Reading


def test_csv_tsv_and_jsonl_read_to_the_same_examples(tmp_path):
    files = [write_delimited(tmp_path / "a.csv", ["sentence", "label"], ROWS, ","),
             write_delimited(tmp_path / "a.tsv", ["label", "sentence"], [(y, x) for x, y in ROWS], "\t"),
             write_jsonl(tmp_path / "a.jsonl", [{"sentence": x, "label": y, "id": i} for i, (x, y) in enumerate(ROWS)])]
    assert '"Funny, warm and ""smart"".",positive' in files[0].read_text()  # csv quoting, doubled quotes
    assert '"Say ""no""\tto it"' in files[1].read_text()  # a quoted TSV field holding a tab
    read_back = [read(custom_cfg(tmp_path, path)) for path in files]
    want = [((x,), ["negative", "neutral", "positive"].index(y)) for x, y in ROWS]
    for task, examples in read_back:
        assert task.label_names == ("negative", "neutral", "positive") and examples == want


def test_pairs_read_from_the_named_columns_and_the_label_column(tmp_path):
    rows = [("7", "A man plays.", "A man is playing.", "same"), ("8", "A cat, asleep.", "A dog runs.", "other")]
    path = write_delimited(tmp_path / "pairs.csv", ["id", "first", "second", "verdict"], rows, ",")
    task, examples = read(custom_cfg(tmp_path, path, text_columns="first,second", label_column="verdict"))
    assert task.text_columns == ("first", "second") and task.num_labels == 2
    assert examples == [(("A man plays.", "A man is playing."), 1), (("A cat, asleep.", "A dog runs."), 0)]


def test_labels_given_keep_their_order_and_labels_read_sort_numbers_numerically(tmp_path):
    path = write_delimited(tmp_path / "a.csv", ["text", "label"], [("x", "pos"), ("y", "neg")], ",")
    task, examples = read(custom_cfg(tmp_path, path, labels="pos,neg"))
    assert task.label_names == ("pos", "neg") and [y for _, y in examples] == [0, 1]
    numbers = write_delimited(tmp_path / "n.csv", ["text", "label"],
                              [("a", "10"), ("b", "2"), ("c", "1"), ("d", "1.0"), ("e", "2")], ",")
    task, examples = read(custom_cfg(tmp_path, numbers))
    assert task.label_names == ("1", "2", "10")  # numerically; 1.0 is the class 1, named as first seen
    assert [y for _, y in examples] == [2, 1, 0, 0, 1]
    words = write_delimited(tmp_path / "w.csv", ["text", "label"], [("a", "b2"), ("b", "a10"), ("c", "B")], ",")
    assert run_task(custom_cfg(tmp_path, words)).label_names == ("B", "a10", "b2")  # as strings


def test_regression_reads_finite_scores_and_the_text_column_defaults(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [{"text": "a", "label": 4.5}, {"text": "b", "label": "-1e3"},
                                              {"text": "c", "label": 0}])
    task, examples = read(custom_cfg(tmp_path, path, task_type="regression"))
    assert task.is_regression and task.num_labels == 1 and task.metrics == ("pearson", "spearmanr")
    assert examples == [(("a",), 4.5), (("b",), -1000.0), (("c",), 0.0)]


BAD_INPUTS = {  # name: (file name, content, options, the message after "<file>:")
    "missing column": ("a.csv", "sentence,tag\nx,1\n", {},
                       r"a\.csv: header lacks column 'label' \(expected sentence, label; found sentence, tag\)"),
    "jsonl missing": ("a.jsonl", '{"text": "x", "label": "a"}\n\n{"text": "y"}\n', {},
                      r"a\.jsonl:3: missing 'label' \(expected text, label; found text\)"),
    "not json": ("a.jsonl", '{"text": "x", "label": "a"}\n{"text": "y", \n', {}, r"a\.jsonl:2: not a JSON line"),
    "field count": ("a.tsv", "sentence\tlabel\nx\t0\ny\t1\textra\n", {},
                    r"a\.tsv:3: expected 2 tab-separated fields \(sentence, label\), found 3"),
    "after a multi-line field": ("a.csv", 'text,label\n"two\nlines",0\nz\n', {},
                                 r"a\.csv:4: expected 2 comma-separated fields"),
    "unknown label": ("a.csv", "text,label\nx,a\ny,c\n", {"labels": "a,b"},
                      r"a\.csv:3: unknown label 'c' \(valid: a, b\)"),
    "empty label": ("a.csv", "text,label\nx,a\ny, \n", {}, r"a\.csv:3: empty label"),
    "null label": ("a.jsonl", '{"text": "x", "label": null}\n', {}, r"a\.jsonl:1: empty label"),
    "score not a number": ("a.csv", "text,label\nx,1.5\ny,high\n", {"task_type": "regression"},
                           r"a\.csv:3: score 'high' is not a number .*\(valid: a finite number\)"),
    "score nan": ("a.csv", "text,label\nx,nan\n", {"task_type": "regression"}, r"a\.csv:2: score 'nan'"),
    "no text column": ("a.csv", "body,label\nx,1\n", {},
                       r"a\.csv: no 'sentence' or 'text' column \(found: body, label\): name the text column"),
    "suffix": ("a.txt", "text,label\nx,1\n", {}, r"a\.txt: unknown file type '\.txt' \(valid: \.csv, \.tsv, \.jsonl\)"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_each_bad_input_is_one_line_naming_the_file_and_line(case, tmp_path):
    name, content, options, message = BAD_INPUTS[case]
    (tmp_path / name).write_text(content, encoding="utf-8")
    good = write_delimited(tmp_path / "good.csv", ["text", "label"], [("x", "a"), ("y", "b")], ",")
    cfg = custom_cfg(tmp_path, good if "labels" in options else tmp_path / name, tmp_path / name, **options)
    with pytest.raises(UsageError, match=message) as err:
        run_task(cfg).load("dev", cfg)
    assert "\n" not in str(err.value) and str(tmp_path / name) in str(err.value)


def test_a_dev_label_outside_the_training_labels_and_a_score_out_of_a_presets_range(tmp_path):
    train = write_delimited(tmp_path / "train.csv", ["text", "label"], [("x", "a"), ("y", "b")], ",")
    dev = write_delimited(tmp_path / "dev.csv", ["text", "label"], [("x", "a"), ("y", "z")], ",")
    cfg = custom_cfg(tmp_path, train, dev)
    with pytest.raises(UsageError, match=r"dev\.csv:3: unknown label 'z' \(valid: a, b\)"):
        run_task(cfg).load("dev", cfg)
    scores = write_delimited(tmp_path / "s.csv", ["text", "label"], [("x", "2.5"), ("y", "7")], ",")
    cfg = custom_cfg(tmp_path, scores, task_type="regression")
    ranged = replace(run_task(cfg), label_range=(0.0, 5.0))
    with pytest.raises(UsageError, match=r"s\.csv:3: score '7' .*\(valid: 0 to 5\)"):
        ranged.load("train", cfg)


def test_a_bad_file_through_the_command_line_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "train.csv"
    bad.write_text("text,label\nfine,a\nworse,\n", encoding="utf-8")
    code = cli.main(["finetune", "--task", "custom", "--task-type", "classification", "--train-file", str(bad),
                     "--validation-file", str(bad), "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"error: {bad}:3: empty label (every row needs one)"
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_custom_options_are_checked_before_reading(tmp_path):
    path = write_delimited(tmp_path / "a.csv", ["text", "label"], [("x", "a"), ("y", "a")], ",")
    with pytest.raises(UsageError, match=r"a\.csv: every label is 'a': a classifier needs two classes"):
        run_task(custom_cfg(tmp_path, path))
    with pytest.raises(UsageError, match=r"--labels 'a,,b': give distinct names separated by commas"):
        run_task(custom_cfg(tmp_path, path, labels="a,,b"))
    with pytest.raises(UsageError, match=r"--text-columns 'a,b,c': give 1 or 2 distinct names"):
        run_task(custom_cfg(tmp_path, path, text_columns="a,b,c"))
    with pytest.raises(UsageError, match=r"--labels names classes; --task-type regression reads numbers"):
        run_task(custom_cfg(tmp_path, path, task_type="regression", labels="a,b"))
    with pytest.raises(UsageError, match=r"no dev data: give --validation-file FILE"):
        run_task(FinetuneConfig(task="custom", task_type="regression", train_file=str(path)))


# ----------------------------------------------------------------------------------------------
# Presets: files, hub rows, offline


def sst5_folder(root, splits=("train", "dev", "test"), n=48, seed=0):
    """SetFit's layout: {"text", "label" 0-4, "label_text"} per line; the class is carried by one word."""
    rng, words = random.Random(seed), ["awful", "poor", "plain", "good", "superb"]
    root.mkdir(exist_ok=True)
    for split in splits:
        rows = []
        for _ in range(n):
            label = rng.randrange(5)
            text = rng.choices(FILLER, k=rng.randint(3, 9))
            text.insert(rng.randint(0, len(text)), words[label])
            rows.append({"text": " ".join(text), "label": label, "label_text": words[label]})
        write_jsonl(root / f"{split}.jsonl", rows)
    return root


def test_every_preset_reads_its_folder(tmp_path):
    scitail = tmp_path / "scitail"
    scitail.mkdir()
    for split in ("train", "dev", "test"):  # headerless, unquoted: a '"' is text
        (scitail / f"scitail_1.0_{split}.tsv").write_text('Plants make "food".\tPlants eat.\tneutral\n'
                                                          'Ice is water.\tIce is frozen water.\tentails\n')
    paws = tmp_path / "paws"
    paws.mkdir()
    for name in ("train.tsv", "dev_and_test.tsv"):
        (paws / name).write_text('id\tsentence1\tsentence2\tlabel\n1\tWhy is "x" so ?\tWhy is x so ?\t1\n')
    anli = tmp_path / "anli"
    anli.mkdir()
    for split in ("train", "dev", "test"):
        write_jsonl(anli / f"{split}.jsonl", [{"uid": "a", "premise": "P.", "hypothesis": "H.", "label": 2},
                                              {"uid": "b", "premise": "P.", "hypothesis": "H.", "label": "neutral"}])
    semeval = tmp_path / "semeval"
    semeval.mkdir()
    for split in ("train", "dev", "test"):
        (semeval / f"{split}.tsv").write_text('text\tlabel\n"@a ""great"" day"\tpositive\nmeh\tneutral\n')
    want = {"scitail": (scitail, [(('Plants make "food".', "Plants eat."), 1),
                                  (("Ice is water.", "Ice is frozen water."), 0)], ("dev", "test")),
            "paws_qqp": (paws, [(('Why is "x" so ?', "Why is x so ?"), 1)], ("dev",)),
            "anli": (anli, [(("P.", "H."), 2), (("P.", "H."), 1)], ("dev", "test")),
            "semeval2013": (semeval, [(('@a "great" day',), 2), (("meh",), 1)], ("dev", "test"))}
    for name, (folder, examples, dev_splits) in want.items():
        cfg = FinetuneConfig(task=name, data_dir=str(folder))
        task = run_task(cfg)
        assert task.dev_splits == dev_splits and task.max_len == 128, name
        assert [(ex.texts, ex.label) for ex in task.load("dev", cfg)] == examples, name


def test_a_preset_refuses_the_options_of_custom_files(tmp_path):
    with pytest.raises(UsageError, match=r"--text-columns is for --task custom; sst5 reads its own columns "
                                         r"\(text, label\)"):
        run_task(FinetuneConfig.from_dict(dict(task="sst5", data_dir=str(sst5_folder(tmp_path / "sst5")),
                                               text_columns="body")))


@pytest.fixture
def offline_hub(monkeypatch):
    """No network: `datasets` fails as it does offline, whatever the cache holds."""
    def load_dataset(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for preset in sentence_files.PRESETS:
        monkeypatch.delenv(preset.source.env, raising=False)


@pytest.mark.parametrize("name", [preset.name for preset in sentence_files.PRESETS])
def test_a_preset_without_files_offline_says_what_to_give(name, offline_hub):
    preset = get_task(name)
    cfg = FinetuneConfig(task=name)
    env, first_file = preset.source.env, next(iter(preset.source.files.values()))
    if preset.source.hub is None:  # local files only: bind already says how to get them
        with pytest.raises(UsageError, match=rf"no train data: give --train-file FILE or set {env} .*{first_file}"):
            preset.bind(cfg)
        return
    task = preset.bind(cfg)
    with pytest.raises(UsageError, match=rf"could not load {name} train from the hub '{preset.source.hub}' "
                                         rf"\(ConnectionError\): give --train-file FILE, or set {env} .*{first_file}"):
        task.load("train", cfg)


def test_paws_qqp_without_files_says_how_to_make_them(offline_hub):
    with pytest.raises(UsageError, match=r"qqp_generate_data\.py from the original QQP corpus"):
        run_task(FinetuneConfig(task="paws_qqp"))


def test_hub_rows_become_examples(monkeypatch):
    asked = []
    rows = {"train_r1": [{"premise": "P1", "hypothesis": "H1", "label": 0}],
            "train_r2": [{"premise": "P2", "hypothesis": "H2", "label": 2}], "train_r3": [],
            "validation": [{"text": "meh", "label": 2, "label_text": "neutral"}],
            "test": [{"premise": "P", "hypothesis": "H", "label": "entails"}]}

    def load_dataset(name, config=None, split=None):
        asked.append((name, config, split))
        return rows[split]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    for preset in sentence_files.PRESETS:
        monkeypatch.delenv(preset.source.env, raising=False)
    read_back = {}
    for name, split in (("anli", "train"), ("sst5", "dev"), ("scitail", "test")):
        cfg = FinetuneConfig(task=name)
        task = run_task(cfg)
        assert task.dev_splits == ("dev", "test")  # each has a labelled test split on the hub
        read_back[name] = [(ex.texts, ex.label) for ex in task.load(split, cfg)]
    assert read_back == {"anli": [(("P1", "H1"), 0), (("P2", "H2"), 2)], "sst5": [(("meh",), 2)],
                         "scitail": [(("P", "H"), 0)]}
    assert asked == [("facebook/anli", None, "train_r1"), ("facebook/anli", None, "train_r2"),
                     ("facebook/anli", None, "train_r3"), ("SetFit/sst5", None, "validation"),
                     ("allenai/scitail", "tsv_format", "test")]


# ----------------------------------------------------------------------------------------------
# Fine-tuning


def keyword_rows(n, seed):
    """A sentence whose class is carried by one word: GOOD -> positive, BAD -> negative, neither -> neutral."""
    rng, rows = random.Random(seed), []
    for _ in range(n):
        label = rng.choice(["negative", "neutral", "positive"])
        words = rng.choices(FILLER, k=rng.randint(3, 10))
        if label != "neutral":
            words.insert(rng.randint(0, len(words)), rng.choice(GOOD if label == "positive" else BAD))
        rows.append((" ".join(words) + ", really.", label))
    return rows


@pytest.fixture(scope="module")
def keyword_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("keyword_files")
    return (write_delimited(root / "train.csv", ["sentence", "label"], keyword_rows(64, 0), ","),
            write_jsonl(root / "dev.jsonl", [{"sentence": x, "label": y} for x, y in keyword_rows(32, 1)]))


def finite(value) -> bool:
    return all(math.isfinite(v) for v in (value if isinstance(value, list) else [value]))


@pytest.mark.parametrize("method", ["vanilla", "ssa-co", "ssa-hybrid", "bert-mask", "asa", "bernoulli-mask", "ssaf"])
def test_every_sentence_method_fine_tunes_on_a_custom_file(method, keyword_files, tiny_model_dir, tmp_path):
    """Two epochs, so the methods that remake the training set each epoch (SSA's probing, BERT-mask) do so."""
    cfg = custom_cfg(tmp_path, *keyword_files, model=str(tiny_model_dir), method=method, epochs=2, max_len=32,
                     batch_size=16, lr=1e-3)
    result = finetune(cfg)
    assert result["status"] == "complete" and result["task"] == "custom"
    assert all(finite(entry["train_loss"]) for entry in result["history"])
    assert set(result["dev"]) == {"accuracy"} and 0.0 <= result["dev"]["accuracy"] <= 1.0
    if get_method(method).epoch_data is not None:
        assert result["history"][1]["labelled"] > 0  # epoch 2 trained on examples the method relabelled
    lines = (tmp_path / "run" / "dev_predictions.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 33
    assert {line.split("\t")[1] for line in lines[1:]} <= {"negative", "neutral", "positive"}


def test_a_preset_folder_and_a_test_file_give_dev_and_test_metrics(tiny_model_dir, tmp_path):
    folder = sst5_folder(tmp_path / "sst5", splits=("train", "dev"))
    test_file = sst5_folder(tmp_path / "held_out", splits=("test",), n=24, seed=1) / "test.jsonl"
    cfg = FinetuneConfig(task="sst5", data_dir=str(folder), test_file=str(test_file), model=str(tiny_model_dir),
                         epochs=1, max_len=32, batch_size=16, lr=1e-3, output_dir=str(tmp_path / "run"))
    result = finetune(cfg)
    assert result["task"] == "sst5" and set(result) >= {"dev", "test"}
    assert set(result["dev"]) == set(result["test"]) == {"accuracy"}
    assert len((tmp_path / "run" / "test_predictions.tsv").read_text().splitlines()) == 1 + 24


def sst5_from_sst2(glue_dir, n_train, n_dev):
    """Five classes a model can learn from SST-2 training phrases (whose dev set is all long sentences, so both
    splits come from train, disjoint): up to 2 words -> 2; else the sentiment, split by length (up to 8 words:
    1 negative, 3 positive; longer: 0 negative, 4 positive)."""
    rows = []
    for ex in batching.subsample(glue.load_split("sst2", "train", glue_dir), n_train + n_dev, seed=0):
        words = len(ex.texts[0].split())
        label = 2 if words <= 2 else (3 if ex.label else 1) if words <= 8 else (4 if ex.label else 0)
        rows.append((ex.texts[0], str(label)))
    return rows[:n_train], rows[n_train:]


MINILM_RECIPE = {"epochs": 2, "max_len": 64, "batch_size": 16, "lr": 2e-4, "bucket_by_length": True}  # ~90 CPU-s a run


@pytest.mark.glue
@pytest.mark.slow
def test_minilm_learns_a_five_class_tsv_made_from_sst2(glue_dir, minilm_dir, tmp_path):
    train_rows, dev_rows = sst5_from_sst2(glue_dir, 256, 128)
    train = write_delimited(tmp_path / "train.tsv", ["text", "label"], train_rows, "\t")
    dev = write_delimited(tmp_path / "dev.tsv", ["text", "label"], dev_rows, "\t")
    result = finetune(custom_cfg(tmp_path, train, dev, model=str(minilm_dir), **MINILM_RECIPE))
    losses = [entry["train_loss"] for entry in result["history"]]
    majority = max(sum(y == c for _, y in dev_rows) for c in "01234") / len(dev_rows)  # 0.27
    assert result["task"] == "custom" and losses[-1] < losses[0]
    assert result["dev"]["accuracy"] > majority + 0.05, (result["dev"], majority)  # 0.53 when written


@pytest.mark.glue
@pytest.mark.slow
def test_minilm_learns_a_pair_regression_csv_made_from_stsb(glue_dir, minilm_dir, tmp_path):
    """STS-B's pairs under column names of our own, the scores centred on 0 (STS-B's 0-5 minus 2.5): a fresh
    regression head starts near their mean, so the few steps go to the signal, not to learning the offset."""
    def copy(split, n):
        rows = [(*ex.texts, f"{ex.label - 2.5:.3f}")
                for ex in batching.subsample(glue.load_split("stsb", split, glue_dir), n, seed=0)]
        return write_delimited(tmp_path / f"{split}.csv", ["left", "right", "similarity"], rows, ",")

    cfg = custom_cfg(tmp_path, copy("train", 256), copy("dev", 128), task_type="regression",
                     text_columns="left,right", label_column="similarity", model=str(minilm_dir), **MINILM_RECIPE)
    result = finetune(cfg)
    losses = [entry["train_loss"] for entry in result["history"]]
    assert losses[-1] < losses[0] and result["dev"]["pearson"] > 0.3, result["dev"]  # 0.48 when written
