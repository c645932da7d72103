"""`python -m course_lib bench speed`: our encoder against Hugging Face's BertModel, side by side.

Same weights (the packaged MiniLM unless --model), same inputs, one process, interleaved repeats with the
order rotated each round, so drift in the machine's speed hits every contestant alike. Reports medians,
spread and ratios (>1 means ours is faster), and achieved GFLOP/s against this machine's own dense matmul
rate, measured in the same run (the practical limit).
"""
from __future__ import annotations

import json
import statistics
import time

import torch

from .repro import progress
from .weights import load_pretrained, resolve_model_dir


def matmul_gflops(n: int = 3072, repeats: int = 4) -> float:
    """The machine's practical fp32 limit: a large square matmul, best of `repeats`.

    A shared machine's speed drifts, so `speed` measures this before every case and keeps the best.
    """
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def encoder_flops(cfg, batch: int, seq: int, training: bool) -> float:
    """Matmul FLOPs of one pass: per layer, QKV/output/FFN projections plus the two attention products.

    Backward costs twice the forward, so a training step is 3x. Embeddings, norms and GELU are not counted.
    """
    d, ff, layers, tokens = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, batch * seq
    per_layer = 2 * tokens * (4 * d * d + 2 * d * ff) + 2 * 2 * batch * seq * seq * d
    forward = layers * per_layer + 2 * batch * d * d  # + pooler
    return forward * (3 if training else 1)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _contestants(model_name):
    import transformers

    transformers.utils.logging.disable_progress_bar()
    ours, _ = load_pretrained(model_name)
    folder = str(resolve_model_dir(model_name))
    hf = {impl: transformers.BertModel.from_pretrained(folder, attn_implementation=impl)
          for impl in ("sdpa", "eager")}
    return {"ours": lambda ids, mask: ours(ids, mask).pooler_output,
            "hf_sdpa": lambda ids, mask: hf["sdpa"](input_ids=ids, attention_mask=mask).pooler_output,
            "hf_eager": lambda ids, mask: hf["eager"](input_ids=ids, attention_mask=mask).pooler_output}, \
        [ours, *hf.values()], ours.config


def speed(model_name=None, batch_size: int = 32, seq_lens=(64, 128), repeats: int = 10, warmup: int = 2) -> dict:
    """Training step (forward + backward, dropout on) and inference (eval, no grad) for each contestant."""
    torch.manual_seed(0)
    runs, modules, cfg = _contestants(model_name)
    peak = matmul_gflops()
    results = {"peak_matmul_gflops": 0.0, "batch_size": batch_size, "threads": torch.get_num_threads(),
               "cases": []}
    names = list(runs)
    for seq in seq_lens:
        ids = torch.randint(1000, cfg.vocab_size, (batch_size, seq))
        mask = torch.ones_like(ids)
        for module in modules:
            module.eval()
        with torch.no_grad():  # identical outputs first: a fast wrong answer is no result
            outs = {n: f(ids, mask) for n, f in runs.items()}
        max_diff = max((outs[n] - outs["ours"]).abs().max().item() for n in names)
        for mode in ("train", "inference"):
            for module in modules:
                module.train(mode == "train")

            def step(fn):
                if mode == "train":
                    for module in modules:
                        module.zero_grad(set_to_none=True)
                    fn(ids, mask).sum().backward()
                else:
                    with torch.inference_mode():
                        fn(ids, mask)

            peak = max(peak, matmul_gflops())
            times = {n: [] for n in names}
            for r in progress(range(warmup + repeats), desc=f"L={seq} {mode}", leave=False):
                for n in names[r % len(names):] + names[:r % len(names)]:
                    t = _timed(lambda: step(runs[n]))
                    if r >= warmup:
                        times[n].append(t)
            med = {n: statistics.median(t) for n, t in times.items()}
            flops = encoder_flops(cfg, batch_size, seq, mode == "train")
            results["cases"].append({
                "seq_len": seq, "mode": mode, "max_abs_diff_vs_ours": max_diff,
                "median_s": {n: round(m, 4) for n, m in med.items()},
                "iqr_s": {n: round(statistics.quantiles(t, n=4)[2] - statistics.quantiles(t, n=4)[0], 4)
                          for n, t in times.items()},
                "speedup_vs": {n: round(med[n] / med["ours"], 3) for n in names if n != "ours"},
                "ours_gflops": round(flops / med["ours"] / 1e9, 1),
                "ours_fraction_of_peak": round(flops / med["ours"] / 1e9 / peak, 3),
            })
    results["peak_matmul_gflops"] = round(peak, 1)
    for case in results["cases"]:  # fractions against the best rate seen in the whole run
        case["ours_fraction_of_peak"] = round(case["ours_gflops"] / peak, 3)
    return results


def format_speed(results: dict) -> str:
    lines = [f"dense fp32 matmul on this machine: {results['peak_matmul_gflops']} GFLOP/s "
             f"({results['threads']} threads); batch {results['batch_size']}",
             "| L | mode | ours s | HF sdpa s | HF eager s | vs sdpa | vs eager | ours GFLOP/s | of peak |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in results["cases"]:
        m, s = c["median_s"], c["speedup_vs"]
        lines.append(f"| {c['seq_len']} | {c['mode']} | {m['ours']} | {m['hf_sdpa']} | {m['hf_eager']} | "
                     f"{s['hf_sdpa']}x | {s['hf_eager']}x | {c['ours_gflops']} | {c['ours_fraction_of_peak']:.0%} |")
    return "\n".join(lines)


def main(args) -> None:
    results = speed(args.model, args.batch_size, tuple(args.seq_lens), args.repeats)
    print(json.dumps(results, indent=2) if args.json else format_speed(results))
