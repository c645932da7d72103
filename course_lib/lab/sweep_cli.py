"""`python -m course_lib sweep GRID.yaml`: its options, and where the runs go: here one after another
(`--launcher local`, the default), or to Slurm as one job array (`--launcher slurm`); `--status` says where each
run stands. The grid file and the folders are described in `lab/sweep.py`, Slurm's side in `lab/slurm.py`."""
from __future__ import annotations

import argparse
import sys
from typing import Literal

from pydantic import Field, field_validator, model_validator

from course_lib.lab import sweep, sweep_slurm
from course_lib.lab.slurm import SlurmOptions
from course_lib.runtime.command_line import add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, report_errors

SLURM_ONLY = ("partition", "time", "cpus_per_run", "mem_per_run", "array_parallelism", "sbatch_arg", "wait")


def _meta(metavar: str) -> dict:
    return {"metavar": metavar}


class SweepOptions(SlurmOptions):
    """The sweep's options: where the runs go and how, and, for `--launcher slurm`, what sbatch is asked."""

    output_dir: str | None = Field(None, description="parent folder of the run folders (default: "
                                   "runs/sweep/<grid file name>)", json_schema_extra=_meta("DIR"))
    launcher: Literal["local", "slurm"] = Field("local", description="local: the runs one after another here; "
                                                "slurm: one job array, a task per run")
    status: bool = Field(False, description="each run: done, running, queued, stopped, failed or todo, with its "
                         "job id and a failure's last log line; nothing runs")
    shard: str = Field("0/1", description="0-based: run only the I-th of N parts", json_schema_extra=_meta("I/N"))
    dry_run: bool = Field(False, description="list the runs and their status; run nothing")
    retry_failed: bool = Field(True, description="run failed runs again (default: yes)")
    timeout: float | None = Field(None, gt=0, description="kill a run after this long and record it as failed "
                                  "(it resumes next time)", json_schema_extra=_meta("SECONDS"))
    wait: bool = Field(False, description="block until the array ends, then print the table")
    run: str | None = Field(None, description="only this run of the grid (what each array task runs)",
                            json_schema_extra=_meta("NAME"))

    @field_validator("shard")
    @classmethod
    def _shard_parses(cls, text: str) -> str:
        sweep.parse_shard(text)
        return text

    @model_validator(mode="after")
    def _no_ignored_options(self):
        """Options that would be ignored are refused: each names what it needs."""
        if self.launcher == "local":
            given_here = [name for name in SLURM_ONLY if getattr(self, name) not in (None, False, ())]
            if given_here:
                raise UsageError(f"--{given_here[0].replace('_', '-')} is a Slurm option: add --launcher slurm")
        elif self.shard != "0/1":
            raise UsageError("--shard with --launcher slurm: the job array already gives each run its own task")
        return self


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m course_lib sweep", description=sweep.__doc__.splitlines()[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="\n".join(sweep.__doc__.splitlines()[2:]))
    parser.add_argument("grid", metavar="GRID.yaml", help="the grid file: command, base, grid")
    own = [k for k in SweepOptions.model_fields if k not in (*SLURM_ONLY, "gpus_per_run", "run")]
    add_fields(parser, SweepOptions, [*own, "gpus_per_run", "run"], words=True)
    add_fields(parser.add_argument_group("--launcher slurm"), SweepOptions, SLURM_ONLY, words=True)
    return parser


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
        options = parsed(args, SweepOptions)
        if options.status:
            return sweep_slurm.show_status(args.grid, options.output_dir)
        if options.run is not None:
            return sweep_slurm.run_one(args.grid, options.output_dir, options.run, options.timeout,
                                       options.gpus_per_run)
        if options.launcher == "slurm" and not options.dry_run:
            return sweep_slurm.launch(args.grid, options.output_dir, options, options.wait, options.retry_failed,
                                      options.timeout)
        return sweep.sweep(args.grid, options.output_dir, sweep.parse_shard(options.shard), options.dry_run,
                           options.retry_failed, options.timeout, processes=options.gpus_per_run)
    return report_errors(body, "finished runs are kept; run the same command to resume")


if __name__ == "__main__":
    raise SystemExit(main())
