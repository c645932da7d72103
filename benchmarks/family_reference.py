"""`python -m benchmarks reference --task wnut17|dream`: our tagging or multiple-choice fine-tuning against
transformers' `BertForTokenClassification` / `BertForMultipleChoice` trained by the same loop, on the same data,
batches, seeds and initial weights.

Hugging Face's model enters the run as a method of our registry whose task model is transformers' class (its
output layer given our head's seeded initial weights), so the only difference between the two runs is the model
code; reading, batching, decoding and scoring are ours for both. The recipe is the paper's (Wu et al. 2023,
Table 5) where 2 CPU cores allow it; each task's budget says what it changes. Both tasks are scored on their
labelled test split too (the paper reports test), and multiple choice against chance by a one-sided binomial
test: is the accuracy above 1/(number of choices) beyond doubt?
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from scipy import stats
from torch import nn

from course_lib.methods.registry import METHODS, Method, register
from course_lib.model.heads import ClassifierOutput
from course_lib.model.model_folder import resolve_model_dir
from course_lib.runtime.errors import choice_error
from course_lib.tasks.batching import subsample
from course_lib.tasks.multiple_choice import MULTIPLE_CHOICE
from course_lib.tasks.registry import get_family, get_task, run_task
from course_lib.tasks.tagging import TAGGING
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune

REFERENCE = "hf-reference"  # the registry name the reference model runs under, for this bench only
HF_CLASSES = {TAGGING: "BertForTokenClassification", MULTIPLE_CHOICE: "BertForMultipleChoice"}


class HFTaskModel(nn.Module):
    """A transformers task model behind our task models' interface: its logits and its loss."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> ClassifierOutput:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                         labels=labels)
        return ClassifierOutput(out.logits, out.loss)


def build_reference(cfg, encoder, task, tokenizer) -> HFTaskModel:
    """transformers' model of the run's family from the same checkpoint; its output layer takes the initial
    weights our plain head draws (built here first, so the seeded draws are the same as in our run)."""
    import transformers

    transformers.utils.logging.set_verbosity_error()  # the head's missing weights are expected
    ours = get_family(task.family).build_head(cfg, encoder, task, tokenizer)
    hf = getattr(transformers, HF_CLASSES[task.family]).from_pretrained(  # num_labels: tags (multiple choice: 1)
        str(resolve_model_dir(cfg.model)), num_labels=task.num_labels, classifier_dropout=cfg.classifier_dropout)
    hf.classifier.load_state_dict(ours.classifier.state_dict())
    return HFTaskModel(hf)


@dataclasses.dataclass(frozen=True)
class Budget:
    """The recipe both models train with (FinetuneConfig fields), and why it differs from the paper's."""

    fields: dict
    note: str
    choices: int | None = None  # multiple choice: choices per question (chance is 1/choices)


BUDGETS = {
    "wnut17": Budget({"lr": 5e-5, "batch_size": 16, "epochs": 3, "warmup_ratio": 0.1, "max_len": 64},
                     "Wu et al.'s Table 5 recipe (lr 5e-5, batch 16, warmup 0.1, length 64) for 3 epochs of 5, on all "
                     "3,394 training tweets; dev and test in full"),
    "dream": Budget({"lr": 1e-4, "batch_size": 16, "epochs": 2, "warmup_ratio": 0.1, "max_len": 128,
                     "max_train_samples": 1200, "max_eval_samples": 600},
                    "Wu et al.'s Table 5 recipe (batch 16, warmup 0.1, length 128) cut to fit 2 CPU cores: 1,200 "
                    "seeded training questions (of 6,116), 2 epochs (of 8), lr 1e-4 (of 3e-5) for the shorter run; "
                    "600 seeded questions each of dev and test", choices=3),
}

def _config(task: str, model, method: str, seed: int, out: Path, epochs: int | None) -> FinetuneConfig:
    fields = {**BUDGETS[task].fields, **({"epochs": epochs} if epochs else {})}
    return FinetuneConfig(task=task, model=model, method=method, seed=seed, fast_kernels=method != REFERENCE,
                          output_dir=str(out / f"{method},seed={seed}"), **fields)


