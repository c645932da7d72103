"""The config framework every run configuration shares: typed dataclasses validated once on construction.

The same fields serve the CLI, notebook parameters and YAML files: `from_dict` rejects unknown keys and
wrong types with a `UsageError` that names the bad key and the valid ones (papermill checks neither);
`first_difference` tells whether a saved run was made with the same settings.
"""
from __future__ import annotations

import dataclasses
import types
import typing

from course_lib.errors import UsageError


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
    """Mixin: type checks on construction plus `from_dict` that refuses unknown keys."""

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            _check_type(type(self).__name__, f.name, getattr(self, f.name), hints[f.name])
            if hints[f.name] is float and isinstance(getattr(self, f.name), int):
                setattr(self, f.name, float(getattr(self, f.name)))
        self.validate()

    def validate(self) -> None:
        """Range checks beyond types; subclasses override."""

    @classmethod
    def from_dict(cls, values: dict):
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - valid)
        if unknown:
            raise UsageError(f"unknown {cls.__name__} option {unknown[0]!r} (valid: {', '.join(sorted(valid))})")
        return cls(**values)

    @classmethod
    def from_params(cls, params, **overrides):
        """The config of a notebook's run: each parameter named like a field (`params`: what
        `nb.parameters(globals())` returns, or a dict), then `overrides`, checked by `from_dict`.

        Why: the parameters cell, the preset files and these dataclasses share field names, so a config cell
        takes the parameters by name instead of restating them (a restated list drifts when a field is added).
        Parameters that are no field (`preset`, `seeds`) are the notebook's own; `output_dir` is taken, and a
        grid of runs puts its run folders under it. The cells' literal conventions are read here, once: "" is
        None where the field takes None (`model = ""`: the packaged model), and a list is a comma list where
        the field is a string (`tasks = ["sst2", "rte"]`: "sst2,rte").
        """
        values = params if isinstance(params, dict) else vars(params)
        names, hints = {f.name for f in dataclasses.fields(cls)}, typing.get_type_hints(cls)
        chosen = {**{k: v for k, v in values.items() if k in names}, **overrides}  # unknown overrides: from_dict
        return cls.from_dict({k: _notebook_literal(v, hints[k]) if k in names else v for k, v in chosen.items()})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def defaults(self) -> dict:
        """Each field's value when not given, as this config resolves it; what a field missing from a run saved
        before the field existed counts as. Subclasses whose defaults depend on a field override this."""
        return type(self)().to_dict()


def first_difference(saved: dict, config) -> str | None:
    """The first field (by name), output_dir aside, where a saved run's config differs from `config` (a
    Validated config or any with `to_dict` and `defaults`), else None. A field the saved config lacks counts as
    its default, so adding an option never orphans old runs."""
    mine, defaults = config.to_dict(), config.defaults()
    diff = sorted(k for k in mine if k != "output_dir" and saved.get(k, defaults.get(k)) != mine[k])
    return diff[0] if diff else None


def _notebook_literal(value, annotation):
    """A notebook parameter as the field takes it: "" is None for a field that takes None, a list a comma list
    for a str field (`Validated.from_params`)."""
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    allowed = typing.get_args(annotation) if is_union else (annotation,)
    if isinstance(value, str) and value == "" and type(None) in allowed:
        return None
    if isinstance(value, list) and str in allowed:
        return ",".join(str(item) for item in value)
    return value


def positive(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) <= 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be > 0, got {getattr(obj, name)!r}")


def fraction(obj, *names: str) -> None:
    for name in names:
        if not 0.0 <= getattr(obj, name) < 1.0:
            raise UsageError(f"{type(obj).__name__}.{name} must be in [0, 1), got {getattr(obj, name)!r}")


def non_negative(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) < 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be >= 0, got {getattr(obj, name)!r}")


def unit_interval(obj, *names: str) -> None:
    for name in names:
        if not 0.0 <= getattr(obj, name) <= 1.0:
            raise UsageError(f"{type(obj).__name__}.{name} must be in [0, 1], got {getattr(obj, name)!r}")


def optional_positive(obj, *names: str) -> None:
    for name in names:
        if getattr(obj, name) is not None and getattr(obj, name) <= 0:
            raise UsageError(f"{type(obj).__name__}.{name} must be > 0, got {getattr(obj, name)!r}")
