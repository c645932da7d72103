"""A command line generated from a settings model: one option per field, its help the field's description.

Every command that takes settings (the training commands, `sweep`, `notebooks run`, each benchmark) builds its
options here from its `Settings` model, then hands the parsed values to the model, which checks them: a field is
declared once, for Python, YAML and the shell alike. Two spellings of a command line:

- a run's (`words=False`): every switch negatable (`--fast-kernels` / `--no-fast-kernels`), a list or a mapping
  given as JSON (`--toy-layers '[1, 2]'`), as a metrics.json holds it;
- a tool's (`words=True`): a switch that is off by default is just `--json`, a list is words (`--seq-lens 64 128`).

A field's `json_schema_extra` may name its `flag` and `metavar`, make it `repeat`able (`--sbatch-arg A --sbatch-arg
B`) or `positional` (`export RUN_DIR`); a field without a default is a required option or argument.
"""
from __future__ import annotations

import argparse
import json
import re
import typing

from course_lib.runtime.errors import UsageError
from course_lib.runtime.settings import kinds, literal_names


class DefaultsWhereUseful(argparse.ArgumentDefaultsHelpFormatter):
    """Adds "(default: X)" to an option's help unless the help already says it or X is None or False."""

    def _get_help_string(self, action):
        if action.default in (None, False) or "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def option_help(doc: str, choices: tuple = ()) -> str:
    """The field's help text, plus its valid names unless the text already lists them all ('%' escaped for
    argparse, which formats help text with %-style)."""
    if choices and not all(re.search(rf"(?<![\w-]){re.escape(str(c))}(?![\w-])", doc) for c in choices):
        doc = f"{doc} (valid: {', '.join(map(str, choices))})"
    return doc.replace("%", "%%")


def _value_type(annotation, words: bool):
    """(type for argparse, nargs): a scalar's own type; a list as words (its items' type) or as JSON."""
    kind = next(k for k in kinds(annotation) if k is not type(None))
    origin = typing.get_origin(kind) or kind
    if origin in (list, tuple, dict):
        item = (typing.get_args(kind) or (str,))[0]
        return (item if item in (int, float) else str, "+") if words and origin is not dict else (json.loads, None)
    return (kind if kind in (bool, int, float) else str), None


def flag(name: str, field) -> str:
    """The field's option: `--batch-size` for batch_size, unless the field names its own."""
    return (field.json_schema_extra or {}).get("flag") or "--" + name.replace("_", "-")


def flags(model) -> list[str]:
    """Every option of the model's command line, in field order."""
    return [flag(name, field) for name, field in model.model_fields.items()
            if not (field.json_schema_extra or {}).get("positional")]


def add_field(parser, name: str, field, choices: tuple = (), given_only: bool = False, words: bool = False) -> None:
    """One option for one field, with its choices and default (a field without a default: a required option, or
    a positional argument where it says so). given_only: absent from the parsed options unless given (a method's
    options: from_dict refuses another method's, so only what the command line names may reach it)."""
    kind, nargs = _value_type(field.annotation, words)
    extra, default = field.json_schema_extra or {}, field.get_default(call_default_factory=True)
    names = literal_names(field.annotation)
    text = option_help(field.description or "", choices or (() if words else names))  # words: {a,b} shows them
    text += f" (default: {default})" if given_only else ""
    keywords = dict(dest=name, default=argparse.SUPPRESS if given_only else default, help=text)
    if field.is_required():
        keywords = dict(dest=name, help=text, required=True)
    if kind is bool:
        switch = "store_true" if words and default is False else argparse.BooleanOptionalAction
        parser.add_argument(flag(name, field), action=switch, **keywords)
        return
    metavar = extra.get("metavar") or ("JSON" if kind is json.loads else f"{{{','.join(names)}}}" if words and names
                                       else None if words else kind.__name__.upper())
    if extra.get("positional"):  # RUN_DIR; a list: any number of them
        positional = {"nargs": "*" if nargs else "?", "default": default} if not field.is_required() else {}
        parser.add_argument(name, type=kind, metavar=metavar, help=text, **positional)
        return
    if extra.get("repeat"):  # each word as typed: the model reads them
        kind = str
        keywords.update(action="append", default=[])
    parser.add_argument(flag(name, field), type=kind, nargs=None if extra.get("repeat") else nargs, metavar=metavar,
                        **keywords)


def add_fields(parser, model, names=None, words: bool = False) -> None:
    """One option per field of `model` (or of `names` only, in that order)."""
    for name in model.model_fields if names is None else names:
        add_field(parser, name, model.model_fields[name], words=words)


def given(namespace: argparse.Namespace, model) -> dict:
    """The parsed values that are `model`'s fields; a repeated option's list as a tuple where the field is one."""
    values = {k: v for k, v in vars(namespace).items() if k in model.model_fields}
    for k, v in values.items():
        if isinstance(v, list) and any(typing.get_origin(t) is tuple for t in kinds(model.model_fields[k].annotation)):
            values[k] = tuple(v)
    return values


def parsed(namespace: argparse.Namespace, model):
    """A tool's options as its model, checked; an error names the option as typed (`--timeout must be > 0`)."""
    try:
        return model(**given(namespace, model))
    except UsageError as err:
        fields = model.model_fields
        raise UsageError(re.sub(rf"\b{model.__name__}\.(\w+)",
                                lambda m: flag(m[1], fields[m[1]]) if m[1] in fields else m[0], str(err))) from None
