"""`glue-submission`: GLUE's test splits read by header, the leaderboard's zip (names, header, index order, label
spelling, row counts, STS-B's range), its `--check` against the test files the zip was made for, the fill for a task
without a run, and bad input stopped before a model loads."""
import csv
import hashlib
import io
import json
import random
import shutil
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from course_lib.lab import glue_submission
from course_lib.lab import glue_test_splits
from course_lib.lab.glue_submission import check_zip, write_submission
from course_lib.lab.glue_test_splits import TEST_SPLITS, read_test
from course_lib.readers import glue_files
from course_lib.runtime.errors import UsageError
from course_lib.training.predict import predict_file
from course_lib.tasks import glue
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune
from sentiment_words import BAD, FILLER, GOOD

ELEVEN = [f"{name}.tsv" for name in ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI-m", "MNLI-mm", "QNLI", "RTE",
                                     "WNLI", "AX")]
MNLI_TEST_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                    "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]  # GLUE's MNLI test files


def _words(rng, label=None):
    words = rng.choices(FILLER, k=rng.randint(3, 9))
    if label is not None:
        words.insert(rng.randint(0, len(words)), rng.choice(GOOD if label else BAD))
    return " ".join(words)


def _write(path: Path, header: list[str], rows: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\t".join(map(str, r)) for r in [header, *rows]) + "\n")


def _shuffled_indices(n: int, rng) -> list[int]:
    """A test file's index column in an order that is not 0..n-1, so a writer that numbers rows by position
    fails."""
    indices = list(range(100, 100 + n))
    rng.shuffle(indices)
    return indices


@pytest.fixture(scope="module")
def mini_glue(tmp_path_factory) -> Path:
    """A GLUE download in miniature: SST-2, STS-B and MNLI with train, dev and test files in GLUE's layout (MNLI's
    full test header, AX under diagnostic/), RTE with a training set only (7 entailment, 13 not)."""
    root, rng = tmp_path_factory.mktemp("glue_download"), random.Random(0)
    for split, n in (("train", 48), ("dev", 16)):
        labels = [rng.randint(0, 1) for _ in range(n)]
        _write(root / "SST-2" / f"{split}.tsv", ["sentence", "label"], [[_words(rng, y), y] for y in labels])
        _write(root / "STS-B" / f"{split}.tsv", ["index", "genre", "sentence1", "sentence2", "score"],
               [[i, "x", _words(rng), _words(rng), round(rng.uniform(0, 5), 2)] for i in range(n)])
    _write(root / "SST-2" / "test.tsv", ["index", "sentence"], [[i, _words(rng, i % 2)]
                                                                 for i in _shuffled_indices(12, rng)])
    _write(root / "STS-B" / "test.tsv", ["index", "genre", "sentence1", "sentence2"],
           [[i, "x", _words(rng), _words(rng)] for i in _shuffled_indices(9, rng)])
    names = glue.GLUE_TASKS["mnli"].label_names
    pairs = [["sentence1", "sentence2", "gold_label"]]
    for split in ("train", "dev_matched", "dev_mismatched"):
        _write(root / "MNLI" / f"{split}.tsv", pairs[0], [[_words(rng), _words(rng), rng.choice(names)]
                                                          for _ in range(24 if split == "train" else 8)])
    for half, n in (("matched", 7), ("mismatched", 5)):
        _write(root / "MNLI" / f"test_{half}.tsv", MNLI_TEST_HEADER,
               [[i, 0, 0, "fiction", "(", "(", "(", "(", _words(rng), _words(rng)] for i in _shuffled_indices(n, rng)])
    _write(root / "diagnostic" / "diagnostic.tsv", ["index", "sentence1", "sentence2"],
           [[i, _words(rng), _words(rng)] for i in range(6)])
    rte = ["entailment"] * 7 + ["not_entailment"] * 13
    _write(root / "RTE" / "train.tsv", ["index", "sentence1", "sentence2", "label"],
           [[i, _words(rng), _words(rng), y] for i, y in enumerate(rte)])
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir, mini_glue) -> dict[str, Path]:
    """A tiny finished run of SST-2, STS-B and MNLI (seconds each)."""
    out = {}
    for task in ("sst2", "stsb", "mnli"):
        out[task] = tmp_path_factory.mktemp(f"run_{task}")
        finetune(FinetuneConfig(task=task, glue_dir=str(mini_glue), model=str(tiny_model_dir), epochs=1,
                                batch_size=8, lr=1e-3, max_len=32, output_dir=str(out[task])))
    return out


