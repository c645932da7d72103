"""`python -m benchmarks memory`: peak resident memory of a fine-tuning run, ours against transformers'.

Each case (SST-2 at up to 128 tokens, batch 32; SQuAD v1.1 at 384 tokens with stride 128, batch 16) trains our
task model and transformers' model of the same family (`BertForSequenceClassification`,
`BertForQuestionAnswering`, sdpa attention), same weights, by one loop: the shipped data encoded as `finetune`
encodes it, shuffled batches padded to their longest row (finetune's default: no bucketing), fused AdamW over
BERT's parameter groups, `loop.guarded_step` with the clip at 1.0, dropout on; then a few evaluation batches
without gradients. Each run is a fresh process, since peak resident memory (`ru_maxrss`) is a process's lifetime
high and malloc's settings are process-wide; each runs under both settings of `ATTENTION_LAB_KEEP_FREED_MEMORY`
(`course_lib.fast.allocator`). The table gives the peaks, their ratio, and the median step time, which shows
what keeping freed memory buys.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from course_lib.fast.allocator import SETTING, auto_keeps, keep_freed_memory
from course_lib.runtime.repro import progress

ROOT = Path(__file__).resolve().parents[1]  # `-m benchmarks.X` runs from the repository root

GOAL = 1.2  # at most this times transformers' peak, both with the default setting (issue 42)
MODES = ("0", "1")  # malloc as it is, freed memory kept; the default, auto, picks one per run


@dataclass(frozen=True)
class MemoryCase:
    """A task as the bench trains it: its data, length, batch, and the two models' classes."""

    name: str
    max_len: int
    batch_size: int
    hf_class: str

    def default_mode(self) -> str:
        """The mode the default setting (auto) picks for this batch and length (`allocator.wants_kept`)."""
        return "1" if auto_keeps(self.batch_size, self.max_len) else "0"


CASES = {"sst2": MemoryCase("SST-2", 128, 32, "BertForSequenceClassification"),
         "squad": MemoryCase("SQuAD v1.1", 384, 16, "BertForQuestionAnswering")}


def _features(case: str, tokenizer, max_len: int) -> tuple[list[dict], object]:
    """The shipped data as finetune encodes it, and the collate function for its batches."""
    from course_lib.runtime.errors import UsageError
    from course_lib.readers import local_data
    from course_lib.readers import squad_json
    from course_lib.tasks import glue, sentence, squad

    env = "GLUE_DIR" if case == "sst2" else "SQUAD_DIR"
    folder = local_data.data_folder(env)
    if folder is None:
        raise UsageError(f"bench memory reads the repository's data/ folder or ${env}; neither is here")
    if case == "sst2":
        examples = glue.load_split("sst2", "train", folder)[:8000]
        return sentence.encode_examples(examples, tokenizer, max_len), sentence.collate
    examples = squad_json.read_squad(folder / "dev-v1.1.json")[:600]
    return squad.encode_squad(examples, tokenizer, max_len, 128), squad.collate_squad


def _models(case: str, who: str, model_name):
    """(model, loss function of a batch): ours as finetune builds it (fast kernels in), or transformers'."""
    from course_lib.fast import optimize
    from course_lib.model.heads import SequenceClassifier, SpanHead
    from course_lib.model.weights import load_pretrained
    from course_lib.model.model_folder import resolve_model_dir

    if who == "ours":
        encoder = optimize(load_pretrained(model_name)[0])
        model = SequenceClassifier(encoder, 2) if case == "sst2" else SpanHead(encoder)
        return model, lambda b: model(b["input_ids"], b["attention_mask"], b["token_type_ids"], b["labels"]).loss
    import transformers

    transformers.utils.logging.set_verbosity_error()  # the head's missing weights are expected
    hf_class = getattr(transformers, CASES[case].hf_class)
    model = hf_class.from_pretrained(str(resolve_model_dir(model_name)), attn_implementation="sdpa",
                                     **({"num_labels": 2} if case == "sst2" else {}))
    inputs = ("input_ids", "attention_mask", "token_type_ids")
    if case == "sst2":
        return model, lambda b: model(**{k: b[k] for k in inputs}, labels=b["labels"]).loss
    return model, lambda b: model(**{k: b[k] for k in inputs}, start_positions=b["labels"][:, 0],
                                  end_positions=b["labels"][:, 1]).loss


