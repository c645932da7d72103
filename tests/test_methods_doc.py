"""docs/methods.md's defaults tables against the classes that declare the defaults, so that the page cannot drift.

Every table of the page whose header is `| field (flag) | default | meaning |` is read. A method's section (SSA,
SSAF, AG, ASA) lists every field of the options classes of its methods, each with its flag and the default its
class declares, and nothing else; a new method with options, or a new option, fails here until the page has it.
The multitask section lists `MultitaskConfig`'s own fields with the defaults a run gets. The cell says a default as
a reader types it: `true`/`false`, `none`, a number or a name, with or without backticks.

docs/tasks.md's table of the task families' options is held the same way against each family's options model.

Also here, one promise of `methods/registry.py`'s docstring: the built-in methods load on first use, so a
fine-tuning run imports neither another fine-tuning method's module nor a pre-training method's (`methods.ag`).
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.methods.pretraining import PRETRAIN_METHODS
from course_lib.methods.registry import every_method, get_method
from course_lib.tasks.registry import every_family, get_family
from course_lib.training.config import MultitaskConfig

ROOT = Path(__file__).resolve().parents[1]
HEADER = ["field (flag)", "default", "meaning"]

# docs/methods.md's method sections (the heading up to its colon) -> the registry names whose options they list
# (AG's are pre-training methods: `methods.pretraining`)
METHOD_SECTIONS = {
    "1. SSA": ("ssa-co", "ssa-hybrid", "bert-mask"),
    "3. SSAF": ("ssaf",),
    "4. AG": ("mlm", "ag"),
    "5. ASA": ("asa", "bernoulli-mask"),
}
MULTITASK_SECTION = "2. Multitask BERT with SSA (CS224N-style)"
# MultitaskConfig's own fields that its table does not list, and why
MULTITASK_NOT_LISTED = {
    "output_dir": "where the run writes, as for every command (README), only its default differs",
    "options": "the chosen method's options: the table's row 'as in section 1'",
    "span_qa_options": "the span-QA family's options, a task family's and not a method's (`multitask --help`)",
}


@dataclasses.dataclass(frozen=True)
class Row:
    families: tuple[str, ...]  # docs/tasks.md: the task families named before a colon in the first cell
    fields: tuple[str, ...]  # the field names of the first cell
    flags: str  # the first cell's text in parentheses, e.g. "`--[no-]ssa-share-weight`"
    default: str  # the default cell, backticks removed


def defaults_tables(text: str) -> dict[str, list[Row]]:
    """{section heading up to its colon: the rows of its defaults table(s)}, for every `## ` section that has one."""
    tables: dict[str, list[Row]] = {}
    section, in_table = None, False
    for line in text.splitlines():
        if line.startswith("## "):
            section, in_table = line[3:].split(":")[0].strip(), False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if cells is None:
            in_table = False
        elif not in_table:
            in_table = cells == HEADER
            if in_table:
                tables.setdefault(section, [])
        elif not set(cells[0]) <= set("-: "):  # skip the |---| line
            names, _, flags = cells[0].partition("(")
            families = tuple(names.split(":")[0].split(",")) if ":" in names else ()
            tables[section].append(Row(families, tuple(re.findall(r"`([a-z_0-9]+)`", names)), flags,
                                       cells[1].replace("`", "").strip()))
    return tables


def shown(value) -> str:
    """A default as the page writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def flag_problems(row: Row, hints: dict[str, type]) -> list[str]:
    """The fields of a row whose command-line flag the row does not give (`--x-y`; a boolean's may be `--[no-]x-y`)."""
    wrong = []
    for name in row.fields:
        dashed = name.replace("_", "-")
        spellings = [f"`--{dashed}`"] + ([f"`--[no-]{dashed}`"] if hints.get(name) is bool else [])
        if not any(s in row.flags for s in spellings):
            wrong.append(f"{name}: flag {spellings[-1]} not in ({row.flags}")
    return wrong


@pytest.fixture(scope="module")
def tables() -> dict[str, list[Row]]:
    return defaults_tables((ROOT / "docs" / "methods.md").read_text(encoding="utf-8"))


def options_class(name: str):
    return PRETRAIN_METHODS.get(name).options if name in PRETRAIN_METHODS.builtin_names else get_method(name).options


def test_the_page_has_exactly_the_defaults_tables_this_test_knows(tables):
    assert set(tables) == {*METHOD_SECTIONS, MULTITASK_SECTION}


def test_every_method_with_options_has_a_section():
    """vanilla and mean-pool take no options, so no table lists them; every other method is some section's."""
    methods = {**every_method(), **PRETRAIN_METHODS.every()}
    with_options = {name for name, m in methods.items() if m.options.model_fields}
    covered = {name for names in METHOD_SECTIONS.values() for name in names}
    assert with_options == covered
    assert set(methods) - with_options == {"vanilla", "mean-pool"}


