"""The pre-training methods by name: the registry `pretrain` asks, as `methods.registry` holds the fine-tuning ones.

A pre-training method is its options (a Settings model, flat on the command line and in metrics.json) and
the term it adds to BERT's MLM loss, if any. Every method's options are `ag.GuidanceOptions` or extend them: the
held-out blocks are scored for L_AG whatever the method, so an MLM run says how far its unguided heads are from
the patterns an AG run is pulled towards.

    mlm   masked language modelling (Devlin et al. 2019)
    ag    MLM + attention guidance (Deshpande & Narasimhan 2020)     course_lib/methods/ag.py

As in `methods.registry`, the built-in entries are built on first use, so `ag` is imported by a pre-training run
(or a listing of them all), never by a fine-tuning run, whose configuration imports this module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from course_lib.runtime.registry import Registry
from course_lib.runtime.settings import Settings


@dataclass(frozen=True)
class PretrainMethod:
    """options: the method's options class (ag.GuidanceOptions or a subclass).
    objective(options, guidance, max_steps): the term added to L_MLM (`loss`, `add_to_window`, `summary`, as
    `ag.GuidedObjective`), or None for MLM alone."""

    name: str
    summary: str
    options: type[Settings]
    objective: Callable | None = None


# The built-in methods: each builder imports ag the first time its method is asked for.

def _mlm() -> PretrainMethod:
    from course_lib.methods import ag
    return PretrainMethod("mlm", "masked language modelling (Devlin et al. 2019)", ag.GuidanceOptions)


def _ag() -> PretrainMethod:
    from course_lib.methods import ag
    return PretrainMethod("ag", "MLM + attention guidance (Deshpande & Narasimhan 2020)", ag.AGOptions,
                          objective=ag.GuidedObjective)


PRETRAIN_METHODS: Registry[PretrainMethod] = Registry("pretraining method", {
    "mlm": _mlm, "ag": _ag})
get_pretrain_method = PRETRAIN_METHODS.get
pretrain_option_owners = PRETRAIN_METHODS.option_readers  # {option: the pre-training methods that read it}


def register_pretrain(method: PretrainMethod) -> PretrainMethod:
    from course_lib.methods import ag
    if not issubclass(method.options, ag.GuidanceOptions):
        raise TypeError(f"{method.name}: a pre-training method's options extend ag.GuidanceOptions")
    return PRETRAIN_METHODS.register(method)
