"""A finished fine-tuning run's model on new text: one prediction per input row, in a JSON-lines file.

    python -m course_lib predict --run RUN_DIR --file FILE [--output PRED]

The file is read with the run's own column rules (a sentence task: its text columns, from a CSV, TSV or JSON-lines
file; a tagging task: a word per line, a blank line between sentences; span QA: a SQuAD JSON file; multiple choice:
the run's layout, DREAM, HellaSWAG or SWAG; labels and answers may be there and are not read), and checked before the model loads: a missing column is one line and exit
code 2. Each row of the output holds the input and the model's answer (the class, as the task's files name it, with
its probability; the score; a tag per word; the answer and its first character in the context; the choice). The task family says how to read and how to answer
(`TaskFamily.read_inputs`, `prediction_rows`); a family without them is refused in one line.
"""
from __future__ import annotations

import json
from pathlib import Path

from accelerate import Accelerator
from pydantic import Field

from course_lib.runtime.command_line import add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.runtime.repro import atomic_write
from course_lib.runtime.settings import Settings
from course_lib.tasks.registry import every_family, get_family, run_task
from course_lib.training.finetune import output_rows
from course_lib.training.task_model import finished_config, load_finetuned


class Predictor:
    """A finished run's model, loaded once, answering lists of inputs read with the run's rules: what `predict`
    and `glue-submission` both call, so a test split is predicted by the same code as a user's file."""

    def __init__(self, run_dir, batch_size: int | None = None):
        self.cfg = finished_config(run_dir)
        self.task = run_task(self.cfg)
        self.family = get_family(self.task.family)
        model, self.tokenizer = load_finetuned(run_dir)
        self.accelerator = Accelerator()  # a GPU when there is one
        self.model = model.to(self.accelerator.device)
        self.batch_size = batch_size or self.cfg.eval_batch_size

    def outputs(self, examples: list, desc: str = "predict") -> tuple[list, list[dict]]:
        """(the model's output row per input, in order; the encoded features)."""
        features = self.family.encode(examples, self.tokenizer, self.cfg, training=False)
        rows = output_rows(self.model, features, self.batch_size, self.accelerator, self.tokenizer.pad_token_id,
                           self.family, desc=desc)
        return rows, features


def predict_file(run_dir, file, output=None, batch_size: int | None = None) -> Path:
    """Predict every row of `file` with the run's model; write them to `output` (default: RUN_DIR/
    predictions_<file name>.jsonl), all at once; return that path."""
    run_dir, file = Path(run_dir), Path(file)
    cfg = finished_config(run_dir)  # read without its model
    task = run_task(cfg)
    family = get_family(task.family)
    if family.read_inputs is None:
        readable = [name for name, f in every_family().items() if f.read_inputs is not None]
        raise UsageError(f"predict does not read {family.name} files yet (it reads: {', '.join(readable)})")
    if not file.is_file():
        raise UsageError(f"--file {str(file)!r} is not a file")
    examples = family.read_inputs(task, file)  # a bad file stops here, before the model loads
    outputs, features = Predictor(run_dir, batch_size).outputs(examples)
    rows = family.prediction_rows(task, outputs, features, examples)
    target = Path(output) if output is not None else run_dir / f"predictions_{file.stem}.jsonl"
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    atomic_write(target, lambda f: f.write(text.encode()))
    return target


class PredictOptions(Settings):
    """`python -m course_lib predict`'s options."""

    run: str = Field(description="the run's output folder", json_schema_extra={"metavar": "RUN_DIR"})
    file: str = Field(description="the rows to predict: CSV, TSV or JSON lines with the run's text columns (tagging: "
                      "a word per line, a blank line between sentences; span QA: SQuAD JSON; multiple choice: the "
                      "run's layout)", json_schema_extra={"metavar": "FILE"})
    output: str | None = Field(None, description="the JSON-lines file to write (default: "
                               "RUN_DIR/predictions_<FILE name>.jsonl)", json_schema_extra={"metavar": "PRED"})
    batch_size: int | None = Field(None, gt=0, description="rows per forward pass (default: the run's "
                                   "eval_batch_size)")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course_lib predict",
                    description="a finished fine-tuning run's model on new text, one prediction per row")
    add_fields(parser, PredictOptions, words=True)

    def body() -> int:
        args = parsed(parser.parse_strict(argv), PredictOptions)
        print(f"predictions: {predict_file(args.run, args.file, args.output, args.batch_size)}")
        return 0
    return report_errors(body, "nothing was written; run the same command again")
