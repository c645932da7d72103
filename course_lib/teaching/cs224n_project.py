"""The CS224N default project ("minBERT") on this repository: the course's model interface and its deliverables.

`python -m course_lib multitask --cs224n --data-dir DIR --output-dir OUT` trains the multitask model on the
course's three tasks (`course_lib.readers.cs224n`: sentiment on SST, paraphrase on Quora, similarity on SemEval
STS), with every option `multitask` has (schedules, SSA per task, resume), then writes what the course asks
students to hand in, in the course's own format:

    OUT/predictions/sst-dev-output.csv    sst-test-output.csv     header `id \t Predicted_Sentiment `
    OUT/predictions/para-dev-output.csv   para-test-output.csv    header `id \t Predicted_Is_Paraphrase `
    OUT/predictions/sts-dev-output.csv    sts-test-output.csv     header `id \t Predicted_Similiary ` (sic)
    OUT/predictions/dev_metrics.json      SST accuracy, paraphrase accuracy, STS Pearson, both overall scores

and one `<id> , <prediction> ` line per example (the spaces are the course's). The test files come from the
`*-test-student.csv` files, which have no labels; without them only the dev files are written.

Predictions are the run's own evaluation path (the same features and model calls that scored dev during
training), so the dev files agree with metrics.json. `CourseModel` is the interface the course's code calls:
`forward(input_ids, attention_mask)` gives the [CLS] embedding, `predict_sentiment` five logits,
`predict_paraphrase` one logit and `predict_similarity` one score, each pair given as two separately tokenized
sentences (ids1, mask1, ids2, mask2), as the course's data loader makes them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from torch import nn

from course_lib.model.pair_heads import SeparatePairClassifier
from course_lib.readers.cs224n import CourseTask
from course_lib.model.model_folder import resolve_model_dir
from course_lib.runtime.repro import atomic_write
from course_lib.tasks.metrics import compute_metrics
from course_lib.training.config import MultitaskConfig
from course_lib.training.finetune import predict
from course_lib.training.multitask import MultitaskBert, encode_task, load_multitask, task_runs, train_multitask
from course_lib.training.run import Run

PREDICTIONS = "predictions"


@dataclass(frozen=True)
class Role:
    """One of the course's three tasks: its file prefix, the preset that reads it, the predictions header, and
    how one prediction is printed (the course prints numpy values: '3', '1.0', '2.7512')."""

    prefix: str
    task: str
    header: str
    metric: str

    def text(self, value: float) -> str:
        return str(int(value)) if self.prefix == "sst" else str(np.float32(value))


ROLES = (Role("sst", "cs224n_sst", "Predicted_Sentiment", "accuracy"),
         Role("para", "cs224n_para", "Predicted_Is_Paraphrase", "accuracy"),
         Role("sts", "cs224n_sts", "Predicted_Similiary", "pearson"))  # the course's spelling


def write_course_predictions(path: Path, role: Role, ids: list[str], values: list[float]) -> None:
    """A predictions file byte for byte as the course's evaluation writes one, atomically."""
    text = f"id \t {role.header} \n" + "".join(f"{i} , {role.text(v)} \n" for i, v in zip(ids, values))
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def overall_scores(sst_accuracy: float, para_accuracy: float, sts_pearson: float) -> dict[str, float]:
    """Both overall scores in use: the report's plain mean of the three, and the course leaderboard's mean with
    Pearson's r mapped from [-1, 1] to [0, 1] as (r + 1) / 2, so that every term lies in [0, 1]."""
    return {"overall": (sst_accuracy + para_accuracy + sts_pearson) / 3,
            "overall_normalized": (sst_accuracy + para_accuracy + (sts_pearson + 1) / 2) / 3}


# ----------------------------------------------------------------------------------------------
# The course's model interface


def join_pair(ids1, mask1, ids2, mask2, pad_token_id: int = 0) -> tuple[torch.Tensor, ...]:
    """Two separately tokenized sides ([CLS] a [SEP], [CLS] b [SEP]) as one cross-encoded sequence
    [CLS] a [SEP] b [SEP]: b's [CLS] dropped, token type 1 for b. Returns (ids, mask, token types), (B, L)."""
    len_a, len_b = mask1.sum(1), mask2.sum(1) - 1  # b without its [CLS]
    width = int((len_a + len_b).max())
    pos = torch.arange(width, device=ids1.device).unsqueeze(0)
    in_a, in_b = pos < len_a.unsqueeze(1), (pos >= len_a.unsqueeze(1)) & (pos < (len_a + len_b).unsqueeze(1))
    from_a = ids1.gather(1, pos.clamp(max=ids1.shape[1] - 1).expand(len(ids1), -1))
    from_b = ids2.gather(1, (pos - len_a.unsqueeze(1) + 1).clamp(0, ids2.shape[1] - 1))
    ids = torch.where(in_a, from_a, torch.where(in_b, from_b, torch.full_like(from_a, pad_token_id)))
    return ids, (in_a | in_b).long(), in_b.long()


