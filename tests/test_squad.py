"""SQuAD v1.1 / v2.0 data side: reading and its one-line errors, article splits, loading, windows, batches, span
decoding, and the scores against values worked out by hand.

The real-data tests read the official dev-v1.1.json from $SQUAD_DIR, else the repository's data/squad; the
SQuAD 2.0 cases are built inline or from that file (questions paired with another article's paragraph, marked
impossible).
"""
from __future__ import annotations

import itertools
import json
import sys
import types
from pathlib import Path

import pytest
import torch

from course_lib.readers import local_data
from course_lib.readers.squad_json import load_squad, read_squad, split_by_article, write_article_split
from course_lib.runtime.errors import UsageError
from course_lib.tasks.squad import (
    QAExample,
    apply_null_threshold,
    best_null_threshold,
    collate_squad,
    decode_spans,
    encode_squad,
    exact_match,
    f1,
    first_sentence_baseline,
    get_version,
    normalize_answer,
    squad_scores,
    write_squad_predictions,
)


@pytest.fixture(scope="module")
def tokenizer():
    from course_lib.model.weights import load_pretrained

    try:
        _, tok = load_pretrained()  # the packaged uncased MiniLM, offline
    except UsageError as err:
        pytest.skip(f"no packaged model: {err}")
    return tok


@pytest.fixture(scope="module")
def dev_file() -> Path:
    path = local_data.data_folder("SQUAD_DIR") / "dev-v1.1.json"  # never skipped: the file is shipped
    assert path.is_file(), f"no SQuAD v1.1 dev file at {path}"
    return path


@pytest.fixture(scope="module")
def dev_examples(dev_file) -> list[QAExample]:
    return read_squad(dev_file)


def example(qid: str, answers: list[str], context: str = "", impossible: bool = False) -> QAExample:
    """A question for scoring tests: only id, answers and is_impossible matter there."""
    return QAExample(qid, "t", context or " ".join(answers), "q?", answers, [0] * len(answers), impossible)


# ----------------------------------------------------------------------------------------------
# Normalisation, exact match, F1


@pytest.mark.parametrize("text, normal", [
    ("The Denver Broncos!", "denver broncos"),
    ("  an  apple,\ta day ", "apple day"),
    ("theater and Anthem", "theater and anthem"),  # articles only as whole words
    ("A.D. 1066", "ad 1066"),
    ("Levi's Stadium", "levis stadium"),
    ("the", ""),
])
def test_normalize_answer(text, normal):
    assert normalize_answer(text) == normal


def test_exact_match_and_f1_by_hand():
    assert exact_match("the Broncos.", ["Denver Broncos", "Broncos"]) == 1.0
    assert exact_match("Denver", ["Denver Broncos"]) == 0.0
    # overlap 2 of 3 predicted tokens, 2 of 2 gold: P = 2/3, R = 1, F1 = 2PR/(P+R) = 0.8
    assert f1("Denver Broncos won", ["Denver Broncos"]) == pytest.approx(0.8)
    # multiset overlap: 'broncos' twice predicted, once gold -> common 1, P = 1/2, R = 1, F1 = 2/3
    assert f1("Broncos Broncos", ["Broncos"]) == pytest.approx(2 / 3)
    # best over golds: 'santa clara' vs 'santa clara california' -> P = 1, R = 2/3, F1 = 0.8; vs the stadium 0
    assert f1("Santa Clara", ["Santa Clara, California", "Levi's Stadium"]) == pytest.approx(0.8)
    assert f1("Stadium Levi's", ["Santa Clara, California", "Levi's Stadium"]) == 1.0  # order does not matter
    assert f1("gold", ["golden"]) == 0.0


