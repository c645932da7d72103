"""Every page of `results/` names the command that made it, and that command exists: a `python -m course_lib`
command, a `python -m benchmarks` measurement (with only that measurement's own options), a script under `ci/` or
`benchmarks/`, or a `make` target. A page whose command was renamed or moved fails here, not in a reader's shell."""
import re
from pathlib import Path

import pytest

import benchmarks.__main__ as bench_command
from course_lib import cli
from course_lib.runtime import command_line

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "results").glob("*.md"))
TRAINING = ("finetune", "pretrain", "multitask")
COMMAND = re.compile(r"(?:python3? -m (course_lib|benchmarks(?:\.\w+)?)(?: ([a-z][\w-]*))?"
                     r"|(?:bash|python3?) ((?:ci|benchmarks)/[\w/.-]+)|(?:(?<=`)|^)make ([a-z][\w-]*))([^`\n]*)", re.M)


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))


def problems(text: str) -> list[str]:
    """What is wrong with each command the page names (an unknown command, script, target or bench option)."""
    found = []
    for module, word, script, target, rest in COMMAND.findall(text):
        shown = (f"python -m {module} {word}" if module else script or f"make {target}").strip()
        if module == "course_lib" and word not in (*TRAINING, *cli.COMMANDS):
            found.append(f"{shown}: no such command")
        elif module == "benchmarks":
            if word not in bench_command.BENCHES:
                found.append(f"{shown}: no such measurement (valid: {', '.join(bench_command.BENCHES)})")
                continue
            flags = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest)) - {"--help"}
            unknown = flags - set(command_line.flags(bench_command.BENCHES[word][2]))
            found += [f"{shown}: {flag} is not one of its options" for flag in sorted(unknown)]
        elif module.startswith("benchmarks.") and not (ROOT / f"{module.replace('.', '/')}.py").is_file():
            found.append(f"{shown}: no such module")
        elif script and not (ROOT / script).is_file():
            found.append(f"{script}: no such file")
        elif target and target not in make_targets():
            found.append(f"{shown}: no such target")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_results_page_names_a_command_that_exists(page):
    text = page.read_text(encoding="utf-8")
    assert COMMAND.search(text), f"results/{page.name} names no command that made it"
    assert problems(text) == [], f"results/{page.name}"


def test_the_check_finds_a_moved_command_and_a_foreign_option():
    assert problems("`python -m course_lib bench speed`") == ["python -m course_lib bench: no such command"]
    assert problems("`python -m benchmarks squad --seq-lens 64`") == [
        "python -m benchmarks squad: --seq-lens is not one of its options"]
    assert problems("`python ci/no_such_script.py` and `make nothing`") == [
        "ci/no_such_script.py: no such file", "make nothing: no such target"]
    assert problems("`python -m benchmarks speed --seq-lens 64 128` then `make test`") == []
