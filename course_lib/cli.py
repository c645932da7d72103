"""`python -m course_lib COMMAND ...`: the command line, built from the config dataclasses.

Every option is a field of a config dataclass, so CLI, notebooks and YAML share one set of names and
checks. Mistakes end with one line on stderr naming the bad value and the valid ones, and exit code 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import typing

from course_lib.training.config import FinetuneConfig, MultitaskConfig, PretrainConfig, field_choices, field_docs
from course_lib.errors import Parser, UsageError, report_errors
from course_lib.fast.allocator import keep_freed_memory, memory_mode
from course_lib.methods.registry import METHODS

ENTRY_POINTS = (  # the other command lines, named in the top-level --help
    ("course_lib.notebooks", "run a notebook with a preset and --set overrides (papermill), or list them"),
    ("course_lib.sweep", "run a YAML grid of fine-tuning runs or notebooks, one process each, resumable"),
    ("course_lib.collect", "one table of dev-set results (mean ± sd over seeds) from the finished runs in a folder"),
    ("course_lib.check", "a question's public checks (assignment mode), on a CPU in seconds"),
)


def _option_help(doc: str, choices: tuple[str, ...]) -> str:
    """The field's comment, plus its valid names unless the comment already lists them all ('%' escaped for
    argparse, which formats help text with %-style; the default is added by ArgumentDefaultsHelpFormatter)."""
    if choices and not all(re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", doc) for c in choices):
        doc = f"{doc} (valid: {', '.join(choices)})"
    return doc.replace("%", "%%")


def _add_field(parser, config_cls, f, hints: dict, docs: dict, choices: dict, given_only: bool = False) -> None:
    """One option for one field, its help read from the field's comment, with its choices and default.
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
    holders = {*config_cls.nested({}), "carried"}
    for f in dataclasses.fields(config_cls):
        if f.name not in holders:
            _add_field(parser, config_cls, f, hints, docs, choices)
    groups: dict[tuple, list] = {}  # the methods that read an option: its options, in declaration order
    for options in config_cls.option_classes():
        for f in dataclasses.fields(options):
            readers = tuple(m.name for m in METHODS.values() if f.name in m.options.__dataclass_fields__)
            title = f"options of {', '.join(readers)}" if config_cls is FinetuneConfig else options.__doc__.rstrip(".")
            if all(f.name != seen.name for fs in groups.values() for seen, _ in fs):
                groups.setdefault(title, []).append((f, options))
    for title, members in groups.items():
        group = parser.add_argument_group(title)
        for f, options in members:
            _add_field(group, options, f, typing.get_type_hints(options), field_docs(options),
                       field_choices(options), given_only=config_cls is FinetuneConfig)


def _epilog() -> str:
    """The other command lines, one line each: `python -m course_lib --help` is where people look first."""
    width = max(len(module) for module, _ in ENTRY_POINTS) + len("python -m ")
    lines = [f"  {'python -m ' + module:<{width}}  {what}" for module, what in ENTRY_POINTS]
    return "other entry points (each takes --help):\n" + "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m course_lib", description=__doc__.splitlines()[0], epilog=_epilog(),
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
    return parser