def test_empty_answers_mean_no_answer():
    assert exact_match("", []) == f1("", []) == 1.0
    assert f1("The", []) == 1.0  # only an article: empty after normalisation
    assert exact_match("Broncos", []) == f1("Broncos", []) == 0.0
    assert exact_match("", ["Broncos"]) == f1("", ["Broncos"]) == 0.0
    # a gold that normalises to nothing ('.' in three v1.1 dev questions): equal for exact match, but no
    # shared token for F1, as the official v1.1 script scores it
    assert exact_match("", ["."]) == 1.0 and f1("", ["."]) == f1(".", ["."]) == 0.0


def test_v11_scores_by_hand():
    examples = [example("a", ["Denver Broncos", "Broncos"]), example("b", ["Carolina Panthers"]),
                example("c", ["Santa Clara"])]
    predictions = {"a": "broncos", "b": "the Panthers", "c": "nothing", "extra": "ignored"}
    scores = squad_scores(predictions, examples, "v1.1")
    assert scores == pytest.approx({"exact_match": 100 / 3, "f1": 100 * (1 + 2 / 3 + 0) / 3})
    with pytest.raises(UsageError, match=r"predictions lack 1 of 3 question ids \(first: 'c'\)"):
        squad_scores({"a": "", "b": ""}, examples, "1.1")


# ----------------------------------------------------------------------------------------------
# SQuAD 2.0: the no-answer threshold


def v2_case():
    """Seven questions, three of them without an answer; per question: prediction, null_score_diff, and its
    exact / F1 when answered (no answer scores 1 on the impossible ones, 0 on the others)."""
    rows = [  # id, gold answers, prediction, diff          answered: exact, F1
        ("a", ["Denver Broncos"], "Denver Broncos", -2.0),  # 1, 1
        ("b", ["Carolina Panthers"], "the Panthers", -1.5),  # 0, 2/3
        ("c", [], "", -1.0),  # 1, 1 (predicts no answer anyway)
        ("d", ["Santa Clara, California"], "Santa Clara", -0.5),  # 0, 0.8
        ("e", [], "Levi's Stadium", 0.5),  # 0, 0
        ("f", ["gold"], "golden", 1.0),  # 0, 0
        ("g", [], "1966", 2.0),  # 0, 0
    ]
    examples = [example(qid, golds, context="x", impossible=not golds) for qid, golds, _, _ in rows]
    return examples, {r[0]: r[2] for r in rows}, {r[0]: r[3] for r in rows}


