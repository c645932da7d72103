"""SQuAD v1.1 / v2.0 span question answering, the data side: the questions, windows, batches, span decoding and the
official scores (the files, article splits, versions and the questions they hold: `readers/squad_json.py`). It knows
nothing about the model: the head (two logits per token, start and end) and the training integration live elsewhere.

The pipeline, as BERT did it for SQuAD (Devlin et al. 2019, section 4.2 and 4.3):

    squad_json.load_squad      the questions (`QAExample`), each with its paragraph and gold answers
    encode_squad               [CLS] question [SEP] context-window [SEP]: long paragraphs become several windows
                               that overlap by `stride` tokens; the label is the gold span's (start, end) token,
                               or (0, 0) at [CLS] when the window does not hold it (or there is no answer)
    collate_squad              padded tensors, labels (B, 2)
    decode_spans               logits -> per question the best span over its windows, its score, and the
                               no-answer score difference that SQuAD 2.0 thresholds
    squad_scores               exact match and F1, on a 0-100 scale, as the official evaluation scripts compute

The scores are computed here because the usual ready-made versions are out of reach: the `evaluate` package
fetches its metric code from the Hugging Face hub (so it fails offline), and transformers 5 no longer ships
`transformers.data.metrics.squad_metrics`.
"""
from __future__ import annotations

import json
import os
import re
import string
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from course_lib.readers.squad_json import QAExample, SquadVersion, get_version  # the questions and versions read
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import atomic_write
from course_lib.tasks.batching import pad_tokens


# ----------------------------------------------------------------------------------------------
# Windows over long paragraphs, and batches


def _check_window(max_len: int, stride: int, max_query_len: int) -> None:
    """A window holds [CLS] q [SEP] c [SEP]: after a question of max_query_len tokens there must be room for
    more context than the `stride` tokens that consecutive windows share, or the windows never advance."""
    if stride < 0 or max_query_len < 1:
        raise UsageError(f"stride must be >= 0 and max_query_len >= 1, got stride {stride}, "
                         f"max_query_len {max_query_len}")
    if max_len < max_query_len + stride + 4:
        raise UsageError(f"max_len {max_len} leaves no room for context after a {max_query_len}-token question "
                         f"and a stride of {stride}: use max_len >= max_query_len + stride + 4 "
                         f"= {max_query_len + stride + 4}, or a smaller max_query_len or stride")


def _clip_questions(questions: list[str], tokenizer, max_query_len: int) -> list[str]:
    """Questions cut after their first max_query_len tokens (BERT's max_query_length), by cutting the text at
    that token's end: WordPiece matches greedily from the left, so the kept prefix tokenises the same.
    Leading spaces are dropped first (a few SQuAD questions start with many)."""
    questions = [q.lstrip() for q in questions]
    encoded = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    return [q if len(offsets) <= max_query_len else q[:offsets[max_query_len - 1][1]]
            for q, offsets in zip(questions, encoded["offset_mapping"])]


def _window_label(example: QAExample, offsets: list) -> tuple[int, int]:
    """(start, end) token of the first gold answer when the window holds all of it, else (0, 0): [CLS].

    Spaces at the ends of the answer text are skipped, so the span starts and ends on the answer's own
    characters rather than on the word before or after.
    """
    if example.is_impossible or not example.answers:
        return 0, 0
    text, char_start = example.answers[0], example.answer_starts[0]
    char_end = char_start + len(text.rstrip())
    char_start += len(text) - len(text.lstrip())
    context = [k for k, span in enumerate(offsets) if span is not None]
    if not context or offsets[context[0]][0] > char_start or offsets[context[-1]][1] < char_end:
        return 0, 0
    start = max(k for k in context if offsets[k][0] <= char_start)
    end = min(k for k in context if k >= start and offsets[k][1] >= char_end)
    return start, end


