"""The fine-tuning methods by name: one registry, the way Hugging Face maps names to classes.

A method is what it changes, declared once: the config fields it reads, how it changes the pretrained
encoder's config, which task model it trains (the plain head, or one whose objective it changes), what it does
to the training set at the start of each epoch, and the task families it applies to. The training code asks
the registry and has no `if method == ...` of its own, so a new method is its own module plus one `register`
line here (or in a user's file: `register(Method(...))` before `finetune`).

    vanilla          plain fine-tuning (Devlin et al. 2019)
    ssaf             sparsegen-lin attention (Cui et al. 2019)             course_lib/methods/ssaf.py
    asa              adversarial self-attention (Wu et al. 2023)           course_lib/methods/asa.py
    bernoulli-mask   ASA's random-mask baseline (Wu et al. 2023)           course_lib/methods/asa.py
    ssa-co           self-supervised attention, co-training (Kou et al.)   course_lib/methods/ssa.py
    ssa-hybrid       SSA with the importance-pooling layer (Kou et al.)    course_lib/methods/ssa.py
    bert-mask        SSA's masked-copy augmentation baseline (Kou et al.)  course_lib/methods/ssa.py
    mean-pool        vanilla with a mean-pooling head: a control, not a paper  course_lib/model/heads.py
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from course_lib.methods import asa
from course_lib.methods import ssa
from course_lib.methods import ssaf
from course_lib.errors import UsageError, choice_error
from course_lib.model.heads import MeanPoolClassifier
from course_lib.tasks.glue import SENTENCE


@dataclass(frozen=True)
class EpochContext:
    """What a method's per-epoch hook may use: the epoch (0-based), the task's kind, the tokens it must leave
    alone, the [MASK] id, and `probe(features)`, the current model's predictions (class ids or scores)."""

    epoch: int
    is_regression: bool
    special_ids: set[int]
    mask_id: int
    probe: Callable[[list[dict]], list]


@dataclass(frozen=True)
class Method:
    """One fine-tuning method. Every callable receives the run's FinetuneConfig as `cfg`.

    build_model(cfg, encoder, num_labels, tokenizer): the task model, whose forward returns the method's loss;
    None: the task family's plain head (`TaskFamily.build_head`).
    encoder_overrides(cfg): BertConfig fields to change before the pretrained weights load (SSAF's normaliser).
    epoch_data(cfg, features, context): the epoch's training set and its statistics, or None to train on the
    encoded set as it is; its result is cached in the run folder, so a resumed epoch trains on the same set.
    token_labels: the task model reads per-token labels (SSA), which epoch_data writes into the features.
    clip_scope(cfg, model): the parameters the gradient clip covers, or None for all of them (ASA leaves its
    adversaries out, `asa.clipped_parameters`).
    saved_before: for an option added after the method's runs were archived, the value those runs had (what a
    metrics.json without the field reads as; ASA's runs before `asa_clip_scope` clipped everything).
    """

    name: str
    summary: str
    fields: tuple[str, ...] = ()  # the FinetuneConfig fields it reads beyond the shared recipe
    build_model: Callable | None = None
    encoder_overrides: Callable[..., dict] = lambda cfg: {}
    epoch_data: Callable | None = None
    token_labels: bool = False
    clip_scope: Callable[..., list | None] = lambda cfg, model: None
    saved_before: dict = dataclasses.field(default_factory=dict)
    families: tuple[str, ...] | None = None  # the task families it applies to; None: every one (it only
    #   changes the encoder, whose output every family's head reads)

    def check_family(self, family: str) -> None:
        """Refuse a task family the method is not defined for, in one line naming the ones it is."""
        if self.families is not None and family not in self.families:
            raise UsageError(f"method {self.name!r} does not apply to {family} tasks "
                             f"(it applies to: {', '.join(self.families)})")


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add a method under its name; a second, different method of the same name is refused."""
    if METHODS.get(method.name, method) is not method:
        raise ValueError(f"a method named {method.name!r} is registered already")
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise choice_error("method", name, METHODS)
    return METHODS[name]


def own_options_only(values: dict, defaults: dict) -> dict:
    """A fine-tuning run's fields with the options only other methods read set back to their defaults, so a
    vanilla run is the same run (and the same folder's config) whatever ASA's tau or SSAF's lambda a grid sets."""
    own = set(get_method(values["method"]).fields)
    others = {name for method in METHODS.values() for name in method.fields} - own
    return {k: defaults[k] if k in others else v for k, v in values.items()}


register(Method("vanilla", "plain fine-tuning (Devlin et al. 2019)"))
register(Method("ssaf", "sparsegen-lin attention in every head (Cui et al. 2019)", ("sparsegen_lambda",),
                encoder_overrides=ssaf.encoder_config))
register(Method("asa", "adversarial self-attention (Wu et al. 2023)",
                ("asa_tau", "asa_noise", "asa_tagging_divergence", "asa_regression_divergence", "asa_clip_scope",
                 "asa_cut_row"),
                build_model=asa.build_asa, clip_scope=asa.clipped_parameters,
                saved_before={"asa_clip_scope": "all", "asa_regression_divergence": "squared", "asa_cut_row": "clean"},
                families=tuple(asa.ASA_MODELS)))
register(Method("bernoulli-mask", "random attention masks, ASA's baseline (Wu et al. 2023)",
                ("bernoulli_p", "asa_tagging_divergence", "asa_regression_divergence", "asa_cut_row"),
                build_model=asa.build_bernoulli_mask,
                saved_before={"asa_regression_divergence": "squared", "asa_cut_row": "clean"},
                families=tuple(asa.ASA_MODELS)))
register(Method("ssa-co", "self-supervised attention, co-training (Kou et al. 2020)", ssa.SSA_FIELDS,
                build_model=ssa.build_ssa_co, epoch_data=ssa.ssa_epoch_data, token_labels=True,
                saved_before=ssa.SAVED_BEFORE, families=(SENTENCE,)))
register(Method("ssa-hybrid", "self-supervised attention with importance pooling (Kou et al. 2020)",
                ssa.SSA_FIELDS + ("ssa_cls_weight", "ssa_threshold"), build_model=ssa.build_ssa_hybrid,
                epoch_data=ssa.ssa_epoch_data, token_labels=True, saved_before=ssa.SAVED_BEFORE,
                families=(SENTENCE,)))
register(Method("bert-mask", "masked copies with their gold labels, SSA's baseline (Kou et al. 2020)",
                ("ssa_sampler",), epoch_data=ssa.bert_mask_epoch_data, saved_before={"ssa_sampler": "rounded"},
                families=(SENTENCE,)))
register(Method("mean-pool", "vanilla with the head on the mean token vector, not [CLS] (a control)",
                build_model=lambda cfg, encoder, num_labels, tokenizer: MeanPoolClassifier(
                    encoder, num_labels, cfg.classifier_dropout), families=(SENTENCE,)))
