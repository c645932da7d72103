"""`python -m course_lib COMMAND ...`: the command line, built from the config dataclasses.

Every option is a field of a config dataclass, so CLI, notebooks and YAML share one set of names and
checks. Mistakes end with one line on stderr naming the bad value and the valid ones, and exit code 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing

from .config import FinetuneConfig, MultitaskConfig, PretrainConfig
from .errors import RunFailed, UsageError


class Parser(argparse.ArgumentParser):
    """argparse, but its errors raise UsageError (one line), and an unknown option lists the valid ones."""

    def error(self, message: str):
        raise UsageError(message)

    def options(self) -> list[str]:
        return sorted(o for a in self._actions for o in a.option_strings if o.startswith("--") and o != "--help")

    def parse_strict(self, argv: list[str] | None) -> argparse.Namespace:
        args, extra = self.parse_known_args(sys.argv[1:] if argv is None else argv)
        if extra:
            raise UsageError(f"unknown option {extra[0]!r} (valid: {', '.join(self.options())})")
        return args


def report_errors(body, interrupted: str) -> int:
    """Run body() and turn a user's mistake or a failed run into one line on stderr and an exit code."""
    try:
        return body()
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"run failed: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted: {interrupted}", file=sys.stderr)
        return 130


def _add_config_options(parser: argparse.ArgumentParser, config_cls) -> None:
    hints = typing.get_type_hints(config_cls)
    for f in dataclasses.fields(config_cls):
        kinds = [t for t in (typing.get_args(hints[f.name]) or (hints[f.name],)) if t is not type(None)]
        flag = "--" + f.name.replace("_", "-")
        if kinds == [bool]:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            parser.add_argument(flag, dest=f.name, type=kinds[0], default=f.default, metavar=kinds[0].__name__.upper())


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m course_lib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    finetune = commands.add_parser("finetune", help="fine-tune BERT on a GLUE task")
    _add_config_options(finetune, FinetuneConfig)
    pretrain = commands.add_parser("pretrain", help="pre-train a small BERT from scratch: MLM, or MLM + AG")
    _add_config_options(pretrain, PretrainConfig)
    multitask = commands.add_parser("multitask", help="one BERT, a head per GLUE task, a task schedule, SSA per task")
    _add_config_options(multitask, MultitaskConfig)
    bench = commands.add_parser("bench", help="benchmarks, measured side by side in one process")
    bench.add_argument("what", choices=["speed", "methods", "sparsemax", "diagnostics", "reproduce"],
                       help="speed: our encoder vs Hugging Face's BertModel; methods: each method's training step "
                            "vs vanilla (AG vs MLM) and SSA's label generation; sparsemax: ours vs entmax; "
                            "diagnostics: shortcut reliance and precision@k on synthetic data with ground truth; "
                            "reproduce: every method vs vanilla on GLUE_DIR tasks, 3 seeds, paired tests")
    bench.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    bench.add_argument("--model", default=None, help="BERT folder or hub id (default: the packaged MiniLM)")
    bench.add_argument("--batch-size", type=int, default=32)
    bench.add_argument("--seq-lens", type=int, nargs="+", default=None,
                       help="speed: 64 128; methods: 64; sparsemax: 128 (the first length only)")
    bench.add_argument("--repeats", type=int, default=10)
    bench.add_argument("--epoch-examples", type=int, default=512, help="methods: sentences in the SSA epoch")
    bench.add_argument("--glue-dir", default=None,
                       help="methods: SST-2 sentences from here (default: $GLUE_DIR, else generated text)")
    bench.add_argument("--threads", type=int, default=None,
                       help="torch threads (default: torch's choice); 1 is steadier on cores other jobs share")
    bench.add_argument("--methods", default=None, help="diagnostics: comma list (default: all fine-tuning methods)")
    bench.add_argument("--seeds", default="0,1,2", help="diagnostics: comma list of seeds")
    bench.add_argument("--quick", action="store_true", help="diagnostics: the smoke budget (tiny data, for tests)")
    bench.add_argument("--output-dir", default=None,
                       help="diagnostics, reproduce: run folders, reused if there "
                            "(default runs/diagnostics, runs/sweep/<grid name>)")
    bench.add_argument("--grid", default=None, help="reproduce: the sweep grid (default ci/grids/cpu_reproduction.yaml)")
    bench.add_argument("--report", default=None, help="reproduce: where the report goes "
                                                      "(default results/cpu_reproduction.md)")
    bench.add_argument("--shard", default=None, metavar="I/N", help="reproduce: run only the I-th of N parts")
    return parser


def run(argv: list[str]) -> int:
    parser = build_parser()
    namespace, extra = parser.parse_known_args(argv)
    args = vars(namespace)
    command = args.pop("command")
    commands = parser._subparsers._group_actions[0].choices
    if command is None:
        raise UsageError(f"missing command (valid: {', '.join(sorted(commands))})")
    if extra:
        raise UsageError(f"unknown option {extra[0]!r} for {command} "
                         f"(valid: {', '.join(commands[command].options())})")
    if command == "finetune":
        from .train import finetune

        result = finetune(FinetuneConfig.from_dict(args))
        print(json.dumps({k: v for k, v in result.items() if k.startswith("dev")}, sort_keys=True))
    elif command == "pretrain":
        from .pretrain import pretrain

        result = pretrain(PretrainConfig.from_dict(args))
        print(json.dumps({"method": result["method"], "corpus": result["corpus"]["source"], **result["final"]},
                         sort_keys=True))
    elif command == "multitask":
        from .multitask import train_multitask

        result = train_multitask(MultitaskConfig.from_dict(args))
        print(json.dumps({"dev": result["dev"], "overall": result["overall"]}, sort_keys=True))
    elif command == "bench" and namespace.what == "reproduce":
        from . import reproduce

        return reproduce.main(namespace)
    elif command == "bench" and namespace.what == "diagnostics":
        from . import diagnostics

        diagnostics.main(namespace)
    elif command == "bench":
        from . import bench

        bench.main(namespace)
    return 0


def main(argv: list[str] | None = None) -> int:
    return report_errors(lambda: run(sys.argv[1:] if argv is None else argv),
                         "the last checkpoint is kept; run the same command to resume")
