"""`bench speed`'s span-QA case: our span model against transformers' `BertForQuestionAnswering`, same weights
and inputs, a training step (forward, start/end loss, backward) and an inference pass, at SQuAD's length 384.

Contestants run interleaved in one process, the order rotated each round; ratios are taken within each round
(see `timing.interleaved`). "ours" has the fast CPU kernels swapped in (`course_lib.fast.optimize`), "plain" is
the model as written.
"""
from __future__ import annotations

import statistics

import torch

from course_lib.bench.timing import interleaved, ratio_summary
from course_lib.fast import optimize
from course_lib.model.heads import SpanHead
from course_lib.model.weights import load_pretrained, resolve_model_dir


def _models(model_name):
    import transformers

    transformers.utils.logging.set_verbosity_error()  # the head's missing weights are expected
    transformers.utils.logging.disable_progress_bar()
    ours = SpanHead(optimize(load_pretrained(model_name)[0]))
    plain = SpanHead(load_pretrained(model_name)[0])
    plain.load_state_dict(ours.state_dict())
    hf = transformers.BertForQuestionAnswering.from_pretrained(str(resolve_model_dir(model_name)),
                                                               attn_implementation="sdpa")
    hf.qa_outputs.load_state_dict(ours.qa_outputs.state_dict())
    return {"ours": ours, "plain": plain, "hf": hf}


def _forward(name: str, model, ids, mask, labels=None):
    """Logits (B, L, 2) and, with labels, the start/end loss: our models and HF's through one call shape."""
    if name == "hf":
        kwargs = {} if labels is None else {"start_positions": labels[:, 0], "end_positions": labels[:, 1]}
        out = model(input_ids=ids, attention_mask=mask, **kwargs)
        return torch.stack([out.start_logits, out.end_logits], -1), out.loss
    out = model(ids, mask, labels=labels)
    return out.logits, out.loss


def span_speed(model_name=None, batch_size: int = 8, seq_len: int = 384, repeats: int = 6, warmup: int = 1) -> dict:
    """Seconds per training step and per inference pass, and HF's time over ours per round (above 1: ours is
    faster), after checking that the three give the same logits."""
    torch.manual_seed(0)
    models = _models(model_name)
    vocab = models["ours"].encoder.config.vocab_size
    ids, mask = torch.randint(1000, vocab, (batch_size, seq_len)), torch.ones(batch_size, seq_len, dtype=torch.long)
    labels = torch.randint(0, seq_len, (batch_size, 2))
    for model in models.values():
        model.eval()
    with torch.no_grad():
        logits = {name: _forward(name, model, ids, mask)[0] for name, model in models.items()}
    result = {"batch_size": batch_size, "seq_len": seq_len, "threads": torch.get_num_threads(),
              "max_abs_diff_vs_ours": max((logits[n] - logits["ours"]).abs().max().item() for n in models),
              "cases": []}
    for mode in ("train", "inference"):
        for model in models.values():
            model.train(mode == "train")

        def step(name):
            model = models[name]
            if mode == "inference":
                with torch.inference_mode():
                    return _forward(name, model, ids, mask)
            model.zero_grad(set_to_none=True)
            _forward(name, model, ids, mask, labels)[1].backward()

        times = interleaved({n: (lambda n=n: step(n)) for n in models}, repeats, warmup, f"QA {mode}")
        result["cases"].append({"mode": mode, "median_s": {n: round(statistics.median(t), 4) for n, t in times.items()},
                                "hf_over_ours": ratio_summary(times["hf"], times["ours"]),
                                "hf_over_plain": ratio_summary(times["hf"], times["plain"])})
    return result


def format_span_speed(result: dict) -> str:
    lines = [f"span QA (SpanHead vs BertForQuestionAnswering, sdpa): batch {result['batch_size']} x "
             f"{result['seq_len']} tokens, {result['threads']} threads; ours = fast kernels, plain = as written",
             "| mode | ours s | plain s | HF s | HF / ours (IQR) | HF / plain (IQR) |", "|---|---|---|---|---|---|"]
    for case in result["cases"]:
        m, a, b = case["median_s"], case["hf_over_ours"], case["hf_over_plain"]
        lines.append(f"| {case['mode']} | {m['ours']} | {m['plain']} | {m['hf']} | {a['median']}x "
                     f"({a['iqr'][0]}-{a['iqr'][1]}) | {b['median']}x ({b['iqr'][0]}-{b['iqr'][1]}) |")
    lines.append(f"largest |logits - ours| over the contestants: {result['max_abs_diff_vs_ours']:.1e}")
    return "\n".join(lines)