class CourseModel(nn.Module):
    """A trained (or fresh) multitask model behind the course's interface. Heads are found by role, so the model
    may hold more tasks (a SQuAD 2.0 head) than the three the course scores."""

    def __init__(self, model: MultitaskBert, pad_token_id: int = 0):
        super().__init__()
        self.model, self.pad_token_id = model, pad_token_id

    def forward(self, input_ids, attention_mask):
        """[CLS]'s embedding after the pooler, (B, d): what the course's heads start from."""
        return self.model.encoder(input_ids, attention_mask).pooler_output

    def predict_sentiment(self, input_ids, attention_mask):
        """(B, 5) logits over the five sentiment classes."""
        return self.model.heads["cs224n_sst"](input_ids, attention_mask).logits

    def predict_paraphrase(self, ids1, mask1, ids2, mask2):
        """[q4c] One logit per pair, (B,), whose sigmoid is P(paraphrase), from the paraphrase head's two logits.

        Hints:
          1. `self._pair_logits("cs224n_para", ...)` gives (B, 2): logits of class 0 (not a paraphrase) and 1.
          2. softmax([l0, l1])[1] = 1 / (1 + exp(l0 - l1)) = sigmoid(l1 - l0): one logit carries the whole
             probability, so the course's code (sigmoid, then round) reads the same prediction as argmax.
        """
        ### BEGIN SOLUTION
        logits = self._pair_logits("cs224n_para", ids1, mask1, ids2, mask2)
        return logits[:, 1] - logits[:, 0]
        ### END SOLUTION

    def predict_similarity(self, ids1, mask1, ids2, mask2):
        """(B,) the similarity score, on the labels' 0-5 scale."""
        return self._pair_logits("cs224n_sts", ids1, mask1, ids2, mask2).squeeze(-1)

    def _pair_logits(self, task: str, ids1, mask1, ids2, mask2):
        head = self.model.heads[task]
        if isinstance(head, SeparatePairClassifier):
            return head.pair_logits(ids1, mask1, ids2, mask2)
        ids, mask, types = join_pair(ids1, mask1, ids2, mask2, self.pad_token_id)
        return head(ids, mask, types).logits


# ----------------------------------------------------------------------------------------------
# The run and its deliverables


def predict_examples(cfg: MultitaskConfig, model: MultitaskBert, run: Run, examples: list, tokenizer,
                     accelerator: Accelerator) -> list[float]:
    """The run's predictions for examples (class ids, or scores), as its evaluation makes them. A test-student
    row has no label; its feature gets a placeholder the predictions never read."""
    features = encode_task(cfg, run, examples, tokenizer, training=False)
    for f in features:
        if f["label"] is None:
            f["label"] = 0
    with torch.no_grad():
        return predict(model.heads[run.task.name], features, cfg.eval_batch_size, accelerator,
                       tokenizer.pad_token_id, run.task, run.family).tolist()


def write_deliverables(cfg: MultitaskConfig, out: Path) -> dict:
    """The six predictions files (dev and test-student of each role; test only where the file exists) and
    dev_metrics.json, from the finished run in `out`. Returns the dev metrics."""
    model, tokenizer = load_multitask(out)
    accelerator = Accelerator()
    model.to(accelerator.device)
    runs = {r.task.name: r for r in task_runs(cfg, resolve_model_dir(cfg.model))}
    scores = {}
    for role in ROLES:
        run = runs[role.task]
        task: CourseTask = run.task
        splits = {"dev": task.load("dev")}
        if task.unlabelled_path is not None:
            splits["test"] = task.load("test-student")
        for split, examples in splits.items():
            values = predict_examples(cfg, model, run, examples, tokenizer, accelerator)
            if accelerator.is_main_process:
                write_course_predictions(out / PREDICTIONS / f"{role.prefix}-{split}-output.csv", role,
                                         [ex.id for ex in examples], values)
            if split == "dev":
                scores[role.prefix] = dev_metric(role, values, [ex.label for ex in examples])
    metrics = {"sst_accuracy": scores["sst"], "para_accuracy": scores["para"], "sts_pearson": scores["sts"],
               **overall_scores(scores["sst"], scores["para"], scores["sts"])}
    if accelerator.is_main_process:
        atomic_write(out / PREDICTIONS / "dev_metrics.json", lambda f: f.write(json.dumps(metrics, indent=2).encode()))
    return metrics


def dev_metric(role: Role, predictions: list[float], labels: list[float]) -> float:
    """The course's dev metric of a role: accuracy, or Pearson's r for similarity (the repository's scorer)."""
    return compute_metrics((role.metric,), np.asarray(predictions), np.asarray(labels))[role.metric]


def run_cs224n(cfg: MultitaskConfig) -> dict:
    """Train (or resume, or read back) the multitask run, then write the course's deliverables; return the run's
    metrics.json content with the course's dev metrics under "cs224n"."""
    result = train_multitask(cfg)
    return {**result, "cs224n": write_deliverables(cfg, Path(cfg.output_dir))}
