"""The CS224N default project's data files (`course_lib.readers.cs224n`): tab-separated `.csv` files with pandas'
unnamed index column and an id, read into examples that keep their ids; Quora's unlabelled rows dropped with one
warning; every other bad row one line naming file and line; the folder from --data-dir or CS224N_DATA_DIR; the
unlabelled test-student split; and one fine-tuning run on the files. The files are written here, in the course's
layout: its data is never shipped."""
import csv
import random

import pytest

from course_lib.readers import cs224n
from course_lib import cli
from course_lib.runtime.errors import UsageError
from course_lib.tasks import sentence
from course_lib.tasks.registry import every_task, get_task, run_task
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune
from sentiment_words import BAD, FILLER, GOOD

QUOTED = 'A ""quoted"" word, and a comma.'  # as the file holds it, inside quotes
UNQUOTED = 'A "quoted" word, and a comma.'  # as it reads

SST_TRAIN = ("\tid\tsentence\tsentiment\n"
             f'0\tsst-a1\t"{QUOTED}"\t3\n'
             "1\tsst-b2\tPlain and dull.\t0\n"
             "\n"  # a blank line is skipped
             "2\tsst-c3\tSuperb!\t4\n")
QUORA_TRAIN = ("\tid\tsentence1\tsentence2\tis_duplicate\n"
               "0\tq-1\tHow do I cook rice?\tWhat is the way to cook rice?\t1.0\n"
               "1\tq-2\tWhy is the sky blue?\tWhat is rice?\t0.0\n"
               "2\tq-3\tOne?\tTwo?\t\n"  # no label, as in the course's real Quora files
               "3\tq-4\tThree?\tFour?\t\n"
               f'4\tq-5\t"{QUOTED}"\tIs it one?\t1.0\n')
STS_TRAIN = ("\tid\tsentence1\tsentence2\tsimilarity\n"
             "0\ts-1\tA man plays.\tA man is playing.\t4.8\n"
             "1\ts-2\tA cat sleeps.\tA dog runs.\t0.0\n")
CFIMDB_TRAIN = ("\tid\tsentence\tsentiment\n"
                "0\tc-1\tA long, warm review.\t1\n"
                "1\tc-2\tA long, cold review.\t0\n")
TEST_STUDENT = {  # no label column
    "ids-sst": "\tid\tsentence\n0\tt-1\tUnseen one.\n1\tt-2\t\"Unseen, \"\"two\"\".\"\n",
    "quora": "\tid\tsentence1\tsentence2\n0\tt-1\tA?\tB?\n",
    "sts": "\tid\tsentence1\tsentence2\n0\tt-1\tA.\tB.\n",
    "ids-cfimdb": "\tid\tsentence\n0\tt-1\tA review.\n"}
TRAIN = {"ids-sst": SST_TRAIN, "quora": QUORA_TRAIN, "sts": STS_TRAIN, "ids-cfimdb": CFIMDB_TRAIN}


def course_folder(root, train=None, test_student=True):
    """The course's data folder: each task's train and dev files (the same rows), and its test-student file."""
    root.mkdir(parents=True, exist_ok=True)
    for stem, text in {**TRAIN, **(train or {})}.items():
        for split in ("train", "dev"):
            (root / f"{stem}-{split}.csv").write_text(text, encoding="utf-8")
        if test_student:
            (root / f"{stem}-test-student.csv").write_text(TEST_STUDENT[stem], encoding="utf-8")
    return root


@pytest.fixture(autouse=True)
def _no_course_variable(monkeypatch):
    monkeypatch.delenv(cs224n.ENV, raising=False)


def load(folder, task, split="train"):
    cfg = FinetuneConfig(task=task, data_dir=str(folder))
    return run_task(cfg).load(split, cfg)


# ----------------------------------------------------------------------------------------------
# Reading


def test_the_presets_are_registered_with_their_kind():
    assert [every_task()[p.name] for p in cs224n.PRESETS] == list(cs224n.PRESETS)
    assert get_task("CS224N_SST") is cs224n.cs224n_sst
    assert [(p.num_labels, p.metrics[0]) for p in cs224n.PRESETS] == [(5, "accuracy"), (2, "accuracy"),
                                                                        (1, "pearson"), (2, "accuracy")]
    assert cs224n.cs224n_sts.is_regression and cs224n.cs224n_sts.label_range == (0.0, 5.0)


def test_sst_reads_texts_with_quotes_undone_labels_and_ids(tmp_path):
    examples = load(course_folder(tmp_path / "data"), "cs224n_sst")
    assert all(isinstance(ex, sentence.Example) for ex in examples)
    assert [(ex.texts, ex.label, ex.id) for ex in examples] == [
        ((UNQUOTED,), 3, "sst-a1"), (("Plain and dull.",), 0, "sst-b2"), (("Superb!",), 4, "sst-c3")]


