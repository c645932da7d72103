"""`python -m course_lib COMMAND ...`: the one command line.

The training commands (finetune, pretrain, multitask) are built from the config models (`runtime.settings`):
every option is a field, so CLI, notebooks and YAML share one set of names and checks. The other commands (`COMMANDS` below:
notebooks, sweep, collect, check, assignment, export, predict, glue-submission, cache) get their
arguments handed to their own parsers.
Mistakes end with one line on stderr naming the bad value and the valid ones, and exit code 2.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.fast.allocator import keep_freed_memory, memory_mode
from course_lib.runtime.command_line import add_field
from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig, field_choices

COMMANDS = {  # the commands with a parser of their own: `python -m course_lib NAME ARGS` runs NAME's main(ARGS)
    "notebooks": ("course_lib.lab.notebooks",
                  "run a notebook with a preset and --set overrides (papermill), or list them"),
    "sweep": ("course_lib.lab.sweep_cli", "run a YAML grid of fine-tuning runs or notebooks, one process each, "
                                              "resumable"),
    "collect": ("course_lib.lab.collect", "one table of dev-set results (mean ± sd over seeds) from the "
                                                  "finished runs in a folder"),
    "check": ("course_lib.teaching.check", "a question's public checks (assignment mode), on a CPU in seconds"),
    "assignment": ("course_lib.teaching.assignment", "staff: build the student release, grade a copy, list the "
                                                     "questions"),
    "export": ("course_lib.training.export", "write a finished fine-tuning run as a Hugging Face model folder"),
    "predict": ("course_lib.training.predict", "a finished fine-tuning run's model on new text, one prediction per "
                                               "row"),
    "glue-submission": ("course_lib.lab.glue_submission", "the zip the GLUE leaderboard takes, from one finished "
                                                          "run per task; --check a zip"),
    "cache": ("course_lib.runtime.feature_cache", "the encoded-data cache every run shares: its size, or --clear"),
}


def run_command(name: str, argv: list[str]) -> int:
    """One of COMMANDS with its own arguments; a command whose module this copy lacks (the assignment builder
    is not in the student release) is one line."""
    module_name = COMMANDS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name != module_name:
            raise
        print(f"error: the command {name!r} is not part of this copy ({module_name} is missing)", file=sys.stderr)
        return 2
    return module.main(argv) or 0


def _add_flat_options(parser: argparse.ArgumentParser, config_cls, listed: bool = True) -> None:
    """One option per field of the config itself (not the fields that hold a method's or family's options).
    listed: the help lists the registries' names (every task and method, loading them all)."""
    choices = field_choices(config_cls) if listed else {}
    for name in config_cls.flat_hints(classes=[]):  # the fields that hold no nested options
        add_field(parser, name, config_cls.model_fields[name], choices.get(name, ()))


def _run_option_classes(config_cls, argv: list[str]) -> list[type]:
    """The options classes a run of these arguments reads (its method's, its task family's), found from its
    flat options (--method, --task, ...) alone, so that no other method or family is loaded."""
    known = Parser(add_help=False)
    _add_flat_options(known, config_cls, listed=False)
    values = vars(known.parse_known_args(dashed(argv))[0])
    return list(dict.fromkeys(config_cls.nested(values).values()))


