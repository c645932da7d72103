"""`python -m course_lib COMMAND ...`: the one command line.

The training commands (finetune, pretrain, multitask) are built from the config dataclasses: every option is a
field, so CLI, notebooks and YAML share one set of names and checks. `bench WHAT` runs a measurement; the
other commands (`COMMANDS`: notebooks, sweep, collect, check, assignment, gpu-check) get their arguments
handed to their own parsers. Mistakes end with one line on stderr naming the bad value and the valid ones,
and exit code 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import sys
import typing

from course_lib.config import field_docs
from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig, field_choices
from course_lib.errors import Parser, UsageError, report_errors
from course_lib.fast.allocator import keep_freed_memory, memory_mode

COMMANDS = {  # the commands with a parser of their own: `python -m course_lib NAME ARGS` runs NAME's main(ARGS)
    "notebooks": ("course_lib.lab.notebooks",
                  "run a notebook with a preset and --set overrides (papermill), or list them"),
    "sweep": ("course_lib.lab.sweep", "run a YAML grid of fine-tuning runs or notebooks, one process each, "
                                              "resumable"),
    "collect": ("course_lib.lab.collect", "one table of dev-set results (mean ± sd over seeds) from the "
                                                  "finished runs in a folder"),
    "check": ("course_lib.teaching.check", "a question's public checks (assignment mode), on a CPU in seconds"),
    "assignment": ("course_lib.teaching.assignment", "staff: build the student release, grade a copy, list the "
                                                     "questions"),
    "gpu-check": ("course_lib.lab.bench.gpu_check", "the checks a CPU cannot run (bf16 parity, speed, every method "
                                                "and paper preset, the loop), one report"),
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


def alias(name: str) -> int:
    """An old command-line name (`python -m course_lib sweep`), kept for one release: it says the new form on
    stderr, then runs it."""
    print(f"note: `python -m course_lib.{name}` is now `python -m course_lib {name}`", file=sys.stderr)
    return run_command(name, sys.argv[1:])


def _option_help(doc: str, choices: tuple[str, ...]) -> str:
    """The field's help text, plus its valid names unless the text already lists them all ('%' escaped for
    argparse, which formats help text with %-style; the default is added by ArgumentDefaultsHelpFormatter)."""
    if choices and not all(re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", doc) for c in choices):
        doc = f"{doc} (valid: {', '.join(choices)})"
    return doc.replace("%", "%%")


def _add_field(parser, config_cls, f, hints: dict, docs: dict, choices: dict, given_only: bool = False) -> None:
    """One option for one field, its help read from the field's metadata, with its choices and default.
    given_only: absent from the parsed options unless given (a method's options: from_dict refuses another
    method's, so only what the command line names may reach it)."""
    kinds = [t for t in (typing.get_args(hints[f.name]) or (hints[f.name],)) if t is not type(None)]
    flag = "--" + f.name.replace("_", "-")
    text = _option_help(docs.get(f.name, ""), choices.get(f.name, ()))
    default = argparse.SUPPRESS if given_only else f.default
    if given_only:
        text += f" (default: {f.default})"
    if kinds == [bool]:
        parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=text)
    else:
        parser.add_argument(flag, dest=f.name, type=kinds[0], default=default, help=text,
                            metavar=kinds[0].__name__.upper())