@pytest.fixture(scope="module")
def written(runs, mini_glue, tmp_path_factory) -> tuple[Path, dict]:
    to = tmp_path_factory.mktemp("zip") / "submission.zip"
    manifest = write_submission(list(runs.values()), to, fill_missing="majority", glue_dir=str(mini_glue))
    return to, manifest


def _tsv(archive: zipfile.ZipFile, name: str) -> list[list[str]]:
    return [line.split("\t") for line in archive.read(name).decode().splitlines()]


def _test_indices(path: Path, column: str = "index") -> list[int]:
    with open(path, newline="") as f:
        return [int(row[column]) for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def test_the_zip_holds_the_eleven_files_at_its_top_level_each_with_the_header(written):
    with zipfile.ZipFile(written[0]) as archive:
        assert sorted(archive.namelist()) == sorted([*ELEVEN, "manifest.json"])
        for name in ELEVEN:
            assert _tsv(archive, name)[0] == ["index", "prediction"], name


def test_rows_follow_the_test_files_index_column_in_file_order(written, mini_glue):
    with zipfile.ZipFile(written[0]) as archive:
        for name, path in (("SST-2.tsv", "SST-2/test.tsv"), ("STS-B.tsv", "STS-B/test.tsv"),
                           ("MNLI-m.tsv", "MNLI/test_matched.tsv"), ("MNLI-mm.tsv", "MNLI/test_mismatched.tsv"),
                           ("AX.tsv", "diagnostic/diagnostic.tsv")):
            assert [int(r[0]) for r in _tsv(archive, name)[1:]] == _test_indices(mini_glue / path), name


def test_predictions_are_what_predict_gives_the_same_rows_spelled_as_the_leaderboard_wants(written, runs, mini_glue,
                                                                                            tmp_path):
    """SST-2 as 0/1 and STS-B as a score clipped to [0, 5], each equal to `predict` on the test file's rows."""
    with zipfile.ZipFile(written[0]) as archive:
        sst2, stsb, mnli = (_tsv(archive, n)[1:] for n in ("SST-2.tsv", "STS-B.tsv", "MNLI-m.tsv"))
    by_predict = [json.loads(line) for line in
                  predict_file(runs["sst2"], mini_glue / "SST-2" / "test.tsv", tmp_path / "p.jsonl").read_text()
                  .splitlines()]
    assert [r[1] for r in sst2] == [row["label"] for row in by_predict] and {r[1] for r in sst2} <= {"0", "1"}
    scores = [json.loads(line)["score"] for line in
              predict_file(runs["stsb"], mini_glue / "STS-B" / "test.tsv", tmp_path / "s.jsonl").read_text()
              .splitlines()]
    assert [float(r[1]) for r in stsb] == pytest.approx([min(max(s, 0.0), 5.0) for s in scores], abs=5e-4)
    assert {r[1] for r in mnli} <= {"entailment", "neutral", "contradiction"}


def test_a_task_without_a_run_gets_its_training_sets_majority_and_the_manifest_says_so(written, mini_glue):
    to, manifest = written
    majority = Counter(row["label"] for row in csv.DictReader(open(mini_glue / "RTE" / "train.tsv"),
                                                              delimiter="\t")).most_common(1)[0][0]
    with zipfile.ZipFile(to) as archive:
        rte = _tsv(archive, "RTE.tsv")[1:]
        stored = json.loads(archive.read("manifest.json"))
    assert {r[1] for r in rte} == {majority} == {"not_entailment"}
    assert stored == manifest and stored["files"]["RTE"]["from"] == "fill"
    assert sorted(stored["filled"]) == ["CoLA", "MRPC", "QNLI", "QQP", "RTE", "WNLI"]
    assert stored["files"]["SST-2"]["run"].endswith(Path(stored["files"]["SST-2"]["run"]).name)
    assert "placeholder" in stored["files"]["MRPC"]["why"]  # no MRPC training set in this folder: said so
    assert len(rte) == TEST_SPLITS["RTE"].rows  # no RTE test file here: the release's 3000 rows from 0


def test_the_written_zip_passes_check(written, mini_glue):
    assert check_zip(written[0], str(mini_glue)) == []


@pytest.mark.parametrize("name, change, problem", [
    ("SST-2.tsv", lambda rows: [["id", "label"], *rows[1:]], "header"),
    ("SST-2.tsv", lambda rows: [rows[0], rows[2], rows[1], *rows[3:]], "the test file's order"),
    ("SST-2.tsv", lambda rows: [rows[0], [rows[1][0], "positive"], *rows[2:]], "'positive'"),
    ("STS-B.tsv", lambda rows: [rows[0], [rows[1][0], "5.5"], *rows[2:]], "outside 0 to 5"),
    ("MNLI-mm.tsv", lambda rows: rows[:-1], "rows, expected"),
    ("AX.tsv", None, "AX.tsv: missing"),
])
def test_check_names_the_first_problem(written, mini_glue, tmp_path, name, change, problem):
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(written[0]) as src, zipfile.ZipFile(bad, "w") as out:
        for member in src.namelist():
            if member != name:
                out.writestr(member, src.read(member))
            elif change is not None:
                rows = change(_tsv(src, member))
                out.writestr(member, "".join("\t".join(r) + "\n" for r in rows))
    problems = check_zip(bad, str(mini_glue))
    assert problems and problem in problems[0], problems


def test_check_refuses_files_in_a_folder(written, mini_glue, tmp_path):
    bad = tmp_path / "folder.zip"
    with zipfile.ZipFile(written[0]) as src, zipfile.ZipFile(bad, "w") as out:
        for member in src.namelist():
            out.writestr(("glue/" if member == "CoLA.tsv" else "") + member, src.read(member))
    assert check_zip(bad, str(mini_glue))[0].startswith("glue/CoLA.tsv: files must sit at the zip's top level")


def test_offline_the_shipped_dev_files_stand_in_for_test_and_the_zip_says_it_is_not_for_the_leaderboard(
        runs, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GLUE_DIR", raising=False)
    offline = UsageError("offline")
    monkeypatch.setattr(glue_test_splits, "_from_hub", lambda test: (_ for _ in ()).throw(offline))
    monkeypatch.setattr(glue_files, "from_hub", lambda task, split: (_ for _ in ()).throw(offline))
    rows = read_test(TEST_SPLITS["SST-2"])
    assert rows.stand_in and rows.indices == list(range(872)) and "dev.tsv" in rows.origin
    assert [ex.texts for ex in rows.examples] == [ex.texts for ex in glue.load_split("sst2", "dev")]
    to = tmp_path / "offline.zip"
    assert glue_submission.main([str(runs["sst2"]), "--to", str(to), "--fill-missing", "majority"]) == 0
    out = capsys.readouterr().out
    assert "not a model" in out and "SST-2" in out and "filled without a run" in out
    manifest = json.loads(zipfile.ZipFile(to).read("manifest.json"))
    assert manifest["for_leaderboard"] is False and set(manifest["stand_ins"]) == {"CoLA", "SST-2", "STS-B", "RTE"}
    assert glue_submission.main(["--check", str(to)]) == 0


def test_reading_glue_test_files_by_header(tmp_path):
    """QQP's index column is `id`; a test file without its index column is one line naming it."""
    _write(tmp_path / "QQP" / "test.tsv", ["id", "question1", "question2"], [[3, "a?", "b?"], [1, "c?", "d?"]])
    rows = read_test(TEST_SPLITS["QQP"], tmp_path)
    assert rows.indices == [3, 1] and [ex.texts for ex in rows.examples] == [("a?", "b?"), ("c?", "d?")]
    _write(tmp_path / "CoLA" / "test.tsv", ["sentence"], [["no index here"]])
    with pytest.raises(UsageError, match=r"test.tsv: header lacks the column 'index'"):
        read_test(TEST_SPLITS["CoLA"], tmp_path)


def _refuse_model_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")
    monkeypatch.setattr(glue_submission, "predict_rows", refuse)


def _fake_run(folder: Path, task: str, status: str = "complete") -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"kind": "finetune", "status": status, "task": task,
                                                     "config": {"task": task}}))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize("case, message", [
    ("non-glue", "a run of 'wnut17', not a GLUE task"),
    ("twice", "two runs of sst2"),
    ("unfinished", "status 'running', not a finished fine-tuning run"),
    ("missing", "no run for CoLA, SST-2, MRPC"),
    ("no-index", "header lacks the column 'index'"),
    ("not-zip", "must name a .zip file"),
    ("truncated", "holds no finished fine-tuning run"),
])
def test_bad_input_is_one_line_exit_2_before_a_model_loads_and_nothing_is_written(case, message, runs, mini_glue,
                                                                                  tmp_path, monkeypatch, capsys):
    _refuse_model_loads(monkeypatch)
    glue_dir, to, fill = mini_glue, tmp_path / "out.zip", ["--fill-missing", "majority"]
    argv = {"non-glue": [_fake_run(tmp_path / "w", "wnut17")], "twice": [runs["sst2"], runs["sst2"]],
            "unfinished": [_fake_run(tmp_path / "u", "cola", status="running")], "missing": [runs["stsb"]],
            "no-index": [runs["sst2"]], "not-zip": [runs["sst2"]],
            "truncated": [_fake_run(tmp_path / "t", "rte")]}[case]
    if case == "truncated":  # a metrics.json cut short by a kill
        (tmp_path / "t" / "metrics.json").write_text('{"kind": "finetune", "stat')
    if case == "no-index":
        glue_dir = tmp_path / "glue"
        _write(glue_dir / "SST-2" / "test.tsv", ["sentence"], [["a sentence"]])
    if case == "not-zip":
        to = tmp_path / "out.tsv"
    if case == "missing":
        fill = []
    code = glue_submission.main([*map(str, argv), "--to", str(to), "--glue-dir", str(glue_dir), *fill])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not to.exists()