def encode_squad(examples: list[QAExample], tokenizer, max_len: int = 384, stride: int = 128,
                 max_query_len: int = 64, training: bool = True, chunk_size: int = 1000) -> list[dict]:
    """Features, one per window: [CLS] question [SEP] context window [SEP], at most `max_len` tokens, consecutive
    windows of one paragraph sharing `stride` context tokens (BERT's doc_stride), so every answer of at most
    stride + 1 tokens lies whole in some window (the next window starts `stride` tokens before this one ends).

    Each feature: "input_ids", "token_type_ids", "example_id" (the question id) and "label" (start, end) token
    (see `_window_label`). Evaluation features (training=False) also keep what decoding needs: "offsets", per
    token its (start_char, end_char) in the context or None for question and special tokens, and "context",
    the example's own string (shared, not copied). Training features leave the offsets out: on the full train
    file they would be tens of millions of Python tuples. Needs a fast tokenizer (offset mapping); it is
    called once per chunk of examples, since one call per example is many times slower.
    """
    _check_window(max_len, stride, max_query_len)
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(f"encode_squad needs a fast tokenizer (offset mapping), got {type(tokenizer).__name__}")
    features = []
    for first in range(0, len(examples), chunk_size):
        chunk = examples[first:first + chunk_size]
        encoded = tokenizer(_clip_questions([ex.question for ex in chunk], tokenizer, max_query_len),
                            [ex.context for ex in chunk], truncation="only_second", max_length=max_len,
                            stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                            return_token_type_ids=True)
        for i, example_index in enumerate(encoded["overflow_to_sample_mapping"]):
            example = chunk[example_index]
            offsets = [tuple(span) if part == 1 else None
                       for span, part in zip(encoded["offset_mapping"][i], encoded.sequence_ids(i))]
            feature = {"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i],
                       "example_id": example.id, "label": _window_label(example, offsets)}
            if not training:
                feature.update(offsets=offsets, context=example.context)
            features.append(feature)
    return features


