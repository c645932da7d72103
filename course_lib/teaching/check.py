"""`python -m course_lib check q1a` (or `all`): a question's public checks, on a CPU in seconds.

A check runs the code of one question on small fixed inputs and compares what it returns with the reference
solution's outputs (`assignment_refs/references.safetensors`, inputs included) within a tolerance fixed per
check; on failure it names the largest absolute error and its index. Checks are registered with `@check` in
`public_checks.py`; the staff's hidden checks (tests/hidden/, not in the student copy) use the same helpers,
and the autograder (`python -m course_lib assignment grade`) runs both, one question per process.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic import Field

from course_lib.runtime.settings import Settings

HERE = Path(__file__).resolve().parent
REFERENCES = HERE / "assignment_refs" / "references.safetensors"
HIDDEN = HERE.parents[1] / "tests" / "hidden" / "hidden_checks.py"


@dataclasses.dataclass(frozen=True)
class Check:
    question: str
    name: str
    points: int
    fn: Callable
    atol: float | None  # for reference outputs; None when the check asserts by itself
    inputs: Callable | None  # torch.Generator → dict of input tensors, stored with the reference outputs
    hidden: bool


CHECKS: list[Check] = []


class CheckFailed(AssertionError):
    """A wrong value: the message names the output, the largest error, where it is and the tolerance."""


def check(question: str, points: int, atol: float | None = None, inputs: Callable | None = None,
          hidden: bool = False):
    """Register fn as a check of `question`. With `inputs`, fn(inputs) returns a dict of named outputs that
    are compared with the reference's within atol; without, fn() raises CheckFailed by itself."""
    def register(fn):
        CHECKS.append(Check(question, fn.__name__, points, fn, atol, inputs, hidden))
        return fn
    return register


def compare(what: str, got, want: torch.Tensor, atol: float) -> float:
    """Max |got - want|, raising CheckFailed with the index of the largest error when it exceeds atol."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what}: expected a tensor, got {type(got).__name__}")
    if tuple(got.shape) != tuple(want.shape):
        raise CheckFailed(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    err = torch.where(got == want, 0.0, (got - want).abs()).nan_to_num(nan=float("inf"))  # NaN never passes
    worst = err.max().item() if err.numel() else 0.0
    if worst > atol:
        index = tuple(int(i) for i in torch.unravel_index(err.argmax(), err.shape))
        raise CheckFailed(f"{what}: max abs error {worst:.3g} at index {index} > atol {atol:g} "
                          f"(got {got[index].item():.6g}, expected {want[index].item():.6g})")
    return worst


@functools.cache
def references() -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(REFERENCES))


def stored(c: Check, part: str) -> dict[str, torch.Tensor]:
    """The check's stored inputs (part="in") or reference outputs (part="out")."""
    prefix = f"{c.question}/{c.name}/{part}/"
    return {k[len(prefix):]: v.clone() for k, v in references().items() if k.startswith(prefix)}


def run_check(c: Check) -> float | None:
    """Run one check; return the max abs error against the reference outputs (None for self-asserting)."""
    torch.manual_seed(0)
    if c.inputs is None:
        c.fn()
        return None
    got, want = c.fn(stored(c, "in")), stored(c, "out")
    if not isinstance(got, dict) or sorted(got) != sorted(want):
        raise CheckFailed(f"expected outputs {sorted(want)}, got {got!r:.80}")
    return max(compare(name, got[name], want[name], c.atol) for name in sorted(want))


def run_question(question: str, hidden: bool = False) -> list[dict]:
    """Every check of one question, each caught on its own: name, points, hidden, passed, error line."""
    results = []
    for c in CHECKS:
        if c.question != question or (c.hidden and not hidden):
            continue
        try:
            worst, error = run_check(c), None
        except Exception as err:  # noqa: BLE001 - a student's bug of any kind fails this check only
            worst, error = None, (f"{type(err).__name__}: {err}".strip().splitlines() or [""])[0]
        results.append({"name": c.name, "points": c.points, "hidden": c.hidden, "passed": error is None,
                        "max_abs_error": worst, "error": error})
    return results


def _load(name: str, path: Path):
    """Import a checks file by path (the grader's own copy, whatever is first on sys.path)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def load_checks(hidden: bool = False) -> dict[str, str]:
    """Register the public checks (and the hidden ones when asked); return the question titles by id."""
    public = _load("course_lib.teaching.public_checks", HERE / "public_checks.py")
    if hidden:
        _load("course_lib_hidden_checks", HIDDEN)
    return public.QUESTIONS


class CheckOptions(Settings):
    """`python -m course_lib check`'s options."""

    question: str = Field(description="a question id such as q1a, or all", json_schema_extra={"positional": True})
    hidden: bool = Field(False, description="staff: also run tests/hidden/ (reference only)")


def main(argv: list[str] | None = None) -> int:
    from course_lib.runtime.command_line import add_fields, parsed
    from course_lib.runtime.errors import Parser, report_errors
    from course_lib.runtime.errors import UsageError, choice_error

    parser = Parser(prog="python -m course_lib check", description=__doc__.splitlines()[0])
    add_fields(parser, CheckOptions, words=True)

    def body() -> int:
        args = parsed(parser.parse_strict(argv), CheckOptions)
        if args.hidden and not HIDDEN.is_file():
            raise UsageError(f"--hidden needs the staff checks {HIDDEN}, which this copy does not have")
        titles = load_checks(args.hidden)
        if args.question not in ("all", *titles):
            raise choice_error("question", args.question, ["all", *titles])
        passed = total = 0
        for q in titles if args.question == "all" else [args.question]:
            print(f"{q}  {titles[q]}")
            for r in run_question(q, args.hidden):
                detail = r["error"] if r["error"] else (
                    "" if r["max_abs_error"] is None else f"max abs error {r['max_abs_error']:.2g}")
                print(f"  {'PASS' if r['passed'] else 'FAIL'}  {r['name']} ({r['points']} pt)  {detail}".rstrip())
                passed, total = passed + r["passed"], total + 1
        print(f"{passed}/{total} checks pass")
        return 0 if passed == total else 1

    return report_errors(body, "no check finished")