def _add_config_options(parser: argparse.ArgumentParser, config_cls, classes: list[type] | None = None) -> None:
    """One option per config field; a nested options class's fields in a group of their own (a method's
    options under its name), each option once however many methods read it. classes: the run's own options
    classes; None: every method's and family's (for --help, loading them all)."""
    _add_flat_options(parser, config_cls, listed=classes is None)
    groups: dict[str, list] = {}  # who reads an option: its options, in declaration order
    readers = config_cls.foreign(None) if classes is None else {}  # each option's readers (for --help)
    for options in config_cls.option_classes() if classes is None else classes:
        for name in options.model_fields:
            title = f"options of {readers[name]}" if readers else options.__doc__.rstrip(".")
            if all(name != seen for members in groups.values() for seen, _ in members):
                groups.setdefault(title, []).append((name, options))
    for title, members in groups.items():
        group = parser.add_argument_group(title)
        for name, options in members:
            add_field(group, name, options.model_fields[name], field_choices(options).get(name, ()),
                      given_only=bool(readers) or classes is not None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. For a training command's arguments (`argv`), that command offers the run's own
    options (its method's and task family's) and loads no other method or family; without `argv`, or with
    --help, every command offers every option, loading every method and family to list them."""
    lazy = argv is not None and not {"-h", "--help"} & set(argv)
    parser = Parser(prog="python -m course_lib", description=__doc__.splitlines()[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, config_cls, what in (
            ("finetune", FinetuneConfig, "fine-tune BERT on one task of any family (GLUE, SQuAD, WNUT-17, "
                                          "DREAM, ...)"),
            ("pretrain", PretrainConfig, "pre-train a small BERT from scratch: MLM, or MLM + AG"),
            ("multitask", MultitaskConfig, "one BERT, a head per task, a task schedule, SSA per task "
                                            "(--cs224n: the CS224N default project's data and deliverables)")):
        command = commands.add_parser(name, help=what, description=what,
                                      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        if not lazy:
            _add_config_options(command, config_cls)
        elif argv[:1] == [name]:  # the command that runs: its run's options only
            _add_config_options(command, config_cls, _run_option_classes(config_cls, argv[1:]))
    for name, (_, what) in COMMANDS.items():  # listed here; `main` hands their arguments to their own parsers
        commands.add_parser(name, help=what, add_help=False)
    parser.subcommands = commands.choices  # each command's parser, for the error that lists its options
    return parser


CONFIGS = {"finetune": FinetuneConfig, "pretrain": PretrainConfig, "multitask": MultitaskConfig}


def _train(command: str, cfg) -> dict:
    """Run one training command; return the summary it prints (the full result is its metrics.json)."""
    if command == "finetune":
        from course_lib.training.finetune import finetune

        result = finetune(cfg)
        return {k: v for k, v in result.items() if k.startswith(("dev", "test"))}
    if command == "pretrain":
        from course_lib.training.pretrain import pretrain

        result = pretrain(cfg)
        return {"method": result["method"], "corpus": result["corpus"]["source"], **result["final"]}
    if cfg.cs224n:
        from course_lib.teaching.cs224n_project import PREDICTIONS, run_cs224n

        result = run_cs224n(cfg)
        return {**result["cs224n"], "predictions": f"{cfg.output_dir}/{PREDICTIONS}"}
    from course_lib.training.multitask import train_multitask

    result = train_multitask(cfg)
    return {"dev": result["dev"], "overall": result["overall"]}


def dashed(argv: list[str]) -> list[str]:
    """Options spelled with underscores (`--batch_size 8`, as the CS224N starter scripts take them) as ours
    (`--batch-size 8`); values are left alone."""
    return [arg.split("=", 1)[0].replace("_", "-") + arg[len(arg.split("=", 1)[0]):] if arg.startswith("--") else arg
            for arg in argv]


def run(argv: list[str]) -> int:
    parser = build_parser(argv)
    namespace, extra = parser.parse_known_args(dashed(argv))
    args = vars(namespace)
    command = args.pop("command")
    if command is None:
        raise UsageError(f"missing command (valid: {', '.join(sorted([*CONFIGS, *COMMANDS]))})")
    other = extra[0].split("=")[0][2:].replace("-", "_") if extra and extra[0].startswith("--") else None
    if other is not None and other in CONFIGS[command].foreign(None):  # another method's or family's option:
        #   from_dict says whose
        CONFIGS[command].from_dict({**args, other: None})
    if extra:
        raise UsageError(f"unknown option {extra[0]!r} for {command} "
                         f"(valid: {', '.join(parser.subcommands[command].options())})")
    memory_mode()  # an unknown ATTENTION_LAB_KEEP_FREED_MEMORY stops here, before anything runs
    cfg = CONFIGS[command].from_dict(args)
    keep_freed_memory(cfg.batch_size, cfg.max_len)  # this process's malloc, never a notebook kernel's
    print(json.dumps(_train(command, cfg), sort_keys=True))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        return run_command(argv[0], argv[1:])
    return report_errors(lambda: run(argv), "the last checkpoint is kept; run the same command to resume")