def test_the_command_line_names_the_command(tmp_path):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "course_lib", "glue-submission", "--check", str(tmp_path / "x.zip")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "is not a zip file" in done.stderr


def test_written_text_reads_back_with_a_tsv_reader(written):
    """The files are plain TSV: csv reads the same rows (no quoting, one trailing newline)."""
    with zipfile.ZipFile(written[0]) as archive:
        text = archive.read("MNLI-m.tsv").decode()
    rows = list(csv.reader(io.StringIO(text), delimiter="\t"))
    assert rows[0] == ["index", "prediction"] and text.endswith("\n") and not text.endswith("\n\n")


def _scored_run(folder: Path, task: str, method: str, seed: int, dev: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"kind": "finetune", "status": "complete", "task": task,
                                                     "config": {"task": task, "method": method, "seed": seed},
                                                     **dev}))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def test_a_sweeps_folder_gives_its_best_dev_seed_per_task_by_the_glue_score(tmp_path):
    """STS-B's best seed by the GLUE rule (mean of Pearson and Spearman) is not its best by Pearson alone."""
    sweep = tmp_path / "sweep"
    _scored_run(sweep / "a", "sst2", "vanilla", 0, {"dev": {"accuracy": 0.70}})
    best_sst2 = _scored_run(sweep / "b", "sst2", "vanilla", 1, {"dev": {"accuracy": 0.80}})
    _scored_run(sweep / "c", "stsb", "vanilla", 0, {"dev": {"pearson": 0.90, "spearmanr": 0.50}})
    best_stsb = _scored_run(sweep / "d", "stsb", "vanilla", 1, {"dev": {"pearson": 0.80, "spearmanr": 0.80}})
    assert sorted(glue_submission.expand([sweep])) == sorted([best_sst2, best_stsb])
    (sweep / "cut").mkdir()
    (sweep / "cut" / "metrics.json").write_text('{"kind": "fine')  # a run killed while writing: skipped
    asa = _scored_run(sweep / "e", "sst2", "asa", 0, {"dev": {"accuracy": 0.60}})
    with pytest.raises(UsageError, match=r"several methods \(asa, vanilla\): pick one with --method"):
        glue_submission.expand([sweep])
    assert glue_submission.expand([sweep], method="asa") == [asa]