def _add_bench_parser(commands) -> None:
    """`bench WHAT`: the measurements, each a choice of WHAT with the options it reads."""
    bench = commands.add_parser("bench", help="benchmarks, measured side by side in one process")
    bench.add_argument("what", choices=["speed", "methods", "sparsemax", "diagnostics", "reproduce", "squad",
                                        "reference", "memory"],
                       help="speed: our encoder vs Hugging Face's BertModel; methods: each method's training step "
                            "vs vanilla (AG vs MLM) and SSA's label generation; sparsemax: ours vs entmax; "
                            "diagnostics: shortcut reliance and precision@k on synthetic data with ground truth; "
                            "reproduce: a grid (--grid) of every method vs vanilla over seeds, paired tests; "
                            "reference: our tagging / multiple-choice fine-tuning vs transformers' (--task); "
                            "memory: peak resident memory of fine-tuning, ours vs transformers'")
    bench.add_argument("--task", default=None, help="reference: wnut17 (data/ or WNUT17_DIR) or dream (DREAM_DIR)")
    bench.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    bench.add_argument("--model", default=None, help="BERT folder or hub id (default: the packaged MiniLM)")
    bench.add_argument("--batch-size", type=int, default=32)
    bench.add_argument("--seq-lens", type=int, nargs="+", default=None,
                       help="speed: 64 128; methods: 64; sparsemax: 128 (the first length only)")
    bench.add_argument("--repeats", type=int, default=10, help="timed repeats (memory: training steps per run)")
    bench.add_argument("--qa-batch-size", type=int, default=8, help="speed: questions per batch of the span-QA case")
    bench.add_argument("--squad-file", default=None, help="squad: the SQuAD v1.1 dev file to split by article "
                                                          "(default: $SQUAD_DIR, else data/squad)")
    bench.add_argument("--train-questions", type=int, default=2000,
                       help="squad: a seeded subset of the training articles' questions (0: all of them)")
    bench.add_argument("--epochs", type=int, default=None,
                       help="squad, reference: training epochs (default: squad 2; reference the task's budget)")
    bench.add_argument("--fast-kernels", action=argparse.BooleanOptionalAction, default=True,
                       help="methods: swap the CPU kernels in (course_lib.fast.optimize) as training does; "
                            "speed times both forms side by side")
    bench.add_argument("--epoch-examples", type=int, default=512, help="methods: sentences in the SSA epoch")
    bench.add_argument("--glue-dir", default=None,
                       help="methods: SST-2 sentences from here (default: $GLUE_DIR, else data/glue)")
    bench.add_argument("--threads", type=int, default=None,
                       help="torch threads (default: torch's choice); 1 is steadier on cores other jobs share")
    bench.add_argument("--methods", default=None, help="diagnostics: comma list (default: all fine-tuning methods)")
    bench.add_argument("--seeds", default="0,1,2", help="diagnostics, reference: comma list of seeds")
    bench.add_argument("--quick", action="store_true", help="diagnostics: the smoke budget (tiny data, for tests)")
    bench.add_argument("--output-dir", default=None,
                       help="diagnostics, reproduce, squad, reference: run folders, reused if there (default "
                            "runs/diagnostics, runs/sweep/<grid name>, runs/bench/squad, runs/bench/reference/<task>)")
    bench.add_argument("--grid", default=None,
                       help="reproduce: the sweep grid (default ci/grids/cpu_reproduction.yaml)")
    bench.add_argument("--report", default=None, help="reproduce: where the report goes "
                                                      "(default results/cpu_reproduction.md)")
    bench.add_argument("--shard", default=None, metavar="I/N", help="reproduce: run only the I-th of N parts")
    bench.add_argument("--archive", default=None, metavar="DIR",
                       help="reproduce: the results archive, where each run's metrics.json (only that file) is "
                            "copied as the run completes, DIR/<run folder>/metrics.json (default: runs/<grid "
                            "name> beside the report, results/runs/cpu_reproduction)")
    bench.add_argument("--from-archive", action="store_true",
                       help="reproduce: rebuild the report from the archive (--archive) alone, running nothing")


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
    commands = parser._subparsers._group_actions[0].choices
    if command is None:
        raise UsageError(f"missing command (valid: {', '.join(sorted(commands))})")
    if extra:
        raise UsageError(f"unknown option {extra[0]!r} for {command} "
                         f"(valid: {', '.join(commands[command].options())})")
    memory_mode()  # an unknown ATTENTION_LAB_KEEP_FREED_MEMORY stops here, before anything runs
    if command in CONFIGS:
        cfg = CONFIGS[command].from_dict(args)
        keep_freed_memory(cfg.batch_size, cfg.max_len)  # this process's malloc, never a notebook kernel's
        print(json.dumps(_train(command, cfg), sort_keys=True))
    elif command == "bench" and namespace.what == "reproduce":
        from course_lib.experiments import reproduce

        return reproduce.main(namespace)
    elif command == "bench" and namespace.what == "squad":
        from course_lib.bench import squad_reference

        squad_reference.main(namespace)
    elif command == "bench" and namespace.what == "reference":
        from course_lib.bench import family_reference

        family_reference.main(namespace)
    elif command == "bench" and namespace.what == "memory":
        from course_lib.bench import memory

        memory.main(namespace)
    elif command == "bench" and namespace.what == "diagnostics":
        from course_lib.bench import diagnostics

        diagnostics.main(namespace)
    elif command == "bench":
        from course_lib.bench import suite as bench

        bench.main(namespace)
    return 0


def main(argv: list[str] | None = None) -> int:
    return report_errors(lambda: run(sys.argv[1:] if argv is None else argv),
                         "the last checkpoint is kept; run the same command to resume")
