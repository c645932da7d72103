"""Every kind of settings is a model on `runtime.settings.Settings`: each refuses an unknown key and a bad value with
one line that names the key (and the value), before any work."""
from __future__ import annotations

import pytest

from benchmarks import gpu_check, options as bench
from benchmarks.__main__ import main as bench_main
from course_lib.lab import sweep_cli
from course_lib.lab.notebooks import NotebookRun
from course_lib.lab.slurm import SlurmOptions
from course_lib.lab.sweep import read_grid_file
from course_lib.methods.asa import ASAOptions
from course_lib.notebook.params import check_parameters
from course_lib.runtime.errors import UsageError
from course_lib.training.config import FinetuneConfig, PretrainConfig

NOTEBOOK = "00_bert_from_scratch"


def grid_file(tmp_path, text: str):
    path = tmp_path / "grid.yaml"
    path.write_text(text)
    return lambda: read_grid_file(path)


KINDS = {  # kind: (an unknown key, a bad value), each a call that must refuse, and what the line must name
    "run config": ((lambda _: FinetuneConfig.from_dict({"epoch": 2}), "'epoch'"),
                   (lambda _: FinetuneConfig.from_dict({"lr": -1.0}), "lr must be > 0, got -1.0")),
    "pre-training config": ((lambda _: PretrainConfig.from_dict({"mlm_prob": 0.1}), "'mlm_prob'"),
                            (lambda _: PretrainConfig.from_dict({"max_len": 4}), "max_len must be >= 8, got 4")),
    "method options": ((lambda _: FinetuneConfig.from_dict({"method": "asa", "asa_taw": 1.0}), "'asa_taw'"),
                       (lambda _: ASAOptions(asa_noise="gauss"), "unknown asa_noise 'gauss' (valid: ")),
    "grid file": ((lambda tmp: grid_file(tmp, "command: finetune\ngrid: {seed: [0]}\ngrids: {}\n")(), "'grids'"),
                  (lambda tmp: grid_file(tmp, "command: finetune\ngrid: {seed: 0}\n")(),
                   "grid['seed'] must be list, got 0")),
    "notebook parameters": ((lambda _: check_parameters(NOTEBOOK, {"epoch": 2}), "'epoch'"),
                            (lambda _: check_parameters(NOTEBOOK, {"epochs": "two"}), "epochs must be int or None, "
                                                                                      "got 'two'")),
    "notebook run": ((lambda _: NotebookRun.from_dict({"notebook": NOTEBOOK, "epoch": 2}), "'epoch'"),
                     (lambda _: NotebookRun.from_dict({"notebook": NOTEBOOK, "kernel": 3}), "kernel must be str, "
                                                                                            "got 3")),
    "slurm options": ((lambda _: SlurmOptions(partitions="gpu"), "'partitions'"),
                      (lambda _: SlurmOptions(cpus_per_run=0), "cpus_per_run must be >= 1, got 0")),
    "bench options": ((lambda _: bench.Speed(repeat=3), "'repeat'"),
                      (lambda _: bench.Speed(repeats=0), "repeats must be >= 1, got 0")),
    "gpu check options": ((lambda _: gpu_check.GpuCheck(sizes="base"), "'sizes'"),
                          (lambda _: gpu_check.GpuCheck(device="cpu", sections="parity,speed"),
                           "unknown section 'speed' (valid: ")),
}


@pytest.mark.parametrize("kind, case", [(k, i) for k in KINDS for i in (0, 1)],
                         ids=[f"{k}-{'unknown key' if i == 0 else 'bad value'}" for k in KINDS for i in (0, 1)])
def test_each_kind_refuses_an_unknown_key_and_a_bad_value_in_one_line(tmp_path, kind, case):
    call, says = KINDS[kind][case]
    with pytest.raises(UsageError) as err:
        call(tmp_path)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_an_assignment_is_checked_as_a_new_value_is():
    options = bench.Contention()
    with pytest.raises(UsageError, match="rounds must be >= 1, got 0"):
        options.rounds = 0
    options.busy = [0, 3]
    assert options.busy == [0, 3]
    with pytest.raises(UsageError, match=r"busy\[1\] must be int, got 'x'"):
        options.busy = [0, "x"]