@pytest.mark.parametrize("predicted, written", [(-3.0, "0.000"), (9.0, "5.000")])
def test_stsb_scores_in_the_zip_lie_in_0_to_5_whatever_the_model_predicts(predicted, written, runs, mini_glue,
                                                                          tmp_path):
    """A copy of the STS-B run whose head scores every pair -3 (or 9): its weights zeroed, its bias set. `predict`
    gives that score; the zip holds 0 (or 5) for every row, GLUE's range, and passes --check."""
    run = tmp_path / "stsb"
    shutil.copytree(runs["stsb"], run)
    weights = load_file(run / "model.safetensors")
    weights["classifier.weight"].zero_()
    weights["classifier.bias"].fill_(predicted)
    save_file(weights, run / "model.safetensors")
    test_file = mini_glue / "STS-B" / "test.tsv"
    scores = {json.loads(line)["score"] for line in
              predict_file(run, test_file, tmp_path / "s.jsonl").read_text().splitlines()}
    assert scores == {predicted}
    to = tmp_path / "stsb.zip"
    write_submission([run], to, fill_missing="majority", glue_dir=str(mini_glue))
    with zipfile.ZipFile(to) as archive:
        rows = _tsv(archive, "STS-B.tsv")[1:]
    assert [r[1] for r in rows] == [written] * len(_test_indices(test_file)) and check_zip(to) == []


