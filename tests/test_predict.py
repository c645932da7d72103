"""`predict`: a finished run's model on a file of new rows, read with the run's column rules, one prediction per
row; the same classes the run itself gave its dev set; a bad file is one line and exit 2 before the model loads."""
import csv
import json
from pathlib import Path

import pytest

from course_lib import cli
from course_lib.training import predict as predict_module
from course_lib.runtime.errors import UsageError
from course_lib.training.predict import predict_file
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, tiny_model_dir, keyword_glue):
    out = tmp_path_factory.mktemp("sst2_run")
    finetune(FinetuneConfig(task="sst2", glue_dir=str(keyword_glue), model=str(tiny_model_dir), epochs=1,
                            batch_size=16, lr=1e-3, max_len=32, output_dir=str(out)))
    return out


def test_predicting_the_dev_file_gives_the_runs_own_dev_predictions(sst2_run, keyword_glue, tmp_path):
    written = predict_file(sst2_run, keyword_glue / "SST-2" / "dev.tsv", tmp_path / "pred.jsonl", batch_size=5)
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    with open(sst2_run / "dev_predictions.tsv", newline="") as f:
        own = [row["prediction"] for row in csv.DictReader(f, delimiter="\t")]
    with open(keyword_glue / "SST-2" / "dev.tsv", newline="") as f:
        sentences = [row["sentence"] for row in csv.DictReader(f, delimiter="\t")]
    assert [row["label"] for row in rows] == own and len(rows) == 64
    assert [row["sentence"] for row in rows] == sentences
    assert all(0.5 <= row["probability"] <= 1 for row in rows)


def test_each_label_and_probability_are_the_models_own_argmax_and_softmax(sst2_run, keyword_glue, tmp_path):
    """Against the fine-tuned model run by hand on the same sentences, one at a time (no padding): the printed
    probability is its softmax's largest entry, not a rescaled or tempered one, and the label that entry's name."""
    import torch

    from course_lib.tasks.registry import run_task
    from course_lib.training.task_model import finished_config, load_finetuned

    written = predict_file(sst2_run, keyword_glue / "SST-2" / "dev.tsv", tmp_path / "pred.jsonl", batch_size=7)
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    model, tokenizer = load_finetuned(sst2_run)
    label_names = run_task(finished_config(sst2_run)).label_names  # SST-2's file names: "0", "1"
    for row in rows[:16]:
        batch = tokenizer(row["sentence"], truncation=True, max_length=32, return_tensors="pt")
        with torch.no_grad():
            logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits[0]
        probabilities = logits.softmax(-1)
        assert row["probability"] == pytest.approx(probabilities.max().item(), abs=2e-6)  # rounded to 6 places
        assert row["label"] == label_names[int(probabilities.argmax())]


def test_a_csv_or_json_lines_file_of_new_sentences_needs_only_the_text_column(sst2_run, tmp_path):
    (tmp_path / "mine.csv").write_text('id,sentence\n1,"a great, warm film"\n2,dull and slow\n')
    (tmp_path / "mine.jsonl").write_text('{"sentence": "a great, warm film"}\n{"sentence": "dull and slow"}\n')
    by_csv = [json.loads(x) for x in predict_file(sst2_run, tmp_path / "mine.csv").read_text().splitlines()]
    by_jsonl = [json.loads(x) for x in predict_file(sst2_run, tmp_path / "mine.jsonl").read_text().splitlines()]
    assert by_csv == by_jsonl and [r["sentence"] for r in by_csv] == ["a great, warm film", "dull and slow"]
    assert (sst2_run / "predictions_mine.jsonl").is_file()