def test_v2_threshold_search_by_hand():
    examples, predictions, diffs = v2_case()
    scores = squad_scores(predictions, examples, "v2.0", diffs)
    # Exact, summed, answering in order of diff: nothing answered 3 (c, e, g right) -> a 4 -> b 4 -> c 4 -> d 4
    # -> e 3 -> f 3 -> g 2: best 4/7 at diff -2 (a later threshold must score strictly higher).
    assert scores["best_exact"] == pytest.approx(100 * 4 / 7)
    assert scores["best_exact_thresh"] == -2.0
    # F1: 3 -> a 4 -> b 4 + 2/3 -> c the same -> d 4 + 2/3 + 0.8 -> e minus 1 -> ...: best at diff -0.5
    best_f1 = 100 * (4 + 2 / 3 + 0.8) / 7
    assert scores["best_f1"] == pytest.approx(best_f1)
    assert scores["best_f1_thresh"] == -0.5
    # At the F1 threshold: a, b, c, d answered; e, f, g get no answer (right for e and g, wrong for f).
    assert scores["exact_match"] == pytest.approx(100 * 4 / 7)  # a, c, e, g
    assert scores["f1"] == pytest.approx(best_f1)
    assert scores["HasAns_total"] == 4 and scores["NoAns_total"] == 3
    assert scores["HasAns_exact"] == pytest.approx(25.0)  # a of a, b, d, f
    assert scores["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3 + 0.8 + 0) / 4)
    assert scores["NoAns_exact"] == scores["NoAns_f1"] == 100.0


def test_v2_scores_without_diffs_take_predictions_as_they_are():
    examples, predictions, _ = v2_case()
    scores = squad_scores(predictions, examples, "v2.0")
    assert "best_f1" not in scores
    assert scores["exact_match"] == pytest.approx(100 * 2 / 7)  # a, c
    assert scores["NoAns_exact"] == pytest.approx(100 / 3)  # only c
    assert scores["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3 + 0.8 + 0) / 4)


def test_applying_the_chosen_threshold_gives_its_scores():
    examples, predictions, diffs = v2_case()
    decoded = {qid: {"text": predictions[qid], "null_score_diff": diff} for qid, diff in diffs.items()}
    at_threshold = squad_scores(apply_null_threshold(decoded, -0.5), examples, "v2.0")
    tuned = squad_scores(predictions, examples, "v2.0", diffs)
    for key in ("exact_match", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1"):
        assert at_threshold[key] == pytest.approx(tuned[key])


def test_v2_tied_diffs_are_answered_together():
    """A right answer and a wrong answer to an impossible question share diff 0: no threshold answers one
    without the other, so answering both (1 of 2) is no better than answering neither (1 of 2)."""
    examples = [example("has", ["Broncos"]), example("none", [], context="x", impossible=True)]
    scores = squad_scores({"has": "Broncos", "none": "Panthers"}, examples, "v2.0", {"has": 0.0, "none": 0.0})
    assert scores["best_exact"] == scores["best_f1"] == 50.0
    assert scores["best_f1_thresh"] == -1.0  # answer nothing: 1 below the smallest diff
    assert scores["HasAns_exact"] == 0.0 and scores["NoAns_exact"] == 100.0
    assert best_null_threshold({"x": 1.0, "y": 0.0}, {"x": 0.0, "y": 1.0}, {"x": 0.0, "y": 1.0}) == (100.0, 0.0)


def test_v2_file_reads_impossible_questions(tmp_path):
    doc = {"version": "v2.0", "data": [{"title": "Stadium", "paragraphs": [{
        "context": "Levi's Stadium is in Santa Clara.",
        "qas": [{"id": "yes", "question": "Where is it?", "is_impossible": False,
                 "answers": [{"text": "Santa Clara", "answer_start": 21}]},
                {"id": "no", "question": "Who built it?", "is_impossible": True, "answers": [],
                 "plausible_answers": [{"text": "Levi's", "answer_start": 0}]}]}]}]}
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(doc))
    yes, no = read_squad(path)
    assert (yes.answers, yes.answer_starts, yes.is_impossible) == (["Santa Clara"], [21], False)
    assert (no.answers, no.is_impossible) == ([], True)
    assert load_squad("v2.0", "dev", data_dir=tmp_path)[1].id == "no"


def v2_from_v11(dev_file: Path, tmp_path: Path) -> Path:
    """Article 0 of the v1.1 dev file, plus, in each of its first three paragraphs, the first two questions of
    article 1's first paragraph, marked impossible (their answers become plausible_answers)."""
    doc = json.loads(dev_file.read_text(encoding="utf-8"))
    first, second = doc["data"][0], doc["data"][1]
    strangers = second["paragraphs"][0]["qas"][:2]
    for p, paragraph in enumerate(first["paragraphs"][:3]):
        paragraph["qas"] += [{"id": f"{qa['id']}_in_{p}", "question": qa["question"], "is_impossible": True,
                              "answers": [], "plausible_answers": qa["answers"]} for qa in strangers]
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [first]}), encoding="utf-8")
    return path


