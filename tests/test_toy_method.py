"""A method with an option of its own, defined and registered here, in the test, and nowhere else: its flag
appears in `finetune --help`, a bad value is the one-line exit-2 error, the value lands in metrics.json, and a
smoke run trains with it. What adding a method to the registry takes, and all it takes (issue 41). A second toy
holds a list and a mapping, which the settings base checks element by element (issue 77)."""
import json

import pytest
from pydantic import Field

from course_lib.methods.registry import METHODS, Method, register
from course_lib.cli import main
from course_lib.runtime.errors import UsageError
from course_lib.runtime.settings import Settings
from course_lib.tasks.sentence import plain_head
from course_lib.training.config import FinetuneConfig


class ShrinkOptions(Settings):
    """The toy's options."""

    shrink_factor: float = Field(1.0, ge=0, le=1, description=
        "multiply the pretrained word embeddings by this before fine-tuning")


class LayerOptions(Settings):
    """A toy's options of container types: which layers, and a weight per task."""

    toy_layers: list[int] = Field(default_factory=list, description="the encoder layers the toy touches")
    toy_weights: dict[str, float] = Field(default_factory=dict, description="a weight per task name")


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


@pytest.fixture
def layer_method():
    method = register(Method("toy-layers", "a toy with a list and a mapping", LayerOptions, build_model=plain_head))
    yield method
    METHODS.pop(method.name)


def test_list_and_dict_options_are_accepted_and_checked(layer_method):
    assert FinetuneConfig(method="toy-layers").options.toy_layers == []  # its own default, which the old check refused
    cfg = FinetuneConfig.from_dict({"method": "toy-layers", "toy_layers": [0, 2], "toy_weights": {"sst2": 1}})
    assert cfg.options.toy_layers == [0, 2] and cfg.options.toy_weights == {"sst2": 1.0}
    assert cfg.to_dict()["toy_layers"] == [0, 2] and isinstance(cfg.to_dict()["toy_weights"]["sst2"], float)
    with pytest.raises(UsageError, match=r"^LayerOptions.toy_layers\[1\] must be int, got 'b' \(str\)$"):
        FinetuneConfig.from_dict({"method": "toy-layers", "toy_layers": [1, "b"]})
    with pytest.raises(UsageError, match=r"^LayerOptions.toy_layers must be list\[int\], got 3 \(int\)$"):
        FinetuneConfig.from_dict({"method": "toy-layers", "toy_layers": 3})
    with pytest.raises(UsageError, match=r"^LayerOptions.toy_weights\['sst2'\] must be float, got 'x' \(str\)$"):
        FinetuneConfig.from_dict({"method": "toy-layers", "toy_weights": {"sst2": "x"}})
    with pytest.raises(UsageError, match="LayerOptions.toy_layers"):
        cfg.options.toy_layers = ["a"]  # assignment is checked too
    assert cfg.options.toy_layers == [0, 2]


def test_list_and_dict_options_are_json_on_the_command_line(layer_method, capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = capsys.readouterr().out
    assert "--toy-layers JSON" in text and "--toy-weights JSON" in text
    assert main(["finetune", "--method", "toy-layers", "--toy-layers", "[1, \"x\"]"]) == 2
    assert capsys.readouterr().err.strip() == "error: LayerOptions.toy_layers[1] must be int, got 'x' (str)"