def run_one(case: str, who: str, steps: int, eval_batches: int, model_name=None) -> dict:
    """One training run in this process: `steps` steps, then `eval_batches` without gradients; its peak."""
    from accelerate import Accelerator

    from course_lib.model.model_folder import load_tokenizer, resolve_model_dir
    from course_lib.runtime.repro import seed_everything
    from course_lib.tasks.batching import epoch_batches
    from course_lib.training.loop import guarded_step, param_groups

    spec = CASES[case]
    kept = keep_freed_memory(spec.batch_size, spec.max_len)  # as the command line does, before anything large
    seed_everything(0)
    features, collate = _features(case, load_tokenizer(resolve_model_dir(model_name)), spec.max_len)
    rows = epoch_batches([len(f["input_ids"]) for f in features], spec.batch_size, 0, 0, shuffle=True, bucket=False)
    batches = [collate([features[i] for i in batch]) for batch in rows[:steps + eval_batches]]
    model, loss_of = _models(case, who, model_name)
    optimizer = torch.optim.AdamW(param_groups(model, 0.01), lr=2e-5, fused=True)
    accelerator, seconds = Accelerator(cpu=True), []
    model.train()
    for batch in batches[:steps]:
        started = time.perf_counter()
        loss = loss_of(batch)
        guarded_step(loss, loss.detach(), accelerator, model, optimizer, 1.0)
        seconds.append(time.perf_counter() - started)
    model.eval()
    with torch.no_grad():
        for batch in batches[steps:]:
            loss_of(batch)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {"case": case, "who": who, "kept": kept, "peak_gb": round(peak / 1e9, 2),
            "step_s": round(statistics.median(seconds[1:] or seconds), 3),
            "tokens": [int(b["input_ids"].shape[1]) for b in batches[:steps]]}


def _in_fresh_process(case: str, who: str, mode: str, steps: int, eval_batches: int, model_name) -> dict:
    env = {**os.environ, SETTING: mode, "TQDM_DISABLE": "1"}
    args = json.dumps([case, who, steps, eval_batches, model_name])
    out = subprocess.run([sys.executable, "-m", "benchmarks.memory", args], cwd=ROOT, env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise RuntimeError(f"bench memory: the {who} {case} run failed:\n{out.stderr[-2000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "mode": mode}


def memory(model_name=None, steps: int = 12, eval_batches: int = 4, cases=("sst2", "squad")) -> dict:
    """Every case x setting x contestant, each run in its own process; ours and transformers' side by side."""
    plan = [(case, mode, who) for case in cases for mode in MODES for who in ("ours", "hf")]
    runs = []
    for case, mode, who in progress(plan, desc="bench memory"):
        runs.append(_in_fresh_process(case, who, mode, steps, eval_batches, model_name))
    return {"threads": torch.get_num_threads(), "steps": steps, "eval_batches": eval_batches, "runs": runs,
            "goal": GOAL}


def _run(result: dict, case: str, mode: str, who: str) -> dict:
    return next(r for r in result["runs"] if (r["case"], r["mode"], r["who"]) == (case, mode, who))


def format_memory(result: dict) -> str:
    lines = [f"Peak resident memory of {result['steps']} training steps and {result['eval_batches']} evaluation "
             f"batches, each run in a fresh process ({result['threads']} threads); ours has the fast kernels in.",
             f"| case | {SETTING} | ours GB | transformers GB | ours / transformers | ours step s | "
             "transformers step s |", "|---|---|---|---|---|---|---|"]
    cases = list(dict.fromkeys(r["case"] for r in result["runs"]))
    for case in cases:
        for mode in MODES:
            ours, hf = _run(result, case, mode, "ours"), _run(result, case, mode, "hf")
            default = " (the default's pick)" if mode == CASES[case].default_mode() else ""
            lines.append(f"| {CASES[case].name}, {CASES[case].max_len} tokens, batch {CASES[case].batch_size} | "
                         f"{mode}{default} | {ours['peak_gb']} | {hf['peak_gb']} | "
                         f"{ours['peak_gb'] / hf['peak_gb']:.2f}x | {ours['step_s']} | {hf['step_s']} |")
    for case in cases:
        ours = _run(result, case, CASES[case].default_mode(), "ours")["peak_gb"]
        same, plain = (_run(result, case, mode, "hf")["peak_gb"] for mode in (CASES[case].default_mode(), "0"))
        verdict = "meets" if max(ours / same, ours / plain) <= result["goal"] else "misses"
        lines.append(f"{CASES[case].name}, default setting (auto): ours {ours / same:.2f}x transformers' peak by the "
                     f"same loop, {ours / plain:.2f}x transformers' with malloc as it is; {verdict} the goal of at "
                     f"most {result['goal']}x")
    return "\n".join(lines)


def main(args) -> None:
    result = memory(args.model, steps=args.repeats)
    print(json.dumps(result, indent=2) if args.as_json else format_memory(result))


if __name__ == "__main__":  # one run, in the process `memory` starts for it
    print(json.dumps(run_one(*json.loads(sys.argv[1]))))
