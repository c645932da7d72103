"""`python -m benchmarks squad`: our span-QA fine-tuning against transformers' `BertForQuestionAnswering`
trained by the same loop, on the same windows, batches, seed and initial weights, and a trivial baseline.

SQuAD's train file is not on an offline machine, so the protocol splits the v1.1 dev file by article
(Rajpurkar et al. 2016 publish 48 dev articles): train on the first 38 articles' questions, evaluate on the
last 10 (1,988 questions), so no paragraph is in both. Hugging Face's model enters the run as a method of our
registry whose task model is `BertForQuestionAnswering` (its start/end head given our head's initial weights),
so the only difference between the two runs is the model code; decoding and the official scores are ours for
both. The baseline answers each question with its paragraph's first sentence.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import torch
from torch import nn

from course_lib.methods.registry import METHODS, Method, register
from course_lib.model.heads import ClassifierOutput, SpanHead
from course_lib.readers import local_data
from course_lib.readers import squad_json
from course_lib.model.model_folder import resolve_model_dir
from course_lib.runtime.errors import UsageError
from course_lib.tasks import squad
from course_lib.tasks.batching import subsample
from course_lib.tasks.span_qa import SPAN_QA, SpanQAOptions
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune

REFERENCE = "hf-bert-for-qa"  # the registry name the reference model runs under, for this bench only


class HFSpanModel(nn.Module):
    """transformers' BertForQuestionAnswering behind our task models' interface: logits (B, L, 2) and the loss."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> ClassifierOutput:
        positions = {} if labels is None else {"start_positions": labels[:, 0], "end_positions": labels[:, 1]}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                         **positions)
        return ClassifierOutput(torch.stack([out.start_logits, out.end_logits], -1), out.loss)


def build_reference(cfg, encoder, task, tokenizer) -> HFSpanModel:
    """Hugging Face's model from the same checkpoint; its qa_outputs take our head's seeded initial weights."""
    import transformers

    transformers.utils.logging.set_verbosity_error()  # the head's missing weights are expected
    ours = SpanHead(encoder, task.num_labels)  # draws the head's initial weights exactly as our run does
    hf = transformers.BertForQuestionAnswering.from_pretrained(str(resolve_model_dir(cfg.model)))
    hf.qa_outputs.load_state_dict(ours.qa_outputs.state_dict())
    return HFSpanModel(hf)


@dataclasses.dataclass(frozen=True)
class SquadBudget:
    """The recipe both models train with. Defaults fit 2 CPU cores: a seeded subset of the 38 articles'
    8,582 questions, windows of 256 tokens (stride 96), evaluation on all 1,988 questions of the last 10."""

    train_questions: int | None = 2000
    eval_questions: int | None = None  # None: every question of the evaluation articles
    train_articles: int = 38
    epochs: int = 2
    max_len: int = 256
    doc_stride: int = 96
    max_query_length: int = 64
    batch_size: int = 16
    lr: float = 1e-4
    seed: int = 0


def _config(budget: SquadBudget, files: tuple[Path, Path], model, method: str, out: Path) -> FinetuneConfig:
    return FinetuneConfig(task="squad", model=model, method=method, train_file=str(files[0]),
                          validation_file=str(files[1]), max_train_samples=budget.train_questions,
                          max_eval_samples=budget.eval_questions,
                          epochs=budget.epochs, max_len=budget.max_len,
                          task_options=SpanQAOptions(doc_stride=budget.doc_stride,
                                                     max_query_length=budget.max_query_length),
                          batch_size=budget.batch_size, lr=budget.lr, seed=budget.seed,
                          fast_kernels=method != REFERENCE, output_dir=str(out / method))


def squad_reference(squad_file: str | os.PathLike, output_dir: str | os.PathLike, model: str | None = None,
                    budget: SquadBudget = SquadBudget()) -> dict:
    """Both runs (resumable: a finished one is read back) and the baseline; EM/F1 on the 0-100 scale."""
    out = Path(output_dir)
    files = squad_json.write_article_split(squad_file, budget.train_articles, out / "data")
    reference = register(Method(REFERENCE, "transformers' BertForQuestionAnswering (a reference)",
                                build_model=build_reference, families=(SPAN_QA,)))
    try:
        runs = {name: finetune(_config(budget, files, model, name, out)) for name in ("vanilla", REFERENCE)}
    finally:
        METHODS.pop(reference.name)
    questions = subsample(squad_json.read_squad(files[1]), budget.eval_questions, budget.seed)  # the runs' own
    baseline = squad.squad_scores(squad.first_sentence_baseline(questions), questions, "v1.1")
    ours, hf = runs["vanilla"]["dev"], runs[REFERENCE]["dev"]
    trained = len(subsample(squad_json.read_squad(files[0]), budget.train_questions, budget.seed))
    return {"protocol": f"train: {trained} questions of the first {budget.train_articles} articles of "
                        f"{Path(squad_file).name} ({runs['vanilla']['train_examples']} windows), evaluate: "
                        f"the other articles ({len(questions)} questions)",
            "budget": dataclasses.asdict(budget), "ours": ours, "hf": hf, "baseline": baseline,
            "difference": {k: round(ours[k] - hf[k], 2) for k in ("exact_match", "f1")},
            "train_seconds": {n: r["timing"]["train_seconds"] for n, r in runs.items()}}


def format_squad_reference(result: dict) -> str:
    rows = [("ours (SpanHead)", result["ours"]), ("transformers BertForQuestionAnswering", result["hf"]),
            ("first sentence of the paragraph", result["baseline"])]
    lines = [result["protocol"], "| model | EM | F1 |", "|---|---|---|"]
    lines += [f"| {name} | {s['exact_match']:.2f} | {s['f1']:.2f} |" for name, s in rows]
    lines.append(f"ours - HF: EM {result['difference']['exact_match']:+.2f}, F1 {result['difference']['f1']:+.2f}; "
                 f"training seconds {result['train_seconds']}")
    return "\n".join(lines)


def main(args) -> None:
    squad_dir = local_data.data_folder("SQUAD_DIR")  # $SQUAD_DIR, else the repository's data/squad
    squad_file = args.squad_file or (squad_dir / "dev-v1.1.json" if squad_dir else None)
    if squad_file is None or not Path(squad_file).is_file():
        raise UsageError(f"bench squad needs the SQuAD v1.1 dev file: --squad-file FILE or SQUAD_DIR "
                         f"(got {str(squad_file) if squad_file else 'neither'})")
    budget = SquadBudget(train_questions=args.train_questions or None, epochs=args.epochs or SquadBudget.epochs)
    result = squad_reference(squad_file, args.output_dir or "runs/bench/squad", args.model, budget)
    print(json.dumps(result, indent=2) if args.as_json else format_squad_reference(result))