@pytest.mark.parametrize("argv, says", [
    (["speed", "--repeats", "0"], "error: --repeats must be >= 1, got 0"),
    (["contention", "--busy", "1", "x"], "error: argument --busy: invalid int value: 'x'"),
    (["reference", "--task", "squad"], "error: unknown task 'squad' (valid: wnut17, dream)"),
    (["reproduce", "--shard", "2/2"], "error: --shard must be I/N with 0 <= I < N"),
    (["squad", "--seq-lens", "64"], "error: unknown option '--seq-lens' for bench squad"),
    (["diagnostics", "--seeds", "0,x"], "error: --seeds must be a comma list of integers, got '0,x'"),
    (["reference", "--seeds", ","], "error: --seeds must be a comma list of integers, got ','"),
    (["reproduce", "--from-archive", "--shard", "0/2"], "error: --from-archive runs nothing"),
    (["contention", "--busy", "1", "2"], "error: --busy 1 2: give distinct counts"),
])
def test_a_bench_command_line_is_checked_by_its_model_before_any_work(capsys, argv, says):
    assert bench_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and err.count("\n") == 1


def test_the_sweep_command_line_is_checked_by_its_model(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("command: finetune\ngrid: {seed: [0]}\n")
    assert sweep_cli.main([str(grid), "--gpus-per-run", "-1"]) == 2
    assert capsys.readouterr().err == "error: --gpus-per-run must be >= 0, got -1\n"
    assert sweep_cli.main([str(grid), "--launcher", "cloud"]) == 2
    assert capsys.readouterr().err == "error: unknown launcher 'cloud' (valid: local, slurm)\n"


@pytest.mark.parametrize("argv, says", [
    (["predict", "--run", "r", "--file", "f", "--batch-size", "0"], "error: --batch-size must be > 0, got 0"),
    (["predict", "--run", "r"], "error: the following arguments are required: --file"),
    (["glue-submission", "--to", "x.zip", "--batch-size", "-1"], "error: --batch-size must be > 0, got -1"),
    (["glue-submission", "--fill-missing", "zero"], "error: unknown fill_missing 'zero' (valid: majority)"),
    (["notebooks", "run", NOTEBOOK, "--cell-timeout", "0"], "error: --cell-timeout must be > 0, got 0.0"),
    (["export"], "error: the following arguments are required: RUN_DIR"),
    (["collect", "runs", "--outt", "x"], "error: unknown option '--outt' (valid: --out)"),
    (["cache", "--clean"], "error: unknown option '--clean' (valid: --clear)"),
    (["assignment", "grade", "copy", "--report", "r.json", "--jobs", "0"], "error: --jobs must be >= 1, got 0"),
    (["assignment", "autograde", "/nowhere", "--timeout", "-5"], "error: --timeout must be > 0, got -5.0"),
    (["assignment", "build", "out", "--hidden-visibility", "never"],
     "error: unknown hidden_visibility 'never' (valid: after_published, after_due_date, hidden)"),
    (["check", "q1a", "--hiden"], "error: unknown option '--hiden' (valid: --hidden)"),
])
def test_every_other_command_line_is_checked_by_its_model_before_any_work(capsys, argv, says):
    from course_lib.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and err.count("\n") == 1


def test_a_tools_error_names_the_option_as_typed_also_where_the_field_names_its_own_flag():
    import argparse

    from course_lib.runtime.command_line import parsed

    with pytest.raises(UsageError, match=r"^--json must be bool, got 'x' \(str\)$"):
        parsed(argparse.Namespace(as_json="x"), bench.Memory)  # the field is as_json, its flag --json