def above_chance(accuracy: float, n: int, choices: int) -> float:
    """One-sided binomial p-value of `accuracy` on n questions against guessing among `choices`."""
    return float(stats.binomtest(round(accuracy * n), n, 1 / choices, alternative="greater").pvalue)


def family_reference(task: str, output_dir, model: str | None = None, seeds=(0,), epochs: int | None = None) -> dict:
    """Both models per seed (resumable: a finished run is read back); their dev and test metrics."""
    if task not in BUDGETS:
        raise choice_error("reference task", task, BUDGETS)
    out = Path(output_dir)
    reference = register(Method(REFERENCE, "transformers' task model of the family (a reference)",
                                build_model=build_reference, families=tuple(HF_CLASSES)))
    try:
        runs = {(name, seed): finetune(_config(task, model, name, seed, out, epochs))
                for seed in seeds for name in ("vanilla", REFERENCE)}
    finally:
        METHODS.pop(reference.name)
    preset, cfg = get_task(task), _config(task, model, "vanilla", seeds[0], out, epochs)
    bound = run_task(cfg)
    counts = {s: len(subsample(get_family(bound.family).read(bound, s, cfg), cfg.max_eval_samples, cfg.seed))
              for s in bound.dev_splits}  # the questions each run was scored on
    return {"examples": counts, "task": task, "budget": BUDGETS[task].fields | ({"epochs": epochs} if epochs else {}),
            "note": BUDGETS[task].note, "metric": preset.metrics[0], "family": preset.family,
            "runs": [{"model": "ours" if name == "vanilla" else "hf", "seed": seed,
                      **{split: result[split] for split in ("dev", "test") if split in result},
                      "train_examples": result["train_examples"],
                      "train_seconds": result["timing"]["train_seconds"]} for (name, seed), result in runs.items()]}


def _chance_line(result: dict, split: str, rows: list[dict]) -> str:
    """For multiple choice: each run's accuracy against chance (binomial test), on the split's questions."""
    choices = BUDGETS[result["task"]].choices
    if choices is None:
        return ""
    n = result["examples"][split]
    parts = [f"{r['model']} seed {r['seed']}: p = {above_chance(r[split]['accuracy'], n, choices):.1e}" for r in rows]
    return (f"{split}: accuracy above chance (1/{choices}), one-sided binomial test on {n} questions: "
            + "; ".join(parts))


def format_family_reference(result: dict) -> str:
    metric, rows = result["metric"], result["runs"]
    splits = [s for s in ("dev", "test") if s in rows[0]]
    names = sorted({k for r in rows for s in splits for k in r[s] if isinstance(r[s][k], float)})
    lines = [f"{result['task']}: {result['note']}",
             "| model | seed | " + " | ".join(f"{s} {k}" for s in splits for k in names) + " | train s |",
             "|---|---|" + "---|" * (len(splits) * len(names) + 1)]
    for r in rows:
        lines.append(f"| {'ours' if r['model'] == 'ours' else 'transformers'} | {r['seed']} | "
                     + " | ".join(f"{r[s][k]:.4f}" for s in splits for k in names) + f" | {r['train_seconds']} |")
    for split in splits:
        ours = [r[split][metric] for r in rows if r["model"] == "ours"]
        hf = [r[split][metric] for r in rows if r["model"] == "hf"]
        lines.append(f"{split} {metric}: ours - transformers = {100 * (sum(ours) / len(ours) - sum(hf) / len(hf)):+.2f}"
                     f" points (mean over {len(ours)} seed{'s' if len(ours) > 1 else ''})")
        lines.append(_chance_line(result, split, rows))
    return "\n".join(line for line in lines if line)


def main(args) -> None:
    task = args.task or "wnut17"
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]  # checked by options.Reference
    result = family_reference(task, args.output_dir or f"runs/bench/reference/{task}", args.model, seeds,
                              args.epochs)
    print(json.dumps(result, indent=2) if args.as_json else format_family_reference(result))