def _add_config_options(parser: argparse.ArgumentParser, config_cls) -> None:
    """One option per config field; a nested options class's fields in a group of their own (a method's
    options under its name), each option once however many methods read it."""
    hints, docs, choices = typing.get_type_hints(config_cls), field_docs(config_cls), field_choices(config_cls)
    flat = config_cls.flat_hints()  # not the fields that hold a method's options, nor `carried`
    for f in dataclasses.fields(config_cls):
        if f.name in flat:
            _add_field(parser, config_cls, f, hints, docs, choices)
    groups: dict[str, list] = {}  # who reads an option: its options, in declaration order
    readers = config_cls.foreign(None)  # each option's readers, where a run reads only some (its method's)
    for options in config_cls.option_classes():
        for f in dataclasses.fields(options):
            title = f"options of {readers[f.name]}" if readers else options.__doc__.rstrip(".")
            if all(f.name != seen.name for fs in groups.values() for seen, _ in fs):
                groups.setdefault(title, []).append((f, options))
    for title, members in groups.items():
        group = parser.add_argument_group(title)
        for f, options in members:
            _add_field(group, options, f, typing.get_type_hints(options), field_docs(options),
                       field_choices(options), given_only=bool(readers))


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m course_lib", description=__doc__.splitlines()[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, config_cls, what in (
            ("finetune", FinetuneConfig, "fine-tune BERT on a GLUE task"),
            ("pretrain", PretrainConfig, "pre-train a small BERT from scratch: MLM, or MLM + AG"),
            ("multitask", MultitaskConfig, "one BERT, a head per task, a task schedule, SSA per task "
                                            "(--cs224n: the CS224N default project's data and deliverables)")):
        command = commands.add_parser(name, help=what, description=what,
                                      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        _add_config_options(command, config_cls)
    _add_bench_parser(commands)
    for name, (_, what) in COMMANDS.items():  # listed here; `main` hands their arguments to their own parsers
        commands.add_parser(name, help=what, add_help=False)
    parser.subcommands = commands.choices  # each command's parser, for the error that lists its options
    return parser


# Each bench: its help line, the module whose main(args) runs it, and the options it reads (flag: argparse
# keywords). A bench takes only its own options, so `bench squad --seq-lens 64` is refused, not ignored.
_MODEL = {"--model": dict(default=None, help="BERT folder or hub id (default: the packaged MiniLM)")}
_JSON = {"--json": dict(action="store_true", help="print JSON instead of a markdown table")}
_THREADS = {"--threads": dict(type=int, default=None, help="torch threads (default: torch's choice); 1 is steadier "
                                                             "on cores other jobs share")}
BENCHES = {
    "speed": ("our encoder vs Hugging Face's BertModel, and the span-QA and tagging heads vs transformers'",
              "course_lib.lab.bench.suite", {
                  **_MODEL, **_JSON, **_THREADS, "--batch-size": dict(type=int, default=32),
                  "--seq-lens": dict(type=int, nargs="+", default=None, help="sequence lengths (default: 64 128)"),
                  "--repeats": dict(type=int, default=10, help="timed repeats"),
                  "--qa-batch-size": dict(type=int, default=8, help="questions per batch of the span-QA case"),
                  "--compile": dict(action="store_true", help="also time the plain encoder under torch.compile "
                                                              "(the compile=default run option) against it eager")}),
    "methods": ("each method's training step vs vanilla (AG vs MLM), and SSA's label generation",
                "course_lib.lab.bench.suite", {
                    **_MODEL, **_JSON, **_THREADS, "--batch-size": dict(type=int, default=32),
                    "--seq-lens": dict(type=int, nargs="+", default=None, help="the sequence length (default: 64)"),
                    "--repeats": dict(type=int, default=10, help="timed repeats"),
                    "--fast-kernels": dict(action=argparse.BooleanOptionalAction, default=True,
                                           help="swap the CPU kernels in (course_lib.fast.optimize) as training does"),
                    "--epoch-examples": dict(type=int, default=512, help="sentences in the SSA epoch"),
                    "--glue-dir": dict(default=None, help="SST-2 sentences from here (default: $GLUE_DIR, else "
                                                          "data/glue)")}),
    "sparsemax": ("our sparsemax vs entmax's", "course_lib.lab.bench.suite", {
        **_JSON, **_THREADS, "--batch-size": dict(type=int, default=32),
        "--seq-lens": dict(type=int, nargs="+", default=None, help="the sequence length (default: 128)"),
        "--repeats": dict(type=int, default=10, help="timed repeats")}),
    "diagnostics": ("shortcut reliance and precision@k on synthetic data with ground truth",
                    "course_lib.lab.bench.diagnostics", {
                        **_MODEL, **_JSON,
                        "--methods": dict(default=None, help="comma list (default: all fine-tuning methods)"),
                        "--seeds": dict(default="0,1,2", help="comma list of seeds"),
                        "--quick": dict(action="store_true", help="the smoke budget (tiny data, for tests)"),
                        "--output-dir": dict(default=None, help="run folders, reused if there (default "
                                                                "runs/diagnostics)")}),
    "reproduce": ("a grid of every method vs vanilla over seeds, paired tests", "course_lib.lab.reproduce", {
        "--grid": dict(default=None, help="the sweep grid (default ci/grids/cpu_reproduction.yaml)"),
        "--report": dict(default=None, help="where the report goes (default results/cpu_reproduction.md)"),
        "--output-dir": dict(default=None, help="run folders, reused if there (default runs/sweep/<grid name>)"),
        "--shard": dict(default=None, metavar="I/N", help="run only the I-th of N parts"),
        "--archive": dict(default=None, metavar="DIR",
                          help="the results archive, where each run's metrics.json (only that file) is copied as "
                               "the run completes, DIR/<run folder>/metrics.json (default: runs/<grid name> beside "
                               "the report, results/runs/cpu_reproduction)"),
        "--from-archive": dict(action="store_true", help="rebuild the report from the archive (--archive) alone, "
                                                         "running nothing")}),
    "squad": ("our span-QA fine-tuning vs BertForQuestionAnswering on a by-article split of SQuAD v1.1 dev",
              "course_lib.lab.bench.squad_reference", {
                  **_MODEL, **_JSON,
                  "--squad-file": dict(default=None, help="the SQuAD v1.1 dev file to split by article (default: "
                                                          "$SQUAD_DIR, else data/squad)"),
                  "--train-questions": dict(type=int, default=2000,
                                            help="a seeded subset of the training articles' questions (0: all)"),
                  "--epochs": dict(type=int, default=None, help="training epochs (default 2)"),
                  "--output-dir": dict(default=None, help="run folders, reused if there (default "
                                                          "runs/bench/squad)")}),
    "reference": ("our tagging / multiple-choice fine-tuning vs transformers'", "course_lib.lab.bench.family_reference", {
        **_MODEL, **_JSON,
        "--task": dict(default=None, help="wnut17 (data/ or WNUT17_DIR) or dream (DREAM_DIR)"),
        "--seeds": dict(default="0,1,2", help="comma list of seeds"),
        "--epochs": dict(type=int, default=None, help="training epochs (default: the task's budget)"),
        "--output-dir": dict(default=None, help="run folders, reused if there (default "
                                                "runs/bench/reference/<task>)")}),
    "memory": ("peak resident memory of fine-tuning, ours vs transformers'", "course_lib.lab.bench.memory", {
        **_MODEL, **_JSON, "--repeats": dict(type=int, default=10, help="training steps per run")}),
    "contention": ("a training step quiet and beside busy programs, under each OpenMP thread setting",
                   "course_lib.lab.bench.contention", {
                       **_JSON, "--busy": dict(type=int, nargs="+", default=[0, 1, 2],
                                               help="how many busy programs run beside, one case each"),
                       "--rounds": dict(type=int, default=2, help="rounds, each running every setting and load"),
                       "--repeats": dict(type=int, default=4, help="timed steps per run"),
                       "--batch-size": dict(type=int, default=32), "--seq-len": dict(type=int, default=64)}),
}


class _DefaultsWhereUseful(argparse.ArgumentDefaultsHelpFormatter):
    """Adds "(default: X)" to an option's help unless the help already says it or X is None or False."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _add_bench_parser(commands) -> None:
    """`bench WHAT`: one sub-command per measurement, each with the options it reads."""
    bench = commands.add_parser("bench", help="benchmarks, measured side by side in one process",
                                description="benchmarks, measured side by side in one process")
    benches = bench.add_subparsers(dest="what", metavar="WHAT", parser_class=Parser, required=True)
    for name, (what, _, options) in BENCHES.items():
        sub = benches.add_parser(name, help=what, description=what, formatter_class=_DefaultsWhereUseful)
        for flag, keywords in options.items():
            sub.add_argument(flag, **keywords)
    bench.subcommands = benches.choices


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
        from course_lib.training.cs224n_project import PREDICTIONS, run_cs224n

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
    parser = build_parser()
    namespace, extra = parser.parse_known_args(dashed(argv))
    args = vars(namespace)
    command = args.pop("command")
    if command is None:
        raise UsageError(f"missing command (valid: {', '.join(sorted([*CONFIGS, 'bench', *COMMANDS]))})")
    if extra:
        where = f"bench {namespace.what}" if command == "bench" else command
        raise UsageError(f"unknown option {extra[0]!r} for {where} (valid: {', '.join(_options_of(parser, argv))})")
    memory_mode()  # an unknown ATTENTION_LAB_KEEP_FREED_MEMORY stops here, before anything runs
    if command in CONFIGS:
        cfg = CONFIGS[command].from_dict(args)
        keep_freed_memory(cfg.batch_size, cfg.max_len)  # this process's malloc, never a notebook kernel's
        print(json.dumps(_train(command, cfg), sort_keys=True))
        return 0
    module = importlib.import_module(BENCHES[namespace.what][1])
    return module.main(namespace) or 0


def _options_of(parser, argv: list[str]) -> list[str]:
    """The options of the (sub-)command that argv names (`finetune`, `bench squad`): what an unknown option's
    error lists. build_parser keeps each parser's sub-commands in its `subcommands`."""
    for word in (arg for arg in dashed(argv) if not arg.startswith("-")):
        if word not in getattr(parser, "subcommands", {}):
            break
        parser = parser.subcommands[word]
    return parser.options()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        return run_command(argv[0], argv[1:])
    return report_errors(lambda: run(argv), "the last checkpoint is kept; run the same command to resume")
