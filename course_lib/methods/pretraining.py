"""The pre-training methods by name: the registry `pretrain` asks, as `methods.registry` holds the fine-tuning ones.

A pre-training method is its options (a Validated dataclass, flat on the command line and in metrics.json) and
the term it adds to BERT's MLM loss, if any. Every method's options are `ag.GuidanceOptions` or extend them: the
held-out blocks are scored for L_AG whatever the method, so an MLM run says how far its unguided heads are from
the patterns an AG run is pulled towards.

    mlm   masked language modelling (Devlin et al. 2019)
    ag    MLM + attention guidance (Deshpande & Narasimhan 2020)     course_lib/methods/ag.py
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from course_lib.config import Validated, option_readers
from course_lib.errors import choice_error
from course_lib.methods import ag


@dataclass(frozen=True)
class PretrainMethod:
    """options: the method's options class (ag.GuidanceOptions or a subclass).
    objective(options, guidance, max_steps): the term added to L_MLM (`loss`, `add_to_window`, `summary`, as
    `ag.GuidedObjective`), or None for MLM alone."""

    name: str
    summary: str
    options: type[Validated] = ag.GuidanceOptions
    objective: Callable | None = None


PRETRAIN_METHODS: dict[str, PretrainMethod] = {}


def register_pretrain(method: PretrainMethod) -> PretrainMethod:
    if PRETRAIN_METHODS.get(method.name, method) is not method:
        raise ValueError(f"a pre-training method named {method.name!r} is registered already")
    if not issubclass(method.options, ag.GuidanceOptions):
        raise TypeError(f"{method.name}: a pre-training method's options extend ag.GuidanceOptions")
    PRETRAIN_METHODS[method.name] = method
    return method


def get_pretrain_method(name: str) -> PretrainMethod:
    if name not in PRETRAIN_METHODS:
        raise choice_error("pretraining method", name, PRETRAIN_METHODS)
    return PRETRAIN_METHODS[name]


def pretrain_option_owners() -> dict[str, str]:
    """{option: the pre-training methods that read it}: what another method's option is to a run."""
    return option_readers("method", ((m.name, m.options) for m in PRETRAIN_METHODS.values()))


register_pretrain(PretrainMethod("mlm", "masked language modelling (Devlin et al. 2019)"))
register_pretrain(PretrainMethod("ag", "MLM + attention guidance (Deshpande & Narasimhan 2020)", ag.AGOptions,
                                 objective=ag.GuidedObjective))
