"""`python -m benchmarks WHAT` (from the repository root): benchmarks, measured side by side in one process.

Each bench names its help line, the module whose main(options) runs it, and its options' model (`benchmarks.options`).
A bench takes only its own options, so `python -m benchmarks squad --seq-lens 64` is refused, not ignored.
"""
from __future__ import annotations

import importlib
import sys

from benchmarks import options
from course_lib.runtime.command_line import DefaultsWhereUseful, add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.fast.allocator import memory_mode

BENCHES = {  # name: (what it measures, the module whose main(options) runs it, its options)
    "speed": ("our encoder vs Hugging Face's BertModel, and the span-QA and tagging heads vs transformers'",
              "benchmarks.suite", options.Speed),
    "methods": ("each method's training step vs vanilla (AG vs MLM), and SSA's label generation", "benchmarks.suite",
                options.Methods),
    "sparsemax": ("our sparsemax vs entmax's", "benchmarks.suite", options.Sparsemax),
    "diagnostics": ("shortcut reliance and precision@k on synthetic data with ground truth", "benchmarks.diagnostics",
                    options.Diagnostics),
    "reproduce": ("a grid of every method vs vanilla over seeds, paired tests", "benchmarks.reproduce",
                  options.Reproduce),
    "squad": ("our span-QA fine-tuning vs BertForQuestionAnswering on a by-article split of SQuAD v1.1 dev",
              "benchmarks.squad_reference", options.Squad),
    "reference": ("our tagging / multiple-choice fine-tuning vs transformers'", "benchmarks.family_reference",
                  options.Reference),
    "predict": ("our predict vs a transformers text-classification pipeline on the same run, exported",
                "benchmarks.predict_speed", options.Predict),
    "memory": ("peak resident memory of fine-tuning, ours vs transformers'", "benchmarks.memory", options.Memory),
    "contention": ("a training step quiet and beside busy programs, under each OpenMP thread setting",
                   "benchmarks.contention", options.Contention),
}


def build_parser() -> Parser:
    """`python -m benchmarks WHAT`: one sub-command per measurement, each with the options it reads."""
    parser = Parser(prog="python -m benchmarks", description="benchmarks, measured side by side in one process")
    benches = parser.add_subparsers(dest="what", metavar="WHAT", parser_class=Parser, required=True)
    for name, (what, _, model) in BENCHES.items():
        sub = benches.add_parser(name, help=what, description=what, formatter_class=DefaultsWhereUseful)
        add_fields(sub, model, words=True)
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
        _, module, model = BENCHES[args.what]
        return importlib.import_module(module).main(parsed(args, model)) or 0
    return report_errors(body, "run the same command again")




if __name__ == "__main__":
    sys.exit(main())