def test_v2_fixture_from_the_real_file(dev_file, tmp_path):
    examples = read_squad(v2_from_v11(dev_file, tmp_path))
    impossible = [ex for ex in examples if ex.is_impossible]
    n, n_none = len(examples), len(impossible)
    assert n_none == 6 and all(not ex.answers for ex in impossible)
    perfect = {ex.id: "" if ex.is_impossible else ex.answers[0] for ex in examples}
    scores = squad_scores(perfect, examples, "v2.0")
    assert scores["exact_match"] == scores["f1"] == scores["NoAns_exact"] == scores["HasAns_f1"] == 100.0
    assert (scores["HasAns_total"], scores["NoAns_total"]) == (n - n_none, n_none)
    # answer the impossible ones anyway: they are all wrong, the rest right
    eager = {**perfect, **{ex.id: "Super Bowl" for ex in impossible}}
    assert squad_scores(eager, examples, "v2.0")["exact_match"] == pytest.approx(100 * (n - n_none) / n)
    # diffs that separate the two groups: the threshold answers exactly the answerable ones
    diffs = {ex.id: 1.0 if ex.is_impossible else -1.0 for ex in examples}
    scores = squad_scores(eager, examples, "v2.0", diffs)
    assert scores["best_exact"] == scores["best_f1"] == scores["exact_match"] == 100.0
    assert scores["best_exact_thresh"] == scores["best_f1_thresh"] == -1.0


# ----------------------------------------------------------------------------------------------
# Bad files: one line naming the file and the position


def good_doc() -> dict:
    context = "The Denver Broncos beat the Carolina Panthers."
    return {"version": "1.1", "data": [
        {"title": "One", "paragraphs": [
            {"context": context, "qas": [
                {"id": "q1", "question": "Who won?", "answers": [{"text": "Denver Broncos", "answer_start": 4}]},
                {"id": "q2", "question": "Who lost?",
                 "answers": [{"text": "Carolina Panthers", "answer_start": 28}]}]},
            {"context": context, "qas": [
                {"id": "q3", "question": "Who?", "answers": [{"text": "Broncos", "answer_start": 11}]}]}]},
        {"title": "Two", "paragraphs": [
            {"context": context, "qas": [
                {"id": "q4", "question": "Who?", "answers": [{"text": "Panthers", "answer_start": 37}]}]}]}]}


def _break(change):
    doc = good_doc()
    change(doc)
    return json.dumps(doc)


def _qa(doc, a, p, q):
    return doc["data"][a]["paragraphs"][p]["qas"][q]


