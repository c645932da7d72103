"""The config framework every run configuration shares: typed dataclasses validated once on construction.

The same fields serve the CLI, notebook parameters and YAML files: `from_dict` rejects unknown keys and
wrong types with a `UsageError` that names the bad key and the valid ones (papermill checks neither);
`first_difference` tells whether a saved run was made with the same settings.

A run config may hold another config as one of its fields: a method's options (`ASAOptions`, in the method's
module) or its task family's (`SpanQAOptions`) inside a fine-tuning run's config. Such a field is nested in
Python (`cfg.options.asa_tau`) and flat everywhere else: `from_dict` takes its keys beside the run's own,
`to_dict` writes them there, so the command line, YAML grids, notebook parameters and `metrics.json` name each
option once, as `asa_tau`.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import ClassVar

from course_lib.runtime.errors import UsageError


def _check_type(cls_name: str, name: str, value, annotation) -> None:
    """Raise if `value` does not fit the field's annotation (int is accepted where float is expected)."""
    allowed = typing.get_args(annotation) or (annotation,)
    allowed = tuple(t for t in allowed if isinstance(t, type))
    if float in allowed:
        allowed = allowed + (int,)
    if value is None and type(None) in allowed:
        return
    if isinstance(value, bool) and bool not in allowed:
        ok = False
    else:
        ok = isinstance(value, allowed)
    if not ok:
        names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
        raise UsageError(f"{cls_name}.{name} must be {names}, got {value!r} ({type(value).__name__})")


class Validated:
    """Mixin: type checks on construction plus `from_dict` that refuses unknown keys.

    choices: {field: its valid names}, checked on construction and listed by --help.
    """

    choices: ClassVar[dict[str, tuple]] = {}

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            _check_type(type(self).__name__, f.name, getattr(self, f.name), hints[f.name])
            if hints[f.name] is float and isinstance(getattr(self, f.name), int):
                setattr(self, f.name, float(getattr(self, f.name)))
        for name, valid in self.choices.items():  # None: a field its validate() resolves (pair_encoding)
            if getattr(self, name) is not None and getattr(self, name) not in valid:
                raise UsageError(f"unknown {name} {getattr(self, name)!r} (valid: {', '.join(map(str, valid))})")
        self.validate()

    def __setattr__(self, name: str, value) -> None:
        """Refuse a name that is no field: `cfg.doc_stride = 64` on a run whose strides are `cfg.task_options`'
        would otherwise add an attribute that nothing reads."""
        if name not in self.__dataclass_fields__:
            raise AttributeError(f"{type(self).__name__} has no field {name!r} (its fields: "
                                 f"{', '.join(self.__dataclass_fields__)})")
        object.__setattr__(self, name, value)

    def validate(self) -> None:
        """Range checks beyond types; subclasses override."""

    def fill_nested(self) -> None:
        """For `validate`: each field that holds a nested config (`nested`) gets its class's defaults when None and
        is refused when of another class."""
        for name, klass in self.nested(vars(self)).items():
            value = getattr(self, name)
            if value is None:
                setattr(self, name, klass())
            elif type(value) is not klass:
                raise UsageError(f"{type(self).__name__}.{name} must be {klass.__name__} for this run, got "
                                 f"{type(value).__name__}")

    @classmethod
    def nested(cls, values: dict) -> dict[str, type]:
        """{field: config class} of the fields that hold another config, flat in `values` (a fine-tuning run's
        method options: which class depends on values["method"])."""
        return {}

    @classmethod
    def option_classes(cls) -> list[type]:
        """Every config class `nested` may pick, whatever the values (a fine-tuning run: every method's)."""
        return []

    @classmethod
    def flat_hints(cls, classes: list[type] | None = None) -> dict:
        """The type of every key the flat form may hold: the fields' (not those that hold a nested config) and
        every nested class's fields' (or those of `classes` only)."""
        hints = {}
        for klass in (*(cls.option_classes() if classes is None else classes), cls):
            hints.update(typing.get_type_hints(klass))
        return {k: v for k, v in hints.items() if k not in cls.nested({})}

    @classmethod
    def foreign(cls, values: dict | None) -> dict[str, str]:
        """{key: who reads it} for the keys another choice would read (another method's options): refused by
        from_dict, or dropped when asked (`others`). It may leave out what no key of `values` needs; values None:
        every such key."""
        return {}

    @classmethod
    def from_dict(cls, values: dict, others: str = "refuse"):
        """The config of flat `values`. others: what a key of another choice (`foreign`) does: refuse (one-line
        error) or drop (a saved run's file, a grid's shared base)."""
        nested = cls.nested(values)
        own = [f.name for f in dataclasses.fields(cls) if f.name not in nested]
        inner = {field: [f.name for f in dataclasses.fields(klass)] for field, klass in nested.items()}
        mine = {*own, *(k for names in inner.values() for k in names)}
        foreign = cls.foreign(values) if set(values) - mine else {}  # asked only when needed: it lists every
        unknown = sorted(set(values) - mine - set(foreign))  # method's and family's options, loading them all
        if unknown:
            raise UsageError(f"unknown {cls.__name__} option {unknown[0]!r} (valid: {', '.join(sorted(mine))})")
        stray = sorted(set(values) - mine)
        if stray and others == "refuse":
            inner_names = ", ".join(k for names in inner.values() for k in names) or "none"
            raise UsageError(f"option {stray[0]!r} belongs to {foreign[stray[0]]}, not to this run (its own "
                             f"options: {inner_names})")
        built = {field: klass.from_dict({k: values[k] for k in inner[field] if k in values})
                 for field, klass in nested.items()}
        return cls(**{k: v for k, v in values.items() if k in own}, **built)

    def to_dict(self) -> dict:
        """The flat form: a nested config's fields in place of the field that holds it."""
        values = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            values.update(value.to_dict() if isinstance(value, Validated) else {f.name: value})
        return values