def _released_cola(glue_dir: Path, rng) -> Path:
    """A CoLA test file in GLUE's released layout (index, sentence), 1063 rows as the release has, not the
    shipped stand-in's 1043, numbered in an order that is not 0..1062."""
    path = glue_dir / "CoLA" / "test.tsv"
    _write(path, ["index", "sentence"], [[i, _words(rng)] for i in _shuffled_indices(1063, rng)])
    return path


def test_a_zip_made_with_glue_dir_checks_without_it_against_the_test_files_its_manifest_names(
        runs, mini_glue, tmp_path, monkeypatch, capsys):
    """The reported bug: a correct zip made with --glue-dir failed `--check` without it ('CoLA.tsv: 1063 rows,
    expected 1043', the stand-in's count). The manifest names each file's test file and its sha256; the check
    reads those files, and refuses in one line, exit 2, naming the file, once one has changed or is gone."""
    monkeypatch.delenv("GLUE_DIR", raising=False)
    released = tmp_path / "glue"
    shutil.copytree(mini_glue, released)
    cola = _released_cola(released, random.Random(1))
    to = tmp_path / "released.zip"
    assert glue_submission.main([*map(str, runs.values()), "--to", str(to), "--glue-dir", str(released),
                                 "--fill-missing", "majority"]) == 0
    capsys.readouterr()
    assert glue_submission.main(["--check", str(to)]) == 0, capsys.readouterr().out
    assert "passes" in capsys.readouterr().out
    manifest = json.loads(zipfile.ZipFile(to).read("manifest.json"))
    assert manifest["files"]["CoLA"]["made_for"] == {"kind": "file", "path": str(cola.resolve()), "rows": 1063,
                                                     "sha256": hashlib.sha256(cola.read_bytes()).hexdigest()}
    assert manifest["files"]["SST-2"]["made_for"]["path"] == str((released / "SST-2" / "test.tsv").resolve())
    original = cola.read_text()
    header, first, *rest = original.splitlines(keepends=True)
    cola.write_text("".join([header, first.replace("\t", "\tnot ", 1), *rest]))  # a sentence, not the rows
    _check_refuses(to, capsys, f"CoLA's predictions were made for {cola.resolve()}, which has changed since")
    cola.write_text(original)
    (released / "SST-2" / "test.tsv").unlink()
    _check_refuses(to, capsys, f"SST-2's predictions were made for {(released / 'SST-2' / 'test.tsv').resolve()}, "
                               f"which is missing")


def _check_refuses(zip_path: Path, capsys, message: str) -> None:
    """`--check` refuses the zip with exit 2 and one line on stderr holding `message`."""
    code, err = glue_submission.main(["--check", str(zip_path)]), capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, (code, err)


def test_a_zip_filled_without_test_files_checks_against_the_release_count_it_was_written_with(written):
    """The module's zip was made with a GLUE folder without CoLA's test file, so CoLA was filled over the
    release's 1063 rows; checked without the folder it passes, not against the shipped stand-in's 1043."""
    assert check_zip(written[0]) == []
    assert json.loads(zipfile.ZipFile(written[0]).read("manifest.json"))["files"]["CoLA"]["made_for"] == {
        "kind": "release", "rows": 1063}