def test_a_missing_column_is_one_line_and_exit_2_before_the_model_loads(sst2_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(predict_module, "load_finetuned", lambda run: pytest.fail("the model was loaded"))
    (tmp_path / "bad.tsv").write_text("text\tlabel\na fine film\t1\n")
    assert cli.main(["predict", "--run", str(sst2_run), "--file", str(tmp_path / "bad.tsv")]) == 2
    err = capsys.readouterr().err
    assert err == (f"error: {tmp_path / 'bad.tsv'}: header lacks column 'sentence' (expected sentence; found text, "
                   f"label)\n")
    assert cli.main(["predict", "--run", str(tmp_path), "--file", str(tmp_path / "bad.tsv")]) == 2
    assert "holds no completed fine-tuning run" in capsys.readouterr().err


def test_predicting_a_tagging_runs_dev_words_gives_its_own_dev_tags(tiny_model_dir, tmp_path):
    """The dev file's words alone (a word per line), predicted, give the tags of the run's own dev predictions."""
    out = tmp_path / "run"
    finetune(FinetuneConfig(task="wnut17", model=str(tiny_model_dir), max_train_samples=16, epochs=1, batch_size=8,
                            lr=1e-3, max_len=32, output_dir=str(out)))
    own = [block.split("\n") for block in (out / "dev_predictions.conll").read_text().strip("\n").split("\n\n")]
    words_only = "\n\n".join("\n".join(line.split("\t")[0] for line in block) for block in own) + "\n"
    (tmp_path / "words.txt").write_text(words_only)
    rows = [json.loads(x) for x in predict_file(out, tmp_path / "words.txt").read_text().splitlines()]
    assert [row["words"] for row in rows] == [[line.split("\t")[0] for line in block] for block in own]
    assert [row["tags"] for row in rows] == [[line.split("\t")[2] for line in block] for block in own]


def test_predicting_a_multiple_choice_runs_questions_without_labels_gives_its_own_choices(tiny_model_dir, tmp_path):
    colours = ["red", "blue", "green"]
    records = [{"ind": i, "ctx": f"she threw the {colours[i % 3]} ball", "endings": [f"the {c} one" for c in colours],
                "label": i % 3} for i in range(12)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "unlabelled.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "label"}) + "\n"
                                                       for r in records))
    out = tmp_path / "run"
    finetune(FinetuneConfig(task="custom", task_type="multiple-choice", train_file=str(tmp_path / "q.jsonl"),
                            validation_file=str(tmp_path / "q.jsonl"), model=str(tiny_model_dir), epochs=1,
                            batch_size=4, lr=1e-3, max_len=24, output_dir=str(out)))
    with open(out / "dev_predictions.tsv", newline="") as f:
        own = {row["id"]: (int(row["prediction"]), row["prediction_text"]) for row in csv.DictReader(f, delimiter="\t")}
    rows = [json.loads(x) for x in predict_file(out, tmp_path / "unlabelled.jsonl").read_text().splitlines()]
    assert {row["id"]: (row["choice"], row["answer"]) for row in rows} == own and len(rows) == 12
    assert all(1 / 3 <= row["probability"] <= 1 for row in rows)
    _probabilities_are_the_softmax_over_each_questions_own_scores(out, tmp_path / "unlabelled.jsonl", rows)
    (tmp_path / "bad.jsonl").write_text('{"ind": 0, "ctx": "a ball", "endings": ["one"]}\n')
    with pytest.raises(UsageError, match=r"'endings' must be a list of at least 2 texts"):
        predict_file(out, tmp_path / "bad.jsonl")


def test_the_speed_bench_times_both_on_the_same_sentences_and_they_agree(sst2_run, keyword_glue, tmp_path):
    from benchmarks.predict_speed import measure

    sentences = [line.split("\t")[0] for line in (keyword_glue / "SST-2" / "dev.tsv").read_text().splitlines()[1:]]
    result = measure(sst2_run, sentences, batch_size=8, repeats=1, work=tmp_path)
    assert result["sentences"] == 64 and set(result["seconds"]) == {"ours", "transformers"}
    assert result["same_class"] == 1.0  # the same weights: the same class for every sentence


def test_predicting_a_span_qa_runs_dev_questions_without_answers_gives_its_own_answers(tiny_model_dir, tmp_path):
    """The questions the run scored, their answers removed, predicted: the answers of its own predictions file,
    each found in its context at the start given."""
    out = tmp_path / "run"
    finetune(FinetuneConfig.from_dict(dict(task="squad_articles", model=str(tiny_model_dir), max_train_samples=16,
                                           max_eval_samples=6, epochs=1, batch_size=8, lr=1e-3, max_len=64,
                                           doc_stride=24, max_query_length=16, output_dir=str(out))))
    own = json.loads((out / "dev_predictions.json").read_text())
    doc = json.loads((ROOT / "data" / "squad" / "dev-v1.1.json").read_text())
    for article in doc["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [{"id": qa["id"], "question": qa["question"]} for qa in paragraph["qas"]
                                if qa["id"] in own]
    (tmp_path / "questions.json").write_text(json.dumps(doc))
    rows = [json.loads(x) for x in predict_file(out, tmp_path / "questions.json").read_text().splitlines()]
    assert {row["id"]: row["answer"] for row in rows} == own and len(rows) == 6
    contexts = {qa["id"]: p["context"] for a in doc["data"] for p in a["paragraphs"] for qa in p["qas"]}
    assert all(contexts[r["id"]][r["start"]:r["start"] + len(r["answer"])] == r["answer"] for r in rows)


def _probabilities_are_the_softmax_over_each_questions_own_scores(run, file, rows):
    """The printed probability is the largest entry of the softmax over the question's choice scores, the model
    run on that question alone (no batch, no padding from other questions): not a rescaled or tempered one."""
    import torch

    from course_lib.tasks.registry import get_family, run_task
    from course_lib.training.task_model import finished_config, load_finetuned

    cfg = finished_config(run)
    task = run_task(cfg)
    family = get_family(task.family)
    model, tokenizer = load_finetuned(run)
    for question, row in list(zip(family.read_inputs(task, file), rows))[:6]:
        batch = family.collate(family.encode([question], tokenizer, cfg, training=False), tokenizer.pad_token_id)
        with torch.no_grad():
            scores = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits[0]
        probabilities = scores.softmax(-1)
        assert row["probability"] == pytest.approx(probabilities.max().item(), abs=2e-6)  # rounded to 6 places
        assert row["choice"] == int(probabilities.argmax())