def described(*default_and_help, **field_options) -> dataclasses.Field:
    """A config field with its --help text beside its default: `lr: float = described(2e-5, "peak learning rate")`,
    or `described("help", default_factory=dict)`. The text lives in the field's metadata, where the command line
    reads it (`field_docs`)."""
    *default, help_text = default_and_help
    metadata = {**field_options.pop("metadata", {}), "help": help_text}
    return dataclasses.field(**({"default": default[0]} if default else {}), metadata=metadata, **field_options)


def field_docs(cls) -> dict[str, str]:
    """Each field's help text (`described`), by name; a subclass that declares a field again wins."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


@dataclasses.dataclass
class NoOptions(Validated):
    """The options of a method or a task family that has none (vanilla; multiple choice)."""


def first_difference(saved: dict, config) -> str | None:
    """The first field (by name) where a saved run's config differs from `config` (a Validated config or any
    with `to_dict`), else None; output_dir and fields that do not change what the run computes (their metadata
    says `same_run: False`, as `export`) aside. A field the saved config lacks differs: every run saves its
    whole config (the results archive was migrated to hold whole configs too), so a file without the field was
    saved by an older version, which may have done something else there."""
    mine = config.to_dict()
    fields = getattr(config, "__dataclass_fields__", {})
    aside = {"output_dir", *(name for name, f in fields.items() if not f.metadata.get("same_run", True))}
    diff = sorted(k for k in mine if k not in aside and (k not in saved or saved[k] != mine[k]))
    return diff[0] if diff else None


def _range_check(rule: str, holds):
    """A check of fields against one rule: `positive(cfg, "lr", "epochs")` refuses the first that breaks it, in
    one line naming the field, the rule and the value."""
    def check(obj, *names: str) -> None:
        for name in names:
            if not holds(getattr(obj, name)):
                raise UsageError(f"{type(obj).__name__}.{name} must be {rule}, got {getattr(obj, name)!r}")
    return check


positive = _range_check("> 0", lambda v: v > 0)
non_negative = _range_check(">= 0", lambda v: v >= 0)
optional_positive = _range_check("> 0", lambda v: v is None or v > 0)
fraction = _range_check("in [0, 1)", lambda v: 0.0 <= v < 1.0)
unit_interval = _range_check("in [0, 1]", lambda v: 0.0 <= v <= 1.0)