def test_sts_and_cfimdb_read_scores_and_binary_labels(tmp_path):
    folder = course_folder(tmp_path / "data")
    assert [(ex.texts, ex.label, ex.id) for ex in load(folder, "cs224n_sts", "dev")] == [
        (("A man plays.", "A man is playing."), 4.8, "s-1"), (("A cat sleeps.", "A dog runs."), 0.0, "s-2")]
    assert [(ex.label, ex.id) for ex in load(folder, "cs224n_cfimdb")] == [(1, "c-1"), (0, "c-2")]


def test_quora_drops_its_unlabelled_rows_with_one_warning_line(tmp_path, capsys):
    folder = course_folder(tmp_path / "data")
    examples = load(folder, "cs224n_para")
    assert [(ex.texts, ex.label, ex.id) for ex in examples] == [
        (("How do I cook rice?", "What is the way to cook rice?"), 1, "q-1"),
        (("Why is the sky blue?", "What is rice?"), 0, "q-2"), ((UNQUOTED, "Is it one?"), 1, "q-5")]
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and str(folder / "quora-train.csv") in lines[0]
    assert "dropped 2 rows" in lines[0] and "first at line 4" in lines[0]


def test_only_quora_is_lenient_about_an_empty_label(tmp_path, capsys):
    folder = course_folder(tmp_path / "data", {"ids-sst": "\tid\tsentence\tsentiment\n0\ta\tFine.\t2\n1\tb\tOdd.\t\n"})
    with pytest.raises(UsageError, match=r"ids-sst-train\.csv:3: empty label"):
        load(folder, "cs224n_sst")
    assert capsys.readouterr().err == ""


