"""The one way a setting is declared and checked: pydantic models on `Settings`, every mistake one line.

A field is declared once, `lr: float = Field(2e-5, gt=0, description="peak learning rate")`: type, default, range
and --help text; fixed names are `Literal[...]`, a registry's names are checked by the config's validator. pydantic
checks (strict types, an int taken for a float, unknown keys, every assignment); `folded` turns its multi-line
report into one `UsageError` naming the field, the bad value and the valid ones. A float written `5e-5` in YAML
(text to PyYAML, whose floats need a '.') is read as the number.

A run config may hold another config: a method's options (`ASAOptions`) or its task family's (`SpanQAOptions`),
nested in Python (`cfg.options.asa_tau`) and flat everywhere else (`from_dict`, `to_dict`: the command line, YAML
grids, notebook parameters and `metrics.json` name each option once, as `asa_tau`).
"""
from __future__ import annotations

import math
import typing
from typing import Literal

import annotated_types as bounds
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from course_lib.runtime.errors import UsageError


def kinds(annotation) -> tuple:
    """The alternatives of a field's type: (str, NoneType) for `str | None`."""
    union = typing.get_origin(annotation) in (typing.Union, type(int | None))
    return typing.get_args(annotation) if union else (annotation,)


def literal_names(annotation) -> tuple:
    """The valid names of a `Literal[...]` field (also `Literal[...] | None`), else ()."""
    return next((typing.get_args(k) for k in kinds(annotation) if typing.get_origin(k) is Literal), ())


def _type_names(annotation) -> str:
    allowed = [k for kind in kinds(annotation) for k in ((float, int) if kind is float else (kind,))]
    return " or ".join("None" if k is type(None) else k.__name__ if isinstance(k, type) else str(k) for k in allowed)


def _rule(field) -> str:
    """A field's range as the messages word it: '> 0', '>= 0', 'in [0, 1)'."""
    b = {type(m).__name__.lower(): getattr(m, type(m).__name__.lower()) for m in field.metadata
         if isinstance(m, (bounds.Gt, bounds.Ge, bounds.Lt, bounds.Le))}
    low = ("[", ">=", b["ge"]) if "ge" in b else ("(", ">", b["gt"]) if "gt" in b else None
    high = (")", "<", b["lt"]) if "lt" in b else ("]", "<=", b["le"]) if "le" in b else None
    if low and high:
        return f"in {low[0]}{low[2]}, {high[2]}{high[0]}"
    return " ".join(map(str, (low or high)[1:]))


def folded(cls, err: ValidationError) -> UsageError:
    """pydantic's report as one line, of its first error (an unknown key first: a misspelt key is also a missing
    one); a UsageError a validator raised, as it was."""
    first = min(err.errors(), key=lambda e: e["type"] != "extra_forbidden")
    if isinstance((first.get("ctx") or {}).get("error"), UsageError):
        return first["ctx"]["error"]
    loc, value, kind = first["loc"], first["input"], first["type"]
    name, field = (str(loc[0]) if loc else ""), cls.model_fields.get(str(loc[0]) if loc else "")
    inner = list(loc[1:])
    if field is not None and inner and len([k for k in kinds(field.annotation) if k is not type(None)]) > 1:
        inner = inner[1:]  # a union's member names its try: `gpu_hours['float']`
    where, top = f"{cls.__name__}.{name}" + "".join(f"[{part!r}]" for part in inner), not inner
    if kind == "extra_forbidden":
        return UsageError(f"unknown {cls.__name__} option {name!r} (valid: {', '.join(sorted(cls.model_fields))})")
    if kind == "missing" and top:
        valid = literal_names(field.annotation)
        return UsageError(f"{cls.__name__} needs {name}" + (f" (valid: {', '.join(map(str, valid))})" if valid else ""))
    if kind == "literal_error" and top:
        return UsageError(f"unknown {name} {value!r} (valid: {', '.join(map(str, literal_names(field.annotation)))})")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") and top:
        return UsageError(f"{where} must be {_rule(field)}, got {value!r}")
    if kind == "too_short":
        return UsageError(f"{where} must hold at least {first['ctx']['min_length']}, got {value!r}")
    if kind.endswith("_type"):
        expected = _type_names(field.annotation) if top else kind[:-5].replace("string", "str")
        return UsageError(f"{where} must be {expected}, got {value!r} ({type(value).__name__})")
    return UsageError(f"{where}: {first['msg']}, got {value!r}")


