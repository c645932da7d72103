"""Reading runs that an older version of this project saved: what a setting missing from their config meant.

Every run's metrics.json holds its config as it was when the run was made. An option added later is missing
from it. For most options the old runs did what today's default does; for the ones below they did something
else, and reading them as today's default would put an old run in a new run's place. The lesson compares saved
configs strictly (`config.first_difference`: a missing field differs); the lab, whose archive in `results/runs`
holds runs from every version, reads them here first.
"""
from __future__ import annotations

import dataclasses

from course_lib.runtime.validated import Validated, first_difference

SAVED_BEFORE = {  # option: what runs saved before it existed did (docs/departures.md tells each one's story)
    "asa_regression_divergence": "squared",  # ASA on STS-B: the squared difference of the two passes' scores
    "asa_cut_row": "clean",  # a row whose keys were all cut kept its clean attention
    "asa_clip_scope": "all",  # the gradient clip covered the adversaries too
    "ssa_sampler": "rounded",  # our rounded sampler, before the authors' float quartiles
    "ssa_head_init": "torch",  # PyTorch's default init for SSA's token head
    "ssa_method": "ssa-co",  # a multitask run's --ssa tasks trained with SSA-Co, the only choice then
}


def keys_of_run(config_cls: type, saved: dict) -> set[str]:
    """The flat keys a run of `config_cls` with these values has: its own fields and its chosen method's (and
    family's) options."""
    nested = config_cls.nested(saved)
    return {f.name for klass in (config_cls, *nested.values()) for f in dataclasses.fields(klass)} - set(nested)


def old_defaults(config_cls: type, saved: dict) -> dict:
    """What the run did for each option of `SAVED_BEFORE` that it has but its file lacks."""
    has = keys_of_run(config_cls, saved)
    return {k: v for k, v in SAVED_BEFORE.items() if k in has and k not in saved}


def with_old_defaults(config_cls: type, saved: dict) -> dict:
    return {**saved, **old_defaults(config_cls, saved)}


def read_config(config_cls: type, saved: dict) -> Validated:
    """The config of an archived run, as today's code builds it: a key it lacks is what the run did then (else
    today's default); a key of another choice (an option of a method the run did not use, as runs saved when
    every config held every method's options) is dropped."""
    return config_cls.from_dict(with_old_defaults(config_cls, saved), others="drop")


def archived_difference(saved: dict, config) -> str | None:
    """`first_difference` for a run this or an older version saved: a field the saved config lacks is what the
    run did then (`SAVED_BEFORE`), else today's default for that run (a SQuAD run's max_len: 384)."""
    if isinstance(config, Validated):
        saved = with_old_defaults(type(config), saved)
    return first_difference({**defaults_of(config), **saved}, config)


CHOOSING = ("task", "task_type", "method")  # the fields that decide what others default to (SQuAD's max_len)


def defaults_of(config) -> dict:
    """Each field's value when not given, as a run of this config's task and method resolves it (a SQuAD run's
    max_len is 384); a notebook run's, its notebook's."""
    if not isinstance(config, Validated):
        return config.defaults()
    fields = type(config).__dataclass_fields__
    return type(config)(**{k: getattr(config, k) for k in CHOOSING if k in fields}).to_dict()