BAD_FILES = {  # case: (preset, stem, train file content, the message after the folder)
    "quora label 2.0": ("cs224n_para", "quora", QUORA_TRAIN.replace("\t0.0\n", "\t2.0\n"),
                        r"quora-train\.csv:3: unknown label '2\.0' \(valid: 0, 1\)"),
    "sst label 7": ("cs224n_sst", "ids-sst", SST_TRAIN.replace("\t4\n", "\t7\n"),
                    r"ids-sst-train\.csv:5: unknown label '7' \(valid: 0, 1, 2, 3, 4\)"),
    "cfimdb label 2": ("cs224n_cfimdb", "ids-cfimdb", CFIMDB_TRAIN.replace("\t0\n", "\t2\n"),
                       r"ids-cfimdb-train\.csv:3: unknown label '2' \(valid: 0, 1\)"),
    "sts score 5.5": ("cs224n_sts", "sts", STS_TRAIN.replace("4.8", "5.5"),
                      r"sts-train\.csv:2: score '5\.5' .*\(valid: 0 to 5\)"),
    "missing column": ("cs224n_para", "quora", QUORA_TRAIN.replace("is_duplicate", "duplicate"),
                       r"quora-train\.csv: header lacks column 'is_duplicate' \(expected id, sentence1, sentence2, "
                       r"is_duplicate; found \(unnamed\), id, sentence1, sentence2, duplicate"),
    "field count": ("cs224n_para", "quora", QUORA_TRAIN.replace("\tTwo?\t\n", "\tTwo?\n"),
                    r"quora-train\.csv:4: expected 5 tab-separated fields .* found 4"),
    "comma-separated": ("cs224n_sst", "ids-sst", ",id,sentence,sentiment\n0,a,Fine.,2\n",
                        r"ids-sst-train\.csv: header lacks column 'id' .*tab-separated"),
    "empty id": ("cs224n_sst", "ids-sst", SST_TRAIN.replace("sst-b2", " "), r"ids-sst-train\.csv:3: empty id"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_each_bad_row_is_one_line_naming_file_and_line(case, tmp_path):
    task, stem, text, message = BAD_FILES[case]
    folder = course_folder(tmp_path / "data", {stem: text})
    with pytest.raises(UsageError, match=message) as err:
        load(folder, task)
    assert "\n" not in str(err.value) and str(folder / f"{stem}-train.csv") in str(err.value)


def test_a_bad_label_through_the_command_line_exits_2_before_training(tmp_path, capsys):
    folder = course_folder(tmp_path / "data", {"quora": QUORA_TRAIN.replace("\t0.0\n", "\t2.0\n")})
    code = cli.main(["finetune", "--task", "cs224n_para", "--data-dir", str(folder),
                     "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"error: {folder / 'quora-train.csv'}:3: unknown label '2.0'")
    assert not any((tmp_path / "run").rglob("*"))  # stopped before a checkpoint or metrics.json


# ----------------------------------------------------------------------------------------------
# The folder and the unlabelled split


def test_the_folder_comes_from_data_dir_else_the_variable(tmp_path, monkeypatch):
    by_variable = course_folder(tmp_path / "env")
    by_option = course_folder(tmp_path / "option", {"ids-sst": "\tid\tsentence\tsentiment\n0\topt\tMine.\t1\n"})
    monkeypatch.setenv(cs224n.ENV, str(by_variable))
    cfg = FinetuneConfig(task="cs224n_sst")
    task = run_task(cfg)
    assert task.paths == {"train": by_variable / "ids-sst-train.csv", "dev": by_variable / "ids-sst-dev.csv"}
    assert [ex.id for ex in task.load("train", cfg)] == ["sst-a1", "sst-b2", "sst-c3"]
    assert [ex.id for ex in load(by_option, "cs224n_sst")] == ["opt"]  # --data-dir wins over the variable


def test_no_folder_says_how_to_obtain_the_data(tmp_path):
    with pytest.raises(UsageError, match=r"cs224n_para: no data folder: give --data-dir DIR or set CS224N_DATA_DIR "
                                         r"\(the course's data folder, holding quora-train\.csv") as err:
        run_task(FinetuneConfig(task="cs224n_para"))
    assert "\n" not in str(err.value) and "quora-train.csv" in str(err.value)
    with pytest.raises(UsageError, match=r"the train file of .*quora-train\.csv' does not exist"):
        run_task(FinetuneConfig(task="cs224n_para", data_dir=str(tmp_path)))


def test_test_student_reads_unlabelled_with_ids_and_is_never_scored(tmp_path):
    folder = course_folder(tmp_path / "data")
    cfg = FinetuneConfig(task="cs224n_sst", data_dir=str(folder))
    task = run_task(cfg)
    assert task.dev_splits == ("dev",) and "test" not in task.paths
    examples = task.load("test-student", cfg)
    assert [(ex.texts, ex.label, ex.id) for ex in examples] == [(("Unseen one.",), None, "t-1"),
                                                                 (('Unseen, "two".',), None, "t-2")]
    para = cs224n.read_unlabelled(cs224n.cs224n_para, folder / "quora-test-student.csv")
    assert [(ex.texts, ex.label, ex.id) for ex in para] == [(("A?", "B?"), None, "t-1")]
    unlabelled = str(folder / "ids-sst-test-student.csv")
    with pytest.raises(UsageError, match=r"header lacks column 'sentiment'"):  # no labels to train on
        run_task(FinetuneConfig(task="cs224n_sst", data_dir=str(folder), train_file=unlabelled)).load("train")


def test_a_folder_without_test_student_files_still_trains(tmp_path):
    folder = course_folder(tmp_path / "data", test_student=False)
    cfg = FinetuneConfig(task="cs224n_sts", data_dir=str(folder))
    task = run_task(cfg)
    assert task.unlabelled_path is None and len(task.load("dev", cfg)) == 2
    with pytest.raises(UsageError, match=r"cs224n_sts: no sts-test-student\.csv to predict on"):
        task.load("test-student", cfg)


# ----------------------------------------------------------------------------------------------
# Fine-tuning


def sst_rows(n, seed):
    """Five classes carried by words: GOOD words for 3-4, BAD for 0-1, none for 2."""
    rng, rows = random.Random(seed), []
    for i in range(n):
        label = rng.randrange(5)
        words = rng.choices(FILLER, k=rng.randint(3, 8))
        if label != 2:
            words.insert(0, rng.choice(GOOD if label > 2 else BAD))
        rows.append((i, f"id{seed}-{i}", " ".join(words) + ', "really".', str(label)))
    return rows


def test_finetune_on_the_course_sst_files(tiny_model_dir, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for split, n, seed in (("train", 48, 0), ("dev", 24, 1)):
        with open(folder / f"ids-sst-{split}.csv", "w", newline="", encoding="utf-8") as f:
            csv.writer(f, delimiter="\t", lineterminator="\n").writerows([("", "id", "sentence", "sentiment"),
                                                                         *sst_rows(n, seed)])
    assert '""really""."\t' in (folder / "ids-sst-dev.csv").read_text()  # quoted, as pandas writes it
    cfg = FinetuneConfig(task="cs224n_sst", data_dir=str(folder), model=str(tiny_model_dir), epochs=1, max_len=16,
                         batch_size=8, lr=1e-3, output_dir=str(tmp_path / "run"))
    result = finetune(cfg)
    assert result["status"] == "complete" and result["task"] == "cs224n_sst" and "test" not in result
    assert set(result["dev"]) == {"accuracy"} and 0.0 <= result["dev"]["accuracy"] <= 1.0
    lines = (tmp_path / "run" / "dev_predictions.tsv").read_text().splitlines()
    assert len(lines) == 1 + 24 and {line.split("\t")[1] for line in lines[1:]} <= set("01234")