def method_section_problems(section: str, rows: list[Row]) -> list[str]:
    """What a method section's table gets wrong against its methods' options classes: an option missing or not
    one of theirs, a default or a flag that is not the code's (empty: none)."""
    declared: dict[str, object] = {}
    problems = []
    for method in METHOD_SECTIONS[section]:
        for name, f in options_class(method).model_fields.items():
            if name in declared and declared[name] != f.default:  # one option of several methods: one default
                problems.append(f"{name}: {method}'s default {f.default!r} differs from {declared[name]!r}")
            declared[name] = f.default
    listed = [name for row in rows for name in row.fields]
    problems += [f"{name}: not listed" for name in declared if name not in listed]
    problems += [f"{name}: listed, not an option of {', '.join(METHOD_SECTIONS[section])}"
                 for name in listed if name not in declared]
    problems += [f"{name}: the page says {row.default!r}, the code {shown(declared[name])!r}"
                 for row in rows for name in row.fields if name in declared and row.default != shown(declared[name])]
    hints = {name: type(default) for name, default in declared.items()}
    return problems + [p for row in rows for p in flag_problems(row, hints)]


@pytest.mark.parametrize("section", sorted(METHOD_SECTIONS))
def test_a_method_sections_table_lists_every_option_with_its_default_and_flag(section, tables):
    assert method_section_problems(section, tables[section]) == []


def test_a_default_changed_on_the_page_is_found():
    """The check can fail: SSA's alpha written as 0.8 (the code's is 0.7) is one problem, named."""
    text = (ROOT / "docs" / "methods.md").read_text(encoding="utf-8")
    old = "| `ssa_target_weight` (`--ssa-target-weight`) | 0.7 |"
    assert old in text
    changed = defaults_tables(text.replace(old, old.replace("0.7", "0.8")))
    assert method_section_problems("1. SSA", changed["1. SSA"]) == [
        "ssa_target_weight: the page says '0.8', the code '0.7'"]


def test_the_multitask_table_lists_the_configs_own_fields_with_the_defaults_a_run_gets(tables):
    own = set(inspect.get_annotations(MultitaskConfig))  # its own fields, not those it shares with finetune
    plain, course = MultitaskConfig(), MultitaskConfig(cs224n=True)  # None defaults are resolved by validation
    method_row, *rows = sorted(tables[MULTITASK_SECTION], key=lambda row: row.default != "as in section 1")
    assert method_row.default == "as in section 1"
    assert set(method_row.fields) == set(get_method(MultitaskConfig.default("ssa_method")).options.model_fields)
    listed = {name for row in rows for name in row.fields}
    assert listed == own - set(MULTITASK_NOT_LISTED)
    wrong = []
    for row in rows:
        (name,) = row.fields
        with_course, _, otherwise = row.default.rpartition(" with --cs224n, else ")
        if with_course and with_course != shown(getattr(course, name)):
            wrong.append(f"{name} with --cs224n: the page says {with_course!r}, a run gets {getattr(course, name)!r}")
        if otherwise != shown(getattr(plain, name)):
            wrong.append(f"{name}: the page says {otherwise!r}, a run gets {getattr(plain, name)!r}")
    assert not wrong, "; ".join(wrong)
    hints = {name: type(getattr(plain, name)) for name in own}
    assert not [w for row in rows for w in flag_problems(row, hints)]


def test_a_fine_tuning_run_imports_only_its_own_methods_module():
    """`finetune --method ssa-co` as the command line resolves it: SSA's module, no other method's, and not AG's,
    which the pre-training registry (imported by every run's configuration) builds only when asked."""
    watched = ["course_lib.methods.ssa", "course_lib.methods.asa", "course_lib.methods.ssaf", "course_lib.methods.ag"]
    code = ("import json, sys\nfrom course_lib import cli\n"
            "cli._train = lambda command, cfg: {}\ncli.keep_freed_memory = lambda *args: None\n"
            "cli.run(sys.argv[1:])\n"
            f"print(json.dumps([m for m in {watched!r} if m in sys.modules]))\n")
    run = subprocess.run([sys.executable, "-c", code, "finetune", "--task", "sst2", "--method", "ssa-co"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1]) == ["course_lib.methods.ssa"]


FAMILY_SECTION = "A family's options"


def test_the_task_families_options_table_lists_every_option_with_its_default_and_flag():
    rows = defaults_tables((ROOT / "docs" / "tasks.md").read_text(encoding="utf-8"))[FAMILY_SECTION]
    declared = {(family, name): f.default for family in every_family()
                for name, f in get_family(family).options.model_fields.items()}
    listed = {(family.strip(), name) for row in rows for family in row.families for name in row.fields}
    assert listed == set(declared)
    for row in rows:
        for family in row.families:
            for name in row.fields:
                assert row.default == shown(declared[family.strip(), name]), (family, name)
        assert flag_problems(row, {}) == []
