"""The span-QA family end to end: our span head against transformers' BertForQuestionAnswering on the real weights,
fine-tuning through the CLI on SQuAD windows, and the methods that do and do not apply to it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

from benchmarks import squad_reference
from course_lib.methods.registry import METHODS
from course_lib.model.heads import SpanHead
from course_lib.model.weights import load_pretrained
from course_lib.readers import local_data, squad_json
from course_lib.tasks import squad
from course_lib.tasks.registry import run_task
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune

ROOT = Path(__file__).resolve().parents[1]
SQUAD_DIR = local_data.data_folder("SQUAD_DIR")  # $SQUAD_DIR, else the repository's data/squad: never skipped


@pytest.fixture(scope="module")
def article_split(tmp_path_factory):
    """Train on the first 38 articles of the dev file, evaluate on the last 10: no paragraph in both."""
    return squad_json.write_article_split(Path(SQUAD_DIR) / "dev-v1.1.json", 38, tmp_path_factory.mktemp("squad"))


def test_span_head_matches_hugging_faces_question_answering_model(minilm_dir, article_split):
    ours_encoder, tokenizer = load_pretrained()
    ours = SpanHead(ours_encoder).eval()
    theirs = transformers.BertForQuestionAnswering.from_pretrained(str(minilm_dir)).eval()
    theirs.qa_outputs.load_state_dict(ours.qa_outputs.state_dict())
    examples = squad_json.read_squad(article_split[1])[:6]
    batch = squad.collate_squad(squad.encode_squad(examples, tokenizer, 384, 128), tokenizer.pad_token_id)
    logits, _ = ours.logits(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    want = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                  token_type_ids=batch["token_type_ids"], start_positions=batch["labels"][:, 0],
                  end_positions=batch["labels"][:, 1])
    torch.testing.assert_close(logits[..., 0], want.start_logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(logits[..., 1], want.end_logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(ours.loss(logits, batch["labels"]), want.loss, atol=1e-5, rtol=1e-5)


def smoke_config(tmp_path, files, model, **overrides) -> FinetuneConfig:
    return FinetuneConfig.from_dict(dict(
        task="squad", model=str(model), train_file=str(files[0]), validation_file=str(files[1]), max_train_samples=32,
        max_eval_samples=24, max_len=64, doc_stride=16, max_query_length=24, epochs=1, batch_size=16, lr=1e-3,
        output_dir=str(tmp_path), **overrides))


@pytest.mark.parametrize("method", ["vanilla", "ssaf", "asa", "bernoulli-mask"])
def test_a_smoke_qa_fine_tune_runs_and_writes_official_predictions(method, tiny_model_dir, article_split, tmp_path):
    result = finetune(smoke_config(tmp_path, article_split, tiny_model_dir, method=method))
    assert result["status"] == "complete" and set(result["dev"]) == {"exact_match", "f1"}
    assert all(torch.isfinite(torch.tensor(entry["train_loss"])) for entry in result["history"])
    assert 0.0 <= result["dev"]["exact_match"] <= result["dev"]["f1"] <= 100.0
    answers = json.loads((tmp_path / "dev_predictions.json").read_text())
    questions = [ex for ex in squad_json.read_squad(article_split[1]) if ex.id in answers]  # the run's seeded 24
    assert len(questions) == len(answers) == 24
    scored = squad.squad_scores(answers, questions, "v1.1")
    assert scored["f1"] == pytest.approx(result["dev"]["f1"])  # the file holds what was scored


@pytest.mark.parametrize("method", ["ssa-hybrid"])  # ssa-co and bert-mask declare the same families (test_methods)
def test_ssa_methods_exit_2_with_one_line_on_qa(method, article_split, tmp_path):
    argv = [sys.executable, "-m", "course_lib", "finetune", "--task", "squad", "--method", method,
            "--train-file", str(article_split[0]), "--validation-file", str(article_split[1]),
            "--output-dir", str(tmp_path / "run")]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (f"error: method {method!r} does not apply to span_qa tasks "
                                     f"(it applies to: sentence)")
    assert not (tmp_path / "run").exists()


def test_a_bad_squad_file_is_one_line_before_training(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "abc def", "qas": [
        {"id": "q1", "question": "?", "answers": [{"text": "def", "answer_start": 1}]}]}]}]}))
    argv = [sys.executable, "-m", "course_lib", "finetune", "--task", "squad", "--train-file", str(bad),
            "--validation-file", str(bad), "--output-dir", str(tmp_path / "run")]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "bad.json: data[0].paragraphs[0].qas[0].answers[0]: answer_start 1 does not point at the answer text" \
        in result.stderr
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_squad_reference_trains_hugging_faces_model_from_our_initial_weights(tiny_model_dir, tmp_path):
    """The reference run starts where ours does (same encoder checkpoint, same seeded head), and the bench
    reports both and the baseline on the held-out articles."""
    torch.manual_seed(0)
    cfg = FinetuneConfig(task="squad", model=str(tiny_model_dir), max_len=64)
    encoder, tokenizer = load_pretrained(cfg.model)
    state = torch.random.get_rng_state()
    reference = squad_reference.build_reference(cfg, encoder, run_task(cfg), tokenizer).eval()
    same_encoder, _ = load_pretrained(cfg.model)
    torch.random.set_rng_state(state)  # our head draws its initial weights from where the reference's did
    ours = SpanHead(same_encoder).eval()
    batch = squad.collate_squad(squad.encode_squad(squad_json.read_squad(Path(SQUAD_DIR) / "dev-v1.1.json")[:4],
                                                   tokenizer, 64, 16, 24), tokenizer.pad_token_id)
    with torch.no_grad():
        want = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
        got = reference(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    budget = squad_reference.SquadBudget(train_questions=32, eval_questions=40, epochs=1, max_len=64, doc_stride=16,
                                         max_query_length=24)
    result = squad_reference.squad_reference(Path(SQUAD_DIR) / "dev-v1.1.json", tmp_path, str(tiny_model_dir),
                                             budget)
    assert "(40 questions)" in result["protocol"] and squad_reference.REFERENCE not in METHODS
    for name in ("ours", "hf", "baseline"):
        assert 0.0 <= result[name]["exact_match"] <= result[name]["f1"] <= 100.0
    assert "| first sentence of the paragraph |" in squad_reference.format_squad_reference(result)


def test_the_offline_article_split_comes_from_squad_dir_or_the_shipped_file(tmp_path, monkeypatch):
    monkeypatch.delenv("SQUAD_DIR", raising=False)
    for folder in (None, SQUAD_DIR):  # the repository's data/squad, then the variable
        if folder is not None:
            monkeypatch.setenv("SQUAD_DIR", str(folder))
        train, evaluate = squad_json.dev_article_split(tmp_path / str(bool(folder)))
        train_ids, eval_ids = ({q.id for q in squad_json.read_squad(f)} for f in (train, evaluate))
        assert (len(train_ids), len(eval_ids)) == (8582, 1988) and not train_ids & eval_ids


def test_without_the_repository_or_squad_dir_there_is_no_offline_split(tmp_path, monkeypatch, no_shipped_data):
    monkeypatch.delenv("SQUAD_DIR", raising=False)
    assert squad_json.dev_article_split(tmp_path) is None


def test_the_squad_articles_preset_reads_the_two_sides_of_the_article_cut(article_split, tmp_path):
    """`--task squad_articles` is the same protocol as the written split, read in memory from SQUAD_DIR or
    --validation-file: the same questions in the same order on each side, and no title on both."""
    from course_lib.tasks.registry import get_family, get_task

    task = get_task("squad_articles")
    for cfg in (FinetuneConfig(task="squad_articles", output_dir=str(tmp_path)),
                FinetuneConfig(task="squad_articles", output_dir=str(tmp_path),
                               validation_file=str(Path(SQUAD_DIR) / "dev-v1.1.json"))):
        train, dev = (get_family(task.family).read(task.bind(cfg), split, cfg) for split in ("train", "dev"))
        assert [q.id for q in train] == [q.id for q in squad_json.read_squad(article_split[0])]
        assert [q.id for q in dev] == [q.id for q in squad_json.read_squad(article_split[1])]
        assert len(dev) == 1988 and not {q.title for q in train} & {q.title for q in dev}


def test_the_squad_articles_preset_refuses_a_train_file_in_one_line(tmp_path):
    """The preset trains on the dev file's first articles, so a train file would be silently unread: refused."""
    out = subprocess.run([sys.executable, "-m", "course_lib", "finetune", "--task", "squad_articles",
                          "--train-file", str(tmp_path / "train.json"), "--output-dir", str(tmp_path / "run")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--train-file is not read for squad_articles" in out.stderr and "first 38 articles" in out.stderr


def test_squad_v2_answering_nothing_after_the_threshold_is_flagged():
    """Spans that vary, but all below the tuned no-answer threshold: every final answer is "no answer", F1 is the
    answer-nothing baseline, and the run says so (the raw span texts alone would not show it)."""
    from course_lib.tasks import span_qa

    context = "Broncos beat Panthers."
    questions = [squad.QAExample("q1", "T", context, "Who won?", ["Broncos"], [0]),
                 squad.QAExample("q2", "T", context, "Who lost?", ["Panthers"], [13]),
                 squad.QAExample("q3", "T", context, "Who sang?", [], [], is_impossible=True),
                 squad.QAExample("q4", "T", context, "Who danced?", [], [], is_impossible=True)]
    features = [{"example_id": q.id, "example": q} for q in questions]
    predictions = {q.id: {"text": text, "score": 0.0, "null_score_diff": diff}
                   for q, text, diff in zip(questions, ["beat", "beat", "Broncos", "beat"], [1.0, 2.0, 3.0, 4.0])}
    task = span_qa.SQUAD_TASKS[1]
    scores, problem = span_qa.score(task, predictions, features)
    assert scores["f1"] == 50.0 and scores["NoAns_f1"] == 100.0 and scores["HasAns_f1"] == 0.0
    assert problem == "all 4 answers are no answer: the scores are those of answering nothing"
    predictions["q1"] = {"text": "Broncos", "score": 0.0, "null_score_diff": -1.0}  # one right span: answered
    assert span_qa.score(task, predictions, features)[1] is None
