"""A run's task model: built for training (its method's model, or its task family's plain head, on the pretrained
encoder the method may change), or rebuilt from a finished run's folder for probing, exporting and predicting."""
from __future__ import annotations

import json
from pathlib import Path

from course_lib.model.heads import SequenceClassifier
from course_lib.model.weights import load_from_folder
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import METRICS, WEIGHTS
from course_lib.training.config import FinetuneConfig
from course_lib.training.run import Run, resolve


def load_encoder(run: Run):
    """(pretrained encoder, tokenizer) as the run's method wants them (SSAF: another attention normaliser)."""
    return load_from_folder(run.model_dir, **run.method.encoder_overrides(run.cfg))


def build_classifier(run: Run, encoder, tokenizer) -> SequenceClassifier:
    """The task model of the run's method for the run's (bound) task: one whose training objective the method
    changes, or the task family's plain head."""
    build = run.method.build_model or run.family.build_head
    return build(run.cfg, encoder, run.task, tokenizer)


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
    run = resolve(finished_config(out))
    encoder, tokenizer = load_encoder(run)
    model = build_classifier(run, encoder, tokenizer)
    model.load_state_dict(load_file(out / WEIGHTS))
    return model.eval(), tokenizer
