"""`python -m benchmarks speed`'s task-head cases: our span-QA and tagging models against transformers' `BertForQuestionAnswering`
(length 384) and `BertForTokenClassification` (length 128), same weights and inputs, a training step (forward,
loss, backward) and an inference pass.

Contestants run interleaved in one process, the order rotated each round; ratios are taken within each round
(see `timing.interleaved`). "ours" has the fast CPU kernels swapped in (`course_lib.fast.optimize`), "plain" is
the model as written.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from course_lib.notebook.timing import interleaved, ratio_summary
from course_lib.model.heads import SpanHead, TokenClassifier
from course_lib.model.weights import load_pretrained
from course_lib.model.model_folder import resolve_model_dir
from course_lib.fast import optimize


def _span_labels(batch_size: int, seq_len: int, num_labels: int) -> torch.Tensor:
    return torch.randint(0, seq_len, (batch_size, 2))  # a start and an end token per window


def _tag_labels(batch_size: int, seq_len: int, num_labels: int) -> torch.Tensor:
    return torch.randint(0, num_labels, (batch_size, seq_len))  # a tag per token


def _hf_span(model, ids, mask, labels):
    kwargs = {} if labels is None else {"start_positions": labels[:, 0], "end_positions": labels[:, 1]}
    out = model(input_ids=ids, attention_mask=mask, **kwargs)
    return torch.stack([out.start_logits, out.end_logits], -1), out.loss


def _hf_tags(model, ids, mask, labels):
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    return out.logits, out.loss


@dataclass(frozen=True)
class HeadCase:
    """One task head against its transformers counterpart: how to build ours, which HF class, the head module
    whose initial weights HF's copy takes, random labels, and HF's call."""

    name: str
    ours: Callable  # (encoder) -> our task model
    hf_class: str  # a transformers class name
    head: str  # the attribute holding the output layer, the same name in both
    labels: Callable  # (batch_size, seq_len, num_labels) -> labels
    hf_forward: Callable  # (model, ids, mask, labels) -> (logits, loss)
    num_labels: int


CASES = {
    "QA": HeadCase("span QA", lambda encoder: SpanHead(encoder), "BertForQuestionAnswering", "qa_outputs",
                   _span_labels, _hf_span, 2),
    "tagging": HeadCase("tagging", lambda encoder: TokenClassifier(encoder, 13), "BertForTokenClassification",
                        "classifier", _tag_labels, _hf_tags, 13),  # WNUT-17's 13 tags
}


def _models(case: HeadCase, model_name):
    import transformers

    transformers.utils.logging.set_verbosity_error()  # the head's missing weights are expected
    transformers.utils.logging.disable_progress_bar()
    ours = case.ours(optimize(load_pretrained(model_name)[0]))
    plain = case.ours(load_pretrained(model_name)[0])
    plain.load_state_dict(ours.state_dict())
    hf = getattr(transformers, case.hf_class).from_pretrained(str(resolve_model_dir(model_name)),
                                                            attn_implementation="sdpa", num_labels=case.num_labels)
    getattr(hf, case.head).load_state_dict(getattr(ours, case.head).state_dict())
    return {"ours": ours, "plain": plain, "hf": hf}


def _forward(case: HeadCase, name: str, model, ids, mask, labels=None):
    """Logits and, with labels, the loss: our models and HF's through one call shape."""
    if name == "hf":
        return case.hf_forward(model, ids, mask, labels)
    out = model(ids, mask, labels=labels)
    return out.logits, out.loss


def head_speed(case_name: str = "QA", model_name=None, batch_size: int = 8, seq_len: int = 384, repeats: int = 6,
               warmup: int = 1) -> dict:
    """Seconds per training step and per inference pass, and HF's time over ours per round (above 1: ours is
    faster), after checking that the three give the same logits."""
    case = CASES[case_name]
    torch.manual_seed(0)
    models = _models(case, model_name)
    vocab = models["ours"].encoder.config.vocab_size
    ids, mask = torch.randint(1000, vocab, (batch_size, seq_len)), torch.ones(batch_size, seq_len, dtype=torch.long)
    labels = case.labels(batch_size, seq_len, case.num_labels)
    for model in models.values():
        model.eval()
    with torch.no_grad():
        logits = {name: _forward(case, name, model, ids, mask)[0] for name, model in models.items()}
    result = {"case": case.name, "hf_class": case.hf_class, "batch_size": batch_size, "seq_len": seq_len,
              "threads": torch.get_num_threads(),
              "max_abs_diff_vs_ours": max((logits[n] - logits["ours"]).abs().max().item() for n in models),
              "cases": []}
    for mode in ("train", "inference"):
        for model in models.values():
            model.train(mode == "train")

        def step(name):
            model = models[name]
            if mode == "inference":
                with torch.inference_mode():
                    return _forward(case, name, model, ids, mask)
            model.zero_grad(set_to_none=True)
            _forward(case, name, model, ids, mask, labels)[1].backward()

        times = interleaved({n: (lambda n=n: step(n)) for n in models}, repeats, warmup, f"{case.name} {mode}")
        result["cases"].append({"mode": mode, "median_s": {n: round(statistics.median(t), 4) for n, t in times.items()},
                                "hf_over_ours": ratio_summary(times["hf"], times["ours"]),
                                "hf_over_plain": ratio_summary(times["hf"], times["plain"])})
    return result


def span_speed(model_name=None, batch_size: int = 8, seq_len: int = 384, repeats: int = 6, warmup: int = 1) -> dict:
    """The span-QA case at SQuAD's length."""
    return head_speed("QA", model_name, batch_size, seq_len, repeats, warmup)


def tagging_speed(model_name=None, batch_size: int = 32, seq_len: int = 128, repeats: int = 6,
                  warmup: int = 1) -> dict:
    """The tagging case at length 128."""
    return head_speed("tagging", model_name, batch_size, seq_len, repeats, warmup)


def format_head_speed(result: dict) -> str:
    lines = [f"{result['case']} (ours vs {result['hf_class']}, sdpa): batch {result['batch_size']} x "
             f"{result['seq_len']} tokens, {result['threads']} threads; ours = fast kernels, plain = as written",
             "| mode | ours s | plain s | HF s | HF / ours (IQR) | HF / plain (IQR) |", "|---|---|---|---|---|---|"]
    for case in result["cases"]:
        m, a, b = case["median_s"], case["hf_over_ours"], case["hf_over_plain"]
        lines.append(f"| {case['mode']} | {m['ours']} | {m['plain']} | {m['hf']} | {a['median']}x "
                     f"({a['iqr'][0]}-{a['iqr'][1]}) | {b['median']}x ({b['iqr'][0]}-{b['iqr'][1]}) |")
    lines.append(f"largest |logits - ours| over the contestants: {result['max_abs_diff_vs_ours']:.1e}")
    return "\n".join(lines)
