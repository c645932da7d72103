"""`python -m benchmarks WHAT` (from the repository root): benchmarks, measured side by side in one process.

Each bench names its help line, the module whose main(args) runs it, and the options it reads (flag: argparse
keywords). A bench takes only its own options, so `python -m benchmarks squad --seq-lens 64` is refused, not ignored.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.fast.allocator import memory_mode

_MODEL = {"--model": dict(default=None, help="BERT folder or hub id (default: the packaged MiniLM)")}
_JSON = {"--json": dict(action="store_true", help="print JSON instead of a markdown table")}
_THREADS = {"--threads": dict(type=int, default=None, help="torch threads (default: torch's choice); 1 is steadier "
                                                             "on cores other jobs share")}
BENCHES = {
    "speed": ("our encoder vs Hugging Face's BertModel, and the span-QA and tagging heads vs transformers'",
              "benchmarks.suite", {
                  **_MODEL, **_JSON, **_THREADS, "--batch-size": dict(type=int, default=32),
                  "--seq-lens": dict(type=int, nargs="+", default=None, help="sequence lengths (default: 64 128)"),
                  "--repeats": dict(type=int, default=10, help="timed repeats"),
                  "--qa-batch-size": dict(type=int, default=8, help="questions per batch of the span-QA case"),
                  "--compile": dict(action="store_true", help="also time the plain encoder under torch.compile "
                                                              "(the compile=default run option) against it eager")}),
    "methods": ("each method's training step vs vanilla (AG vs MLM), and SSA's label generation",
                "benchmarks.suite", {
                    **_MODEL, **_JSON, **_THREADS, "--batch-size": dict(type=int, default=32),
                    "--seq-lens": dict(type=int, nargs="+", default=None, help="the sequence length (default: 64)"),
                    "--repeats": dict(type=int, default=10, help="timed repeats"),
                    "--fast-kernels": dict(action=argparse.BooleanOptionalAction, default=True,
                                           help="swap the CPU kernels in (fast.optimize) as training does"),
                    "--epoch-examples": dict(type=int, default=512, help="sentences in the SSA epoch"),
                    "--glue-dir": dict(default=None, help="SST-2 sentences from here (default: $GLUE_DIR, else "
                                                          "data/glue)")}),
    "sparsemax": ("our sparsemax vs entmax's", "benchmarks.suite", {
        **_JSON, **_THREADS, "--batch-size": dict(type=int, default=32),
        "--seq-lens": dict(type=int, nargs="+", default=None, help="the sequence length (default: 128)"),
        "--repeats": dict(type=int, default=10, help="timed repeats")}),
    "diagnostics": ("shortcut reliance and precision@k on synthetic data with ground truth",
                    "benchmarks.diagnostics", {
                        **_MODEL, **_JSON,
                        "--methods": dict(default=None, help="comma list (default: all fine-tuning methods)"),
                        "--seeds": dict(default="0,1,2", help="comma list of seeds"),
                        "--quick": dict(action="store_true", help="the smoke budget (tiny data, for tests)"),
                        "--output-dir": dict(default=None, help="run folders, reused if there (default "
                                                                "runs/diagnostics)")}),
    "reproduce": ("a grid of every method vs vanilla over seeds, paired tests", "benchmarks.reproduce", {
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
              "benchmarks.squad_reference", {
                  **_MODEL, **_JSON,
                  "--squad-file": dict(default=None, help="the SQuAD v1.1 dev file to split by article (default: "
                                                          "$SQUAD_DIR, else data/squad)"),
                  "--train-questions": dict(type=int, default=2000,
                                            help="a seeded subset of the training articles' questions (0: all)"),
                  "--epochs": dict(type=int, default=None, help="training epochs (default 2)"),
                  "--output-dir": dict(default=None, help="run folders, reused if there (default "
                                                          "runs/bench/squad)")}),
    "reference": ("our tagging / multiple-choice fine-tuning vs transformers'", "benchmarks.family_reference", {
        **_MODEL, **_JSON,
        "--task": dict(default=None, help="wnut17 (data/ or WNUT17_DIR) or dream (DREAM_DIR)"),
        "--seeds": dict(default="0,1,2", help="comma list of seeds"),
        "--epochs": dict(type=int, default=None, help="training epochs (default: the task's budget)"),
        "--output-dir": dict(default=None, help="run folders, reused if there (default "
                                                "runs/bench/reference/<task>)")}),
    "predict": ("our predict vs a transformers text-classification pipeline on the same run, exported",
                "benchmarks.predict_speed", {
                    **_MODEL, **_JSON, **_THREADS, "--batch-size": dict(type=int, default=32),
                    "--sentences": dict(type=int, default=10000, help="SST-2 training sentences predicted"),
                    "--repeats": dict(type=int, default=3, help="timed rounds, each running both"),
                    "--run": dict(default=None, help="a finished SST-2 run (default: a short one trained once into "
                                                     "the output folder)"),
                    "--glue-dir": dict(default=None, help="SST-2 from here (default: $GLUE_DIR, else data/glue)"),
                    "--output-dir": dict(default=None, help="the run and the files (default runs/bench/predict)")}),
    "memory": ("peak resident memory of fine-tuning, ours vs transformers'", "benchmarks.memory", {
        **_MODEL, **_JSON, "--repeats": dict(type=int, default=10, help="training steps per run")}),
    "contention": ("a training step quiet and beside busy programs, under each OpenMP thread setting",
                   "benchmarks.contention", {
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


def build_parser() -> Parser:
    """`python -m benchmarks WHAT`: one sub-command per measurement, each with the options it reads."""
    parser = Parser(prog="python -m benchmarks", description="benchmarks, measured side by side in one process")
    benches = parser.add_subparsers(dest="what", metavar="WHAT", parser_class=Parser, required=True)
    for name, (what, _, options) in BENCHES.items():
        sub = benches.add_parser(name, help=what, description=what, formatter_class=_DefaultsWhereUseful)
        for flag, keywords in options.items():
            sub.add_argument(flag, **keywords)
    parser.subcommands = benches.choices
    return parser


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        parser = build_parser()
        args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
        if extra:
            raise UsageError(f"unknown option {extra[0]!r} for bench {args.what} "
                             f"(valid: {', '.join(parser.subcommands[args.what].options())})")
        memory_mode()  # an unknown ATTENTION_LAB_KEEP_FREED_MEMORY stops here, before anything runs
        return importlib.import_module(BENCHES[args.what][1]).main(args) or 0
    return report_errors(body, "run the same command again")




if __name__ == "__main__":
    sys.exit(main())