BAD_FILES = {
    "not json": ("{'data': [", r"dev\.json: not JSON \("),
    "not squad": (json.dumps({"version": "1.1", "articles": []}),
                  r"dev\.json: not SQuAD JSON: expected an object with a 'data' list"),
    "no paragraphs": (json.dumps({"data": [{"title": "x", "text": "y"}]}),
                      r"dev\.json: data\[0\]: not a SQuAD article: expected a 'paragraphs' list"),
    "no id": (_break(lambda d: _qa(d, 0, 1, 0).pop("id")),
              r"dev\.json: data\[0\]\.paragraphs\[1\]\.qas\[0\]: question has no 'id' \(found None\)"),
    "empty id": (_break(lambda d: _qa(d, 0, 0, 1).update(id="")),
                 r"dev\.json: data\[0\]\.paragraphs\[0\]\.qas\[1\]: question has no 'id'"),
    "duplicate id": (_break(lambda d: _qa(d, 1, 0, 0).update(id="q2")),
                     (r"dev\.json: data\[1\]\.paragraphs\[0\]\.qas\[0\]: duplicate id 'q2' "
                      r"\(first at data\[0\]\.paragraphs\[0\]\.qas\[1\]\)")),
    "answer_start off": (_break(lambda d: _qa(d, 0, 0, 1)["answers"][0].update(answer_start=27)),
                         (r"dev\.json: data\[0\]\.paragraphs\[0\]\.qas\[1\]\.answers\[0\]: answer_start 27 "
                          r"does not point at the answer text 'Carolina Panthers' \(the context there reads "
                          r"' Carolina Panther'\)")),
    "no answers": (_break(lambda d: _qa(d, 1, 0, 0).update(answers=[])),
                   (r"dev\.json: data\[1\]\.paragraphs\[0\]\.qas\[0\]: question 'q4' has no answers and is "
                    r"not marked is_impossible")),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files_fail_in_one_line_naming_file_and_position(case, tmp_path):
    text, message = BAD_FILES[case]
    path = tmp_path / "dev.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=message) as caught:
        read_squad(path)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(str(path))


def test_good_doc_reads(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(good_doc()))
    examples = read_squad(path)
    assert [ex.id for ex in examples] == ["q1", "q2", "q3", "q4"]
    assert [ex.title for ex in examples] == ["One", "One", "One", "Two"]
    first, rest = split_by_article(examples, 1)
    assert [ex.id for ex in first] == ["q1", "q2", "q3"] and [ex.id for ex in rest] == ["q4"]
    with pytest.raises(UsageError, match=r"first_n 2 must leave articles on both sides.*has 2 articles"):
        split_by_article(examples, 2)


# ----------------------------------------------------------------------------------------------
# Loading: a file, a folder, the hub


def test_load_prefers_a_file_then_the_folder(tmp_path, monkeypatch):
    (tmp_path / "mine.json").write_text(json.dumps(good_doc()))
    assert len(load_squad("v1.1", "train", files={"train": tmp_path / "mine.json"})) == 4
    monkeypatch.setenv("SQUAD_DIR", str(tmp_path))
    with pytest.raises(UsageError, match=r"missing '.*train-v1\.1\.json' \(JSON files there: mine\.json\): pass "
                                         r"the train file itself \(write_article_split"):
        load_squad("v1.1", "train")
    (tmp_path / "dev-v1.1.json").write_text(json.dumps(good_doc()))
    assert len(load_squad("1.1", "validation")) == 4
    with pytest.raises(UsageError, match=r"unknown SQuAD split 'test' \(valid: dev, train, validation\)"):
        load_squad("v1.1", "test")
    with pytest.raises(UsageError, match=r"unknown SQuAD version 'v3' \(valid: v1\.1, v2\.0\)"):
        get_version("v3")


def fake_datasets(monkeypatch, load_dataset) -> None:
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))


