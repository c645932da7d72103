"""A run's task model: built for training (its method's model, or its task family's plain head, on the pretrained
encoder the method may change), or rebuilt from a finished run's folder for probing, exporting and predicting."""
from __future__ import annotations

import json
from pathlib import Path

from course_lib.errors import UsageError
from course_lib.methods.registry import get_method
from course_lib.model.heads import SequenceClassifier
from course_lib.model.weights import load_pretrained
from course_lib.repro import METRICS, WEIGHTS
from course_lib.tasks.registry import get_family, run_task
from course_lib.training.config import FinetuneConfig


def encoder_overrides(cfg: FinetuneConfig) -> dict:
    """How the run's method changes the pretrained encoder's config (SSAF: the attention normaliser)."""
    return get_method(cfg.method).encoder_overrides(cfg)


def build_classifier(cfg: FinetuneConfig, encoder, task, tokenizer) -> SequenceClassifier:
    """The task model of the run's method for the run's (bound) task: one whose training objective the method
    changes, or the task family's plain head."""
    build = get_method(cfg.method).build_model or get_family(task.family).build_head
    return build(cfg, encoder, task, tokenizer)


def finished_config(output_dir) -> FinetuneConfig:
    """The config of the fine-tuning run `finetune` completed in output_dir, read without its model; a folder
    without one (or with another kind of run) is one line."""
    out = Path(output_dir)
    if not (out / METRICS).is_file() or not (out / WEIGHTS).is_file():
        raise UsageError(f"{out} holds no completed fine-tuning run ({METRICS} and {WEIGHTS}): run finetune "
                         f"there first")
    saved = json.loads((out / METRICS).read_text())
    if saved.get("kind", "finetune") != "finetune":
        raise UsageError(f"{out} holds a {saved['kind']} run, not a fine-tuning run (one task, one head)")
    return FinetuneConfig.from_dict(saved["config"], others="drop")


def load_finetuned(output_dir) -> tuple[SequenceClassifier, object]:
    """(task model in eval mode, tokenizer) of a run that `finetune` completed in output_dir.

    Rebuilt from the config saved in metrics.json (model, method and its encoder overrides) and the trained
    weights in model.safetensors, so notebooks can probe, export or predict with a fine-tuned model.
    """
    from safetensors.torch import load_file

    out = Path(output_dir)
    cfg = finished_config(out)
    encoder, tokenizer = load_pretrained(cfg.model, **encoder_overrides(cfg))
    model = build_classifier(cfg, encoder, run_task(cfg), tokenizer)
    model.load_state_dict(load_file(out / WEIGHTS))
    return model.eval(), tokenizer