class Settings(BaseModel):
    """The base of every settings model: unknown keys refused, every assignment checked, errors in one line."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)

    def __init__(self, **values):
        try:
            super().__init__(**values)
        except ValidationError as err:
            raise folded(type(self), err) from None

    def __setattr__(self, name: str, value) -> None:
        """Check the value; refuse a name that is no field (`cfg.doc_stride = 64` on a run whose strides are
        `cfg.task_options`' would otherwise go unread); None for a nested config: its defaults."""
        if name not in type(self).model_fields:
            raise AttributeError(f"{type(self).__name__} has no field {name!r} (its fields: "
                                 f"{', '.join(type(self).model_fields)})")
        if value is None and name in (nested := type(self).nested(dict(self))):
            value = nested[name]()
        try:
            super().__setattr__(name, value)
        except ValidationError as err:
            raise folded(type(self), err) from None

    @field_validator("*", mode="before")
    @classmethod
    def _yaml_numbers(cls, value, info):
        """`5e-5` from YAML is text: a float field reads the number."""
        if isinstance(value, str) and float in kinds(cls.model_fields[info.field_name].annotation):
            try:
                number = float(value)
            except ValueError:
                return value
            return number if math.isfinite(number) else value  # "inf" or "nan" as text stays text: refused
        return value

    @model_validator(mode="before")
    @classmethod
    def _fill_nested(cls, values):
        """A field that holds a nested config (`nested`): None is its class's defaults; another class is refused."""
        if not isinstance(values, dict):
            return values
        values = dict(values)
        for name, klass in cls.nested(values).items():
            if values.get(name) is None:
                values[name] = klass()
            elif type(values[name]) is not klass:
                raise UsageError(f"{cls.__name__}.{name} must be {klass.__name__} for this run, got "
                                 f"{type(values[name]).__name__}")
        return values

    @classmethod
    def default(cls, name: str):
        return cls.model_fields[name].get_default(call_default_factory=True)

    @classmethod
    def nested(cls, values: dict) -> dict[str, type]:
        """{field: config class} of the fields that hold another config, for flat `values` (a fine-tuning run's
        method options: which class depends on values["method"])."""
        return {}

    @classmethod
    def option_classes(cls) -> list[type]:
        """Every config class `nested` may pick, whatever the values (a fine-tuning run: every method's)."""
        return []

    @classmethod
    def foreign(cls, values: dict | None) -> dict[str, str]:
        """{key: who reads it} for the keys another choice would read (another method's options); it may leave out
        what no key of `values` needs; values None: every such key."""
        return {}

    @classmethod
    def flat_hints(cls, classes: list[type] | None = None) -> dict:
        """The type of each key of the flat form: the fields' (but those holding a nested config) and every nested
        class's fields' (or those of `classes` only)."""
        hints = {name: f.annotation for klass in (*(cls.option_classes() if classes is None else classes), cls)
                 for name, f in klass.model_fields.items()}
        return {k: v for k, v in hints.items() if k not in cls.nested({})}

    @classmethod
    def from_dict(cls, values: dict, others: str = "refuse"):
        """The config of flat `values`. others: what a key of another choice (`foreign`) does: refuse (one-line
        error) or drop (a saved run's file, a grid's shared base)."""
        nested = cls.nested(values)
        own = [name for name in cls.model_fields if name not in nested]
        inner = {field: list(klass.model_fields) for field, klass in nested.items()}
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
        for name, value in self:
            values.update(value.to_dict() if isinstance(value, Settings) else {name: value})
        return values

    def replace(self, **changes):
        """A copy with `changes`, checked as a new config is (pydantic's model_copy checks nothing)."""
        return type(self)(**{**dict(self), **changes})


class NoOptions(Settings):
    """The options of a method or a task family that has none (vanilla; multiple choice)."""


def first_difference(saved: dict, config) -> str | None:
    """The first field (by name) where a saved run's config differs from `config` (anything with `to_dict`), else
    None; output_dir and fields that do not change what the run computes (`json_schema_extra={"same_run": False}`,
    as `export`) aside. A field the saved config lacks differs: every run saves its whole config (the archive was
    migrated to hold whole configs), so a file without it was saved by an older version, which may have done
    something else there."""
    mine, fields = config.to_dict(), getattr(type(config), "model_fields", {})
    aside = {"output_dir", *(k for k, f in fields.items() if (f.json_schema_extra or {}).get("same_run") is False)}
    diff = sorted(k for k in mine if k not in aside and (k not in saved or saved[k] != mine[k]))
    return diff[0] if diff else None
