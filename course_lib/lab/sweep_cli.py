"""`python -m course_lib sweep GRID.yaml`: its options, and where the runs go: here one after another
(`--launcher local`, the default), or to Slurm as one job array (`--launcher slurm`); `--status` says where each
run stands. The grid file and the folders are described in `lab/sweep.py`, Slurm's side in `lab/slurm.py`."""
from __future__ import annotations

import argparse
import sys

from course_lib.lab import sweep, sweep_slurm
from course_lib.lab.slurm import SlurmOptions
from course_lib.runtime.errors import Parser, UsageError, report_errors

SLURM_ONLY = ("partition", "time", "cpus_per_run", "mem_per_run", "array_parallelism", "sbatch_arg", "wait")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m course_lib sweep", description=sweep.__doc__.splitlines()[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="\n".join(sweep.__doc__.splitlines()[2:]))
    parser.add_argument("grid", metavar="GRID.yaml", help="the grid file: command, base, grid")
    parser.add_argument("--output-dir", default=None, metavar="DIR",
                        help="parent folder of the run folders (default: runs/sweep/<grid file name>)")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local",
                        help="local: the runs one after another here; slurm: one job array, a task per run")
    parser.add_argument("--status", action="store_true", help="each run: done, running, queued, stopped, failed "
                        "or todo, with its job id and a failure's last log line; nothing runs")
    parser.add_argument("--shard", default="0/1", metavar="I/N", help="0-based: run only the I-th of N parts")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and their status; run nothing")
    parser.add_argument("--retry-failed", action=argparse.BooleanOptionalAction, default=True,
                        help="run failed runs again (default: yes)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="kill a run after this long and record it as failed (it resumes next time)")
    parser.add_argument("--gpus-per-run", type=int, default=0, metavar="N",
                        help="GPUs per run; N > 1 starts a fine-tuning run through accelerate, one process each")
    slurm = parser.add_argument_group("--launcher slurm")
    slurm.add_argument("--partition", metavar="P")
    slurm.add_argument("--time", metavar="HH:MM:SS", help="each task's time limit; a run near it saves and requeues")
    slurm.add_argument("--cpus-per-run", type=int, metavar="N")
    slurm.add_argument("--mem-per-run", metavar="SIZE", help="as sbatch's --mem: 16G, 4000M")
    slurm.add_argument("--array-parallelism", type=int, metavar="K", help="at most K tasks at once")
    slurm.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help="passed to sbatch as is (--sbatch-arg --qos=high); repeatable")
    slurm.add_argument("--wait", action="store_true", help="block until the array ends, then print the table")
    parser.add_argument("--run", metavar="NAME", help="only this run of the grid (what each array task runs)")
    return parser


def check_combination(args: argparse.Namespace) -> None:
    """Options that would be ignored are refused: each names what it needs."""
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    if args.gpus_per_run < 0:
        raise UsageError(f"--gpus-per-run must be at least 0, got {args.gpus_per_run}")
    if args.launcher == "local":
        given = [name for name in SLURM_ONLY if getattr(args, name) not in (None, False, [])]
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} is a Slurm option: add --launcher slurm")
    elif args.shard != "0/1":
        raise UsageError("--shard with --launcher slurm: the job array already gives each run its own task")


def sbatch_values_attached(argv: list[str]) -> list[str]:
    """The word after --sbatch-arg is its value even when it starts with '-' (`--sbatch-arg --qos=high`), which
    argparse would read as an option of ours: attach it (`--sbatch-arg=--qos=high`)."""
    out, words = [], iter(argv)
    for word in words:
        out.append(f"{word}={next(words, '')}" if word == "--sbatch-arg" else word)
    return out


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_strict(sbatch_values_attached(sys.argv[1:] if argv is None else argv))
        check_combination(args)
        if args.status:
            return sweep_slurm.show_status(args.grid, args.output_dir)
        if args.run is not None:
            return sweep_slurm.run_one(args.grid, args.output_dir, args.run, args.timeout, args.gpus_per_run)
        if args.launcher == "slurm" and not args.dry_run:
            options = SlurmOptions(partition=args.partition, time=args.time, gpus_per_run=args.gpus_per_run,
                                   cpus_per_run=args.cpus_per_run, mem_per_run=args.mem_per_run,
                                   array_parallelism=args.array_parallelism, sbatch_args=tuple(args.sbatch_arg))
            return sweep_slurm.launch(args.grid, args.output_dir, options, args.wait, args.retry_failed, args.timeout)
        return sweep.sweep(args.grid, args.output_dir, sweep.parse_shard(args.shard), args.dry_run, args.retry_failed,
                           args.timeout, processes=args.gpus_per_run)
    return report_errors(body, "finished runs are kept; run the same command to resume")


if __name__ == "__main__":
    raise SystemExit(main())
