"""A method with an option of its own, defined and registered here, in the test, and nowhere else: its flag
appears in `finetune --help`, a bad value is the one-line exit-2 error, the value lands in metrics.json, and a
smoke run trains with it. What adding a method to the registry takes, and all it takes (issue 41)."""
import json
from dataclasses import dataclass

import pytest

from course_lib.methods.registry import METHODS, Method, register
from course_lib.cli import main
from course_lib.runtime.validated import Validated, described, unit_interval
from course_lib.tasks.sentence import plain_head


@dataclass
class ShrinkOptions(Validated):
    """The toy's options."""

    shrink_factor: float = described(1.0, "multiply the pretrained word embeddings by this before fine-tuning")

    def validate(self) -> None:
        unit_interval(self, "shrink_factor")


def shrunk_embeddings(cfg, encoder, task, tokenizer):
    """A toy method: fine-tuning from word embeddings scaled by the run's shrink_factor."""
    encoder.embeddings.word.weight.data.mul_(cfg.options.shrink_factor)
    return plain_head(cfg, encoder, task, tokenizer)


@pytest.fixture
def shrink_method():
    method = register(Method("shrink", "a toy: scaled word embeddings", ShrinkOptions, build_model=shrunk_embeddings))
    yield method
    METHODS.pop(method.name)


def run_args(tiny_model_dir, keyword_glue, out, *extra):
    return ["finetune", "--task", "sst2", "--model", str(tiny_model_dir), "--glue-dir", str(keyword_glue),
            "--epochs", "1", "--max-len", "32", "--batch-size", "16", "--output-dir", str(out), *extra]


def test_a_toy_methods_option_is_a_flag_with_its_help(shrink_method, capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = capsys.readouterr().out
    assert "options of method shrink:" in text
    assert "--shrink-factor FLOAT" in text and "multiply the pretrained word embeddings" in text


def test_a_bad_value_of_a_toy_option_is_one_line_and_exit_2_before_training(shrink_method, tiny_model_dir,
                                                                            keyword_glue, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(run_args(tiny_model_dir, keyword_glue, out, "--method", "shrink", "--shrink-factor", "3")) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: ShrinkOptions.shrink_factor must be in [0, 1], got 3.0" and not out.exists()
    assert main(run_args(tiny_model_dir, keyword_glue, out, "--shrink-factor", "0.5")) == 2  # vanilla's run
    assert "option 'shrink_factor' belongs to method shrink, not to this run" in capsys.readouterr().err
    assert not out.exists()


def test_a_toy_methods_option_lands_in_metrics_json_and_the_run_trains(shrink_method, tiny_model_dir,
                                                                       keyword_glue, tmp_path):
    runs = {}
    for factor in ("1.0", "0.5"):
        out = tmp_path / factor
        assert main(run_args(tiny_model_dir, keyword_glue, out, "--method", "shrink", "--shrink-factor", factor)) == 0
        runs[factor] = json.loads((out / "metrics.json").read_text())
    assert runs["0.5"]["config"]["shrink_factor"] == 0.5 and runs["0.5"]["config"]["method"] == "shrink"
    assert runs["0.5"]["status"] == "complete"
    losses = {factor: run["history"][0]["train_loss"] for factor, run in runs.items()}
    assert losses["0.5"] != losses["1.0"]  # the option reached the model