def collate_squad(features: list[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Pad a batch to its own longest window; "labels" holds each window's (start, end) token."""
    batch = pad_tokens(features, pad_token_id)  # input_ids, attention_mask, token_type_ids: (B, L)
    batch["labels"] = torch.tensor([f["label"] for f in features], dtype=torch.long).reshape(len(features), 2)
    return batch


# ----------------------------------------------------------------------------------------------
# From logits to answers


def _as_array(logits) -> np.ndarray:
    if torch.is_tensor(logits):
        return logits.detach().to("cpu", torch.float64).numpy()
    return np.asarray(logits, dtype=np.float64)


def _best_span(start: np.ndarray, end: np.ndarray, offsets: list, n_best: int,
               max_answer_length: int) -> tuple[float, int, int] | None:
    """(score, start token, end token) of the window's best span, or None when it has no valid one.

    Candidates are the n_best highest start and the n_best highest end logits among the window's context
    tokens (filtering to the context first, so question tokens with high logits cannot crowd out every
    candidate); a pair is valid when start <= end and it spans at most max_answer_length tokens.
    """
    context = np.flatnonzero([span is not None for span in offsets])
    if context.size == 0:
        return None
    starts = context[np.argsort(-start[context], kind="stable")[:n_best]]
    ends = context[np.argsort(-end[context], kind="stable")[:n_best]]
    length = ends[None, :] - starts[:, None] + 1  # (n_best, n_best) span lengths in tokens
    scores = np.where((length >= 1) & (length <= max_answer_length),
                      start[starts][:, None] + end[ends][None, :], -np.inf)
    i, j = np.unravel_index(np.argmax(scores), scores.shape)
    return (float(scores[i, j]), int(starts[i]), int(ends[j])) if np.isfinite(scores[i, j]) else None


def _decode_example(example: QAExample, windows: list[tuple[dict, np.ndarray, np.ndarray]], n_best: int,
                    max_answer_length: int) -> dict:
    best, null_score = None, np.inf
    for feature, start, end in windows:
        offsets = feature["offsets"]
        start, end = start[:len(offsets)], end[:len(offsets)]  # drop the batch's padding
        null_score = min(null_score, float(start[0] + end[0]))  # [CLS]: position 0
        span = _best_span(start, end, offsets, n_best, max_answer_length)
        if span is not None and (best is None or span[0] > best[0]):
            best = (span[0], offsets[span[1]][0], offsets[span[2]][1])
    if best is None:  # no window has a valid span: answer nothing
        return {"text": "", "score": null_score, "null_score_diff": 0.0, "start": -1}
    return {"text": example.context[best[1]:best[2]], "score": best[0], "null_score_diff": null_score - best[0],
            "start": best[1]}


def decode_spans(start_logits, end_logits, features: list[dict], examples: list[QAExample], n_best: int = 20,
                 max_answer_length: int = 30) -> dict[str, dict]:
    """Per question, over all its windows: {"text", "score", "null_score_diff", "start"}.

    "text" is the best valid span's text cut from the context by its offsets (see `_best_span`), "start" its first
    character (-1: none), "score" its start + end logit. The no-answer score is the lowest [CLS] start + end logit over the question's windows
    and "null_score_diff" = no-answer score - best span score, as BERT's SQuAD 2.0 recipe does: SQuAD 2.0
    predicts no answer where it exceeds a threshold tuned on dev (`squad_scores`, `apply_null_threshold`).
    A question none of whose windows holds a valid span gets text "" and diff 0.0.

    start_logits[k], end_logits[k]: feature k's logits (tensor or list, possibly padded past its length).
    Features must come from encode_squad(..., training=False). Questions without a feature are left out.
    """
    if not len(start_logits) == len(end_logits) == len(features):
        raise ValueError(f"{len(start_logits)} start and {len(end_logits)} end logit rows for "
                         f"{len(features)} features: one row of each per feature")
    if n_best < 1 or max_answer_length < 1:
        raise UsageError(f"n_best and max_answer_length must be >= 1, got {n_best} and {max_answer_length}")
    if features and "offsets" not in features[0]:
        raise ValueError("features have no offsets: encode them with encode_squad(..., training=False)")
    windows: dict[str, list] = {}
    for feature, start, end in zip(features, start_logits, end_logits):
        windows.setdefault(feature["example_id"], []).append((feature, _as_array(start), _as_array(end)))
    return {ex.id: _decode_example(ex, windows[ex.id], n_best, max_answer_length)
            for ex in examples if ex.id in windows}


def apply_null_threshold(decoded: dict[str, dict], threshold: float = 0.0) -> dict[str, str]:
    """{id: text} with no answer ("") where null_score_diff > threshold (SQuAD 2.0); else the span's text."""
    return {qid: "" if d["null_score_diff"] > threshold else d["text"] for qid, d in decoded.items()}


# ----------------------------------------------------------------------------------------------
# The official scores, written from the definitions


_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize_answer(text: str) -> str:
    """The SQuAD normal form both sides are compared in: lower case, no ASCII punctuation, no English
    articles (a, an, the), single spaces. 'The Denver Broncos!' -> 'denver broncos'."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golds: list[str]) -> float:
    """1.0 when the prediction equals any gold answer after normalisation; an empty gold list means
    'no answer', matched only by an empty prediction."""
    return max(float(normalize_answer(prediction) == normalize_answer(gold)) for gold in golds or [""])


def _token_f1(prediction: str, gold: str) -> float:
    """F1 of one gold text; no shared token (an empty side included) is 0, as in both official scripts."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, golds: list[str]) -> float:
    """Token-level F1 of the normalised texts (overlap counted as a multiset), the best over the golds; an
    empty gold list means 'no answer': 1.0 iff the prediction is empty too.

    A gold text that normalises to nothing (v1.1's dev file has three '.' golds) shares no token with anything,
    so its F1 is 0 even against an empty prediction, while exact_match calls that pair equal: the v1.1 script's
    behaviour, kept so that v1.1 numbers compare with published ones.
    """
    if not golds:
        return float(not normalize_answer(prediction))
    return max(_token_f1(prediction, gold) for gold in golds)


def _golds(example: QAExample, version: SquadVersion) -> list[str]:
    """The texts a prediction is scored against. v2.0 drops gold texts that normalise to nothing and reads
    none left as 'no answer' (the v2.0 script's rule); v1.1 keeps every text, as its script does."""
    if not version.has_impossible:
        return list(example.answers)
    return [text for text in example.answers if normalize_answer(text)]


def _group_scores(em: dict, f1s: dict, has_answer: dict) -> dict[str, float]:
    """exact_match and f1 over all questions, and HasAns_ / NoAns_ over each group; a group's exact and f1 are
    left out when it is empty, its _total is always there."""
    result = {"exact_match": 100 * float(np.mean(list(em.values()))),
              "f1": 100 * float(np.mean(list(f1s.values())))}
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        ids = [qid for qid, has in has_answer.items() if has == wanted]
        result[f"{prefix}_total"] = len(ids)
        if ids:
            result[f"{prefix}_exact"] = 100 * float(np.mean([em[qid] for qid in ids]))
            result[f"{prefix}_f1"] = 100 * float(np.mean([f1s[qid] for qid in ids]))
    return result


def best_null_threshold(answered: dict[str, float], unanswered: dict[str, float],
                        null_score_diffs: dict[str, float]) -> tuple[float, float]:
    """(best score on a 0-100 scale, its threshold) over all thresholds t, answering where diff <= t and
    predicting no answer where diff > t; `answered[id]`/`unanswered[id]` are a question's score either way.

    Like the official v2.0 evaluation, thresholds are tried from "answer nothing" up through the diffs in
    increasing order, and a later one is taken only when it scores strictly higher. One difference: questions
    whose diffs tie are answered together, since no threshold separates them (the official loop scores after
    each question, so with ties it can report a score no threshold gives). When answering nothing is best the
    threshold reported is 1 below the smallest diff (the official script reports 0.0 there).
    """
    order = sorted(answered, key=lambda qid: null_score_diffs[qid])
    total = sum(unanswered[qid] for qid in order)
    best, best_threshold = total, null_score_diffs[order[0]] - 1.0
    i = 0
    while i < len(order):
        threshold = null_score_diffs[order[i]]
        while i < len(order) and null_score_diffs[order[i]] == threshold:
            total += answered[order[i]] - unanswered[order[i]]
            i += 1
        if total > best + 1e-9:
            best, best_threshold = total, float(threshold)
    return 100 * best / len(order), best_threshold


def _v2_scores(em: dict, f1s: dict, has_answer: dict, null_score_diffs: dict | None) -> dict[str, float]:
    if null_score_diffs is None:
        return _group_scores(em, f1s, has_answer)
    missing = [qid for qid in em if qid not in null_score_diffs]
    if missing:
        raise UsageError(f"null_score_diffs lack {len(missing)} of {len(em)} question ids (first: {missing[0]!r})")
    diffs = {qid: float(null_score_diffs[qid]) for qid in em}
    not_finite = [qid for qid, d in diffs.items() if not np.isfinite(d)]
    if not_finite:
        raise UsageError(f"null_score_diff of {not_finite[0]!r} is {diffs[not_finite[0]]}: must be a finite number")
    no_answer_score = {qid: float(not has) for qid, has in has_answer.items()}
    best_exact, exact_threshold = best_null_threshold(em, no_answer_score, diffs)
    best_f1, f1_threshold = best_null_threshold(f1s, no_answer_score, diffs)
    at_f1_threshold = {qid: diffs[qid] <= f1_threshold for qid in em}  # answered there
    result = _group_scores({q: em[q] if at_f1_threshold[q] else no_answer_score[q] for q in em},
                           {q: f1s[q] if at_f1_threshold[q] else no_answer_score[q] for q in em}, has_answer)
    result.update(best_exact=best_exact, best_exact_thresh=exact_threshold, best_f1=best_f1,
                  best_f1_thresh=f1_threshold)
    return result


def squad_scores(predictions: dict[str, str], examples: list[QAExample], version: str,
                 null_score_diffs: dict[str, float] | None = None) -> dict[str, float]:
    """Exact match and F1 (0-100, mean over questions of the best over each question's golds), as the
    official evaluation scripts define them.

    v1.1: {"exact_match", "f1"}; null_score_diffs are not used.
    v2.0: also HasAns_exact, HasAns_f1, HasAns_total and NoAns_exact, NoAns_f1, NoAns_total (a group's exact
    and f1 only when it is not empty). Without null_score_diffs the predictions are scored as they are ("" is
    no answer). With them (from `decode_spans`), the no-answer threshold is tuned on these very questions, as
    the official v2.0 script does with its na-prob file: best_exact / best_exact_thresh and best_f1 /
    best_f1_thresh (see `best_null_threshold`); then exact_match, f1 and the HasAns / NoAns numbers are all
    those at best_f1_thresh (no answer where diff > best_f1_thresh). Being tuned on the evaluation set, they
    are optimistic; apply the threshold to another set with `apply_null_threshold`.
    Every question needs a prediction: a missing one is an error, not a zero.
    """
    spec = get_version(version)
    if not examples:
        raise UsageError("no questions to score")
    missing = [ex.id for ex in examples if ex.id not in predictions]
    if missing:
        raise UsageError(f"predictions lack {len(missing)} of {len(examples)} question ids (first: {missing[0]!r})")
    golds = {ex.id: _golds(ex, spec) for ex in examples}
    em = {qid: exact_match(predictions[qid], gold) for qid, gold in golds.items()}
    f1s = {qid: f1(predictions[qid], gold) for qid, gold in golds.items()}
    if not spec.has_impossible:
        return {"exact_match": 100 * float(np.mean(list(em.values()))),
                "f1": 100 * float(np.mean(list(f1s.values())))}
    return _v2_scores(em, f1s, {ex.id: bool(ex.answers) for ex in examples}, null_score_diffs)


def write_squad_predictions(path: str | os.PathLike, predictions: dict,
                            null_score_diffs: dict[str, float] | None = None) -> list[Path]:
    """The official predictions file, {question id: answer text} ("" = no answer), written atomically; values
    may also be `decode_spans` entries (their "text" is written). With null_score_diffs (SQuAD 2.0) it also
    writes the na-prob file the official v2.0 script reads, {id: diff}, as `<stem>_null_odds.json` beside it.
    Returns the paths written."""
    path = Path(path)
    texts = {qid: value["text"] if isinstance(value, dict) else value for qid, value in predictions.items()}
    written = [(path, texts)]
    if null_score_diffs is not None:
        written.append((path.with_name(f"{path.stem}_null_odds.json"),
                        {qid: float(diff) for qid, diff in null_score_diffs.items()}))
    for out, content in written:
        text = json.dumps(content, ensure_ascii=False, indent=1)
        atomic_write(out, lambda f, text=text: f.write(text.encode("utf-8")))
    return [out for out, _ in written]


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def first_sentence_baseline(examples: list[QAExample]) -> dict[str, str]:
    """A floor to compare against: answer every question with its paragraph's first sentence (up to the first
    '.', '!' or '?' followed by a space or the end). It ignores the question, so it scores near zero exact
    match; its F1 is the credit that partial overlap alone earns."""
    answers = {}
    for ex in examples:
        end = _SENTENCE_END.search(ex.context)
        answers[ex.id] = (ex.context[:end.end()] if end else ex.context).strip()
    return answers