def test_offline_does_not_try_the_hub(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the hub was tried offline")

    fake_datasets(monkeypatch, never)
    monkeypatch.delenv("SQUAD_DIR", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(UsageError, match=r"no SQuAD v2\.0 train file and the hub is off .*: pass the train file "
                                         r"itself, set SQUAD_DIR .* train-v2\.0\.json, or go online"):
        load_squad("v2.0", "train")


def test_hub_rows_become_examples(monkeypatch):
    asked = []

    def load_dataset(name, split):
        asked.append((name, split))
        return {"id": ["1", "2"], "title": ["T", "T"], "context": ["Broncos won.", "Broncos won."],
                "question": ["Who won?", "Who lost?"],
                "answers": [{"text": ["Broncos"], "answer_start": [0]}, {"text": [], "answer_start": []}]}

    fake_datasets(monkeypatch, load_dataset)
    for name in ("SQUAD_DIR", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    won, lost = load_squad("v2.0", "dev")
    assert asked == [("rajpurkar/squad_v2", "validation")]
    assert (won.answers, won.answer_starts, won.is_impossible, lost.is_impossible) == (["Broncos"], [0], False, True)

    def offline(name, split):
        raise ConnectionError("no network")

    fake_datasets(monkeypatch, offline)
    with pytest.raises(UsageError, match=r"could not load SQuAD v1\.1 train from the hub \(ConnectionError\): .*"
                                         r"hub dataset rajpurkar/squad\)"):
        load_squad("v1.1", "train")


# ----------------------------------------------------------------------------------------------
# Windows and batches

NAMES = ["Maria Keller", "Tomas Okonkwo", "Ingrid Salo", "Pedro Almeida", "Yuki Tanaka", "Amara Diallo"]


def long_paragraph() -> tuple[str, list[QAExample]]:
    """A paragraph of 36 sentences (several hundred tokens), one question per sentence whose answer is a name."""
    sentences, facts = [], []
    for i in range(36):
        year, name = 1900 + 3 * i, NAMES[i % len(NAMES)]
        sentences.append(f"In {year}, the harbour club hired {name} as coach number {i + 1}.")
        facts.append((year, name))
    context = " ".join(sentences)
    examples, position = [], 0
    for i, (year, name) in enumerate(facts):
        position = context.index(f"In {year}", position)
        start = context.index(name, position)
        examples.append(QAExample(f"q{i}", "Harbour", context, f"Whom did the club hire in {year}?",
                                  [name], [start]))
    return context, examples


def test_windows_recover_every_answer(tokenizer):
    context, examples = long_paragraph()
    max_len, stride = 64, 16
    features = encode_squad(examples, tokenizer, max_len=max_len, stride=stride, max_query_len=24,
                            training=False, chunk_size=7)
    assert all(len(f["input_ids"]) <= max_len for f in features)
    assert len(features) > 2 * len(examples)  # the paragraph needs several windows
    by_id = {ex.id: ex for ex in examples}
    for ex in examples:
        windows = [f for f in features if f["example_id"] == ex.id]
        spans = [[s for s in f["offsets"] if s is not None] for f in windows]
        for before, after in itertools.pairwise(spans):
            assert before[-stride:] == after[:stride]  # consecutive windows share `stride` context tokens
        assert spans[0][0][0] == 0 and spans[-1][-1][1] == len(context)  # together they cover the paragraph
        assert any(f["label"] != (0, 0) for f in windows)  # names are 2-4 tokens: whole in some window
    gold_start = {ex.id: ex.answer_starts[0] for ex in examples}
    for f in features:
        ex = by_id[f["example_id"]]
        assert f["context"] is ex.context  # shared, not copied
        start, end = f["label"]
        window = [s for s in f["offsets"] if s is not None]
        whole_inside = window[0][0] <= gold_start[ex.id] and gold_start[ex.id] + len(ex.answers[0]) <= window[-1][1]
        assert ((start, end) != (0, 0)) == whole_inside
        if whole_inside:
            assert context[f["offsets"][start][0]:f["offsets"][end][1]] == ex.answers[0]
    training = encode_squad(examples, tokenizer, max_len=max_len, stride=stride, max_query_len=24)
    assert [f["label"] for f in training] == [f["label"] for f in features]
    assert "offsets" not in training[0] and "context" not in training[0]


def test_long_questions_are_clipped_and_small_windows_refused(tokenizer):
    _, (ex, *_) = long_paragraph()
    ex.question = "   " + " ".join(["why"] * 50) + "?"
    (first, *_) = encode_squad([ex], tokenizer, max_len=64, stride=16, max_query_len=10, training=False)
    sep = first["input_ids"].index(tokenizer.sep_token_id)
    assert sep == 11  # [CLS] + 10 question tokens
    with pytest.raises(UsageError, match=r"max_len 64 leaves no room .* use max_len >= max_query_len \+ stride "
                                         r"\+ 4 = 84"):
        encode_squad([ex], tokenizer, max_len=64, stride=16, max_query_len=64)


def test_real_windows_recover_token_aligned_answers(dev_examples, tokenizer):
    """On real paragraphs with 64-token windows sharing 16 tokens: every first gold answer of at most
    stride + 1 tokens lies whole in some window (whatever the window start, the next one starts less than
    64 - q - 3 - 16 tokens later), so some window labels it; the labelled span, cut from the context, is the
    gold text exactly when the gold starts and ends on token boundaries (it may end mid-token: '1978' for '7')."""
    examples, stride = dev_examples[:240], 16
    features = encode_squad(examples, tokenizer, max_len=64, stride=stride, max_query_len=24, training=False)
    labelled = {}
    for f in features:
        if f["label"] != (0, 0):
            (start, _), (_, end) = f["offsets"][f["label"][0]], f["offsets"][f["label"][1]]
            labelled.setdefault(f["example_id"], set()).add(f["context"][start:end])
    aligned = 0
    for ex in examples:
        tokens = tokenizer(ex.context, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        first, last = ex.answer_starts[0], ex.answer_starts[0] + len(ex.answers[0])
        inside = [span for span in tokens if span[0] < last and span[1] > first]
        if len(inside) > stride + 1:
            continue
        assert ex.id in labelled
        if inside[0][0] == first and inside[-1][1] == last:
            aligned += 1
            assert labelled[ex.id] == {ex.answers[0]}
        else:
            assert all(ex.answers[0] in text for text in labelled[ex.id])
    assert aligned >= 0.95 * len(examples)


def test_collate_pads_and_stacks_labels():
    features = [{"input_ids": [101, 7, 102], "token_type_ids": [0, 0, 0], "label": (0, 0)},
                {"input_ids": [101, 7, 102, 8, 102], "token_type_ids": [0, 0, 0, 1, 1], "label": (3, 3)}]
    batch = collate_squad(features, pad_token_id=0)
    assert batch["input_ids"].tolist() == [[101, 7, 102, 0, 0], [101, 7, 102, 8, 102]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["token_type_ids"][1].tolist() == [0, 0, 0, 1, 1]
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == [[0, 0], [3, 3]]


# ----------------------------------------------------------------------------------------------
# Decoding


CONTEXT = "alpha bravo charl delta echoo foxtr"  # six 5-letter words: token k covers chars 6k to 6k+5


def window(qid: str) -> dict:
    """[CLS] q q [SEP] c0..c5 [SEP]: the context tokens are positions 4 to 9."""
    offsets = [None] * 4 + [(6 * k, 6 * k + 5) for k in range(6)] + [None]
    return {"input_ids": [0] * 11, "example_id": qid, "offsets": offsets, "context": CONTEXT}


def logits(values: dict[int, float], length: int = 11) -> torch.Tensor:
    row = torch.zeros(length)
    for position, value in values.items():
        row[position] = value
    return row


def test_decode_picks_the_best_valid_span():
    ex = QAExample("q", "t", CONTEXT, "?", ["bravo"], [6])
    # start: question token 1 highest (not context), c1 = pos 5, c4 = pos 8, c0 = pos 4 low;
    # end: c0 = pos 4 highest (ends before c1), c3 = pos 7, c5 = pos 9; [CLS] 1 + 1.
    start = logits({0: 1.0, 1: 10.0, 4: -5.0, 5: 5.0, 8: 4.0})
    end = logits({0: 1.0, 4: 9.0, 7: 3.0, 9: 2.0})
    decoded = decode_spans([start], [end], [window("q")], [ex])["q"]
    # c1..c3 = 5 + 3 = 8 beats c1..c5 = 7, c4..c5 = 6, c0..c0 = 4; the question token and c1..c0 do not count
    assert decoded == {"text": "bravo charl delta", "score": 8.0, "null_score_diff": 2.0 - 8.0, "start": 6}
    assert CONTEXT[6:6 + len(decoded["text"])] == decoded["text"]
    # at most 2 tokens: c1..c3 and c1..c5 are too long; c4..c5 = 6 beats c1..c1 = c1..c2 = 5
    short = decode_spans([start], [end], [window("q")], [ex], max_answer_length=2)["q"]
    assert (short["text"], short["score"]) == ("echoo foxtr", 6.0)
    # one candidate each: start c1, end c0 -> no valid pair, so no answer
    assert decode_spans([start], [end], [window("q")], [ex], n_best=1)["q"] == {
        "text": "", "score": 2.0, "null_score_diff": 0.0, "start": -1}


def test_decode_takes_the_best_window_and_the_lowest_null():
    ex = QAExample("q", "t", CONTEXT, "?", ["delta"], [18])
    first = (logits({0: 0.5, 5: 2.0}), logits({0: 0.5, 5: 2.0}))  # c1..c1 = 4, null 1: the lowest
    second = (logits({0: 3.0, 7: 4.0, 11: 50.0}, 13), logits({0: 3.0, 7: 4.0, 12: 50.0}, 13))  # padded past 11
    decoded = decode_spans([first[0], second[0]], [first[1], second[1]], [window("q"), window("q")], [ex])["q"]
    assert decoded == {"text": "delta", "score": 8.0, "null_score_diff": 1.0 - 8.0, "start": 18}
    assert apply_null_threshold({"q": decoded}, -8.0) == {"q": ""}
    assert apply_null_threshold({"q": decoded}, 0.0) == {"q": "delta"}


def test_decode_after_encode_round_trip(tokenizer):
    """Logits that point at each window's label decode back to the gold text."""
    _, examples = long_paragraph()
    features = encode_squad(examples[:6], tokenizer, max_len=64, stride=16, max_query_len=24, training=False)
    starts = [logits({f["label"][0]: 5.0}, len(f["input_ids"])) for f in features]
    ends = [logits({f["label"][1]: 5.0}, len(f["input_ids"])) for f in features]
    decoded = decode_spans(starts, ends, features, examples[:6])
    assert {qid: d["text"] for qid, d in decoded.items()} == {ex.id: ex.answers[0] for ex in examples[:6]}


# ----------------------------------------------------------------------------------------------
# Predictions files, the baseline and the real file


def test_write_predictions_and_null_odds(tmp_path):
    decoded = {"a": {"text": "Broncos", "score": 3.0, "null_score_diff": -1.5}, "b": ""}
    paths = write_squad_predictions(tmp_path / "predictions.json", decoded, {"a": -1.5, "b": 2})
    assert [p.name for p in paths] == ["predictions.json", "predictions_null_odds.json"]
    assert json.loads(paths[0].read_text()) == {"a": "Broncos", "b": ""}
    assert json.loads(paths[1].read_text()) == {"a": -1.5, "b": 2.0}


def test_real_dev_file_and_article_split(dev_file, dev_examples, tmp_path):
    assert len(dev_examples) == 10_570 and len({ex.id for ex in dev_examples}) == 10_570
    train, held_out = split_by_article(dev_examples, 38)
    assert (len(train), len(held_out)) == (8_582, 1_988)  # dev-v1.1's README numbers
    assert not {ex.context for ex in train} & {ex.context for ex in held_out}
    train_path, eval_path = write_article_split(dev_file, 38, tmp_path)
    assert [ex.id for ex in read_squad(train_path)] == [ex.id for ex in train]
    assert [ex.id for ex in read_squad(eval_path)] == [ex.id for ex in held_out]
    with pytest.raises(UsageError, match=r"first_n 48 .*has 48 articles \(valid: 1 to 47\)"):
        write_article_split(dev_file, 48, tmp_path)


def test_baseline_scores_far_below_a_perfect_predictor(dev_examples):
    baseline = first_sentence_baseline(dev_examples)
    assert baseline[dev_examples[0].id] == ("Super Bowl 50 was an American football game to determine the champion "
                                            "of the National Football League (NFL) for the 2015 season.")
    perfect = squad_scores({ex.id: ex.answers[0] for ex in dev_examples}, dev_examples, "v1.1")
    assert perfect == {"exact_match": 100.0, "f1": 100.0}
    # the last gold of question 57340d12... is '.': exact, but no token in common (see test_empty_answers...)
    last = squad_scores({ex.id: ex.answers[-1] for ex in dev_examples}, dev_examples, "v1.1")
    assert last == pytest.approx({"exact_match": 100.0, "f1": 100 * (10_570 - 1) / 10_570})
    scores = squad_scores(baseline, dev_examples, "v1.1")
    assert scores["exact_match"] < 1.0 and 2.0 < scores["f1"] < 20.0
