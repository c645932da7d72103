"""A finished fine-tuning run as a Hugging Face model folder, which `transformers`' `AutoModelFor...` loads.

A run leaves its weights in this library's own names (`model.safetensors`); people who want to try the model in a
`transformers` pipeline, share it or load it elsewhere need Hugging Face's layout: `config.json` (with the label
names), `model.safetensors` under transformers' names and the tokenizer's files. Each task family names the
transformers class of its plain head (`TaskFamily.hf_class`); the encoder's tensors are renamed back
(`weights.ours_to_hf`), the head's keep their names, and what only training used (ASA's adversaries, SSA's token
head) stays behind. A method whose inference model is not BERT's says why (`Method.export_refusal`), and is
refused in one line rather than exported wrong.

    python -m course_lib export RUN_DIR [--to DIR]     # default DIR: RUN_DIR/hf_model
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from pydantic import Field

from course_lib.model.weights import ours_to_hf
from course_lib.runtime.command_line import add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.runtime.settings import Settings
from course_lib.tasks.registry import get_family, run_task
from course_lib.training.config import FinetuneConfig
from course_lib.training.task_model import finished_config, load_finetuned

EXPORT_DIR = "hf_model"  # the folder a run's export goes to, inside the run folder


def export_if_asked(cfg: FinetuneConfig, out: Path) -> None:
    """The `export` run option: write the finished run's folder once, when the run completes (or, asked later,
    when the same command finds it complete)."""
    from accelerate import PartialState

    if cfg.export and PartialState().is_main_process and not (out / EXPORT_DIR / "config.json").is_file():
        print(f"exported to {export_run(out)}")  # one process writes it, launched in several


def hf_config(model, task, class_name: str, classifier_dropout: float) -> dict:
    """config.json of the exported model: the encoder's shape, the head's class and the task's label names."""
    shape = model.encoder.config
    if shape.attn_normalizer != "softmax":
        raise UsageError(f"the encoder normalises attention with {shape.attn_normalizer!r}; transformers' BERT has "
                         f"softmax only")
    names = getattr(task, "label_names", None)
    labels = {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}} if names else {}
    regression = {"problem_type": "regression"} if getattr(task, "is_regression", False) else {}
    encoder = {k: v for k, v in shape.to_dict().items() if not k.startswith("attn_normalizer")}
    return {"model_type": "bert", "architectures": [class_name], "hidden_act": "gelu", **encoder,  # HF's names
            "classifier_dropout": classifier_dropout, "num_labels": model.num_labels if not names else len(names),
            **labels, **regression}


def hf_model(model, config: dict):
    """transformers' model of `config` holding our task model's weights: the encoder renamed, the head as it is,
    training-only parts left out; every tensor the transformers model has must come from ours."""
    import transformers

    hf = getattr(transformers, config["architectures"][0])(transformers.BertConfig(**config))
    encoder = {f"bert.{k}": v for k, v in
               ours_to_hf(model.encoder.state_dict(), model.encoder.config.num_hidden_layers).items()}
    head = {k: v for k, v in model.state_dict().items() if not k.startswith("encoder.")}
    wanted = hf.state_dict()
    state = {k: v for k, v in {**encoder, **head}.items() if k in wanted}
    missing = sorted(set(wanted) - set(state))
    if missing:
        raise UsageError(f"the run's model lacks {missing[:3]} of {type(hf).__name__}: it cannot be exported")
    hf.load_state_dict(state, strict=True)
    return hf.eval()


def export_run(run_dir, to=None) -> Path:
    """Write the finished run in run_dir as a Hugging Face folder (default run_dir/hf_model), all or nothing;
    return the folder."""
    out = Path(run_dir)
    cfg = finished_config(out)
    cfg.check_exportable()
    model, tokenizer = load_finetuned(out)
    task = run_task(cfg)
    hf = hf_model(model, hf_config(model, task, get_family(task.family).hf_class, cfg.classifier_dropout))
    target = Path(to) if to is not None else out / EXPORT_DIR
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        hf.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


class ExportOptions(Settings):
    """`python -m course_lib export`'s options."""

    run_dir: str = Field(description="the run's output folder (its metrics.json and weights)",
                         json_schema_extra={"positional": True, "metavar": "RUN_DIR"})
    to: str | None = Field(None, description=f"the folder to write (default: RUN_DIR/{EXPORT_DIR})",
                           json_schema_extra={"metavar": "DIR"})


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course_lib export",
                    description="write a finished fine-tuning run as a Hugging Face model folder")
    add_fields(parser, ExportOptions, words=True)

    def body() -> int:
        args = parsed(parser.parse_strict(argv), ExportOptions)
        print(f"exported to {export_run(args.run_dir, args.to)}")
        return 0
    return report_errors(body, "nothing was written; run the same command again")
