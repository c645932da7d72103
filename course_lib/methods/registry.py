"""The fine-tuning methods by name: one registry, the way Hugging Face maps names to classes.

A method is what it changes, declared once: its options (a small dataclass in its module), how it changes the pretrained
encoder's config, which task model it trains (the plain head, or one whose objective it changes), what it does
to the training set at the start of each epoch, and the task families it applies to. The training code asks
the registry and has no `if method == ...` of its own, so a new method is its own module plus one `register`
entry here (or in a user's file: `register(Method(...))` before `finetune`). The built-in methods are declared
below but loaded on first use, so a run with SSA never imports ASA's module; `every_method()` loads them all.

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

from dataclasses import dataclass
from typing import Callable

from course_lib.model.heads import MeanPoolClassifier
from course_lib.runtime.errors import UsageError
from course_lib.runtime.registry import Registry
from course_lib.runtime.settings import NoOptions, Settings


@dataclass(frozen=True)
class EpochContext:
    """What a method's per-epoch hook may use: the epoch (0-based), the task's kind, the tokens it must leave
    alone, the [MASK] id, and `probe(features, bf16=False)`, the current model's predictions (class ids or
    scores; bf16: under bfloat16 autocast)."""

    epoch: int
    is_regression: bool
    special_ids: set[int]
    mask_id: int
    probe: Callable[[list[dict]], list]


@dataclass(frozen=True)
class Method:
    """One fine-tuning method. Every callable receives the run's FinetuneConfig as `cfg`, whose `options` is an
    instance of the method's `options` class.

    options: the method's own options, a Settings model (each field's default, range, valid names and help
    text, `Field(description=...)`, which --help shows); the command line, grids and metrics.json name its
    fields flat.
    build_model(cfg, encoder, task, tokenizer): the task model for the run's bound task (its family, its
    num_labels), whose forward returns the method's loss; None: the task family's plain head
    (`TaskFamily.build_head`).
    encoder_overrides(cfg): BertConfig fields to change before the pretrained weights load (SSAF's normaliser).
    epoch_data(cfg, features, context): the epoch's training set and its statistics, or None to train on the
    encoded set as it is; its result is cached in the run folder, so a resumed epoch trains on the same set.
    token_labels: the task model reads per-token labels (SSA), which epoch_data writes into the features.
    clip_scope(cfg, model): the parameters the gradient clip covers, or None for all of them (ASA leaves its
    adversaries out, `asa.clipped_parameters`).
    export_refusal: why the fine-tuned model is not transformers' BERT at inference, and what to use instead;
    None: it is (its training-only parts, ASA's adversaries or SSA's token head, are left out), and `export`
    writes it as a Hugging Face folder.
    """

    name: str
    summary: str
    options: type[Settings] = NoOptions
    build_model: Callable | None = None
    encoder_overrides: Callable[..., dict] = lambda cfg: {}
    epoch_data: Callable | None = None
    token_labels: bool = False
    clip_scope: Callable[..., list | None] = lambda cfg, model: None
    families: tuple[str, ...] | None = None  # the task families it applies to; None: every one (it only
    #   changes the encoder, whose output every family's head reads)
    multitask: bool = False  # it may train some tasks of a multitask run: it changes only its task's head, loss
    #   and data; not the encoder every task shares (SSAF), not the gradient clip (ASA)
    export_refusal: str | None = None

    def check_family(self, family: str) -> None:
        """Refuse a task family the method is not defined for, in one line naming the ones it is."""
        if self.families is not None and family not in self.families:
            raise UsageError(f"method {self.name!r} does not apply to {family} tasks "
                             f"(it applies to: {', '.join(self.families)})")


def multitask_methods() -> list[str]:
    """The methods a multitask run may train its chosen tasks with (`Method.multitask`)."""
    return [name for name, method in every_method().items() if method.multitask]


# The built-in methods: each entry builds its method, importing its module, the first time it is asked for.

OWN = "use it through this library (load_finetuned, predict)"  # what a method `export` refuses offers instead


def _vanilla() -> Method:
    return Method("vanilla", "plain fine-tuning (Devlin et al. 2019)", multitask=True)


def _ssaf() -> Method:
    from course_lib.methods import ssaf
    return Method("ssaf", "sparsegen-lin attention in every head (Cui et al. 2019)", ssaf.SSAFOptions,
                  encoder_overrides=ssaf.encoder_config,
                  export_refusal="its attention normalises with sparsegen-lin, which transformers' BERT lacks; " + OWN)


def _asa() -> Method:
    from course_lib.methods import asa
    return Method("asa", "adversarial self-attention (Wu et al. 2023)", asa.ASAOptions, build_model=asa.build_asa,
                  clip_scope=asa.clipped_parameters, families=tuple(asa.ASA_MODELS))


def _bernoulli_mask() -> Method:
    from course_lib.methods import asa
    return Method("bernoulli-mask", "random attention masks, ASA's baseline (Wu et al. 2023)", asa.BernoulliOptions,
                  build_model=asa.build_bernoulli_mask, families=tuple(asa.ASA_MODELS))


def _ssa_co() -> Method:
    from course_lib.methods import ssa
    return Method("ssa-co", "self-supervised attention, co-training (Kou et al. 2020)", ssa.SSAOptions,
                  build_model=ssa.build_ssa_co, epoch_data=ssa.ssa_epoch_data, token_labels=True,
                  families=("sentence",), multitask=True)


def _ssa_hybrid() -> Method:
    from course_lib.methods import ssa
    return Method("ssa-hybrid", "self-supervised attention with importance pooling (Kou et al. 2020)",
                  ssa.SSAHybridOptions, build_model=ssa.build_ssa_hybrid, epoch_data=ssa.ssa_epoch_data,
                  token_labels=True, families=("sentence",), multitask=True,
                  export_refusal="its head pools the tokens by learned importance, which no transformers head "
                                 "does; " + OWN)


def _bert_mask() -> Method:
    from course_lib.methods import ssa
    return Method("bert-mask", "masked copies with their gold labels, SSA's baseline (Kou et al. 2020)",
                  ssa.SamplerOptions, epoch_data=ssa.bert_mask_epoch_data, families=("sentence",), multitask=True)


def _mean_pool() -> Method:
    return Method("mean-pool", "vanilla with the head on the mean token vector, not [CLS] (a control)",
                  build_model=lambda cfg, encoder, task, tokenizer: MeanPoolClassifier(
                      encoder, task.num_labels, cfg.classifier_dropout), families=("sentence",), multitask=True,
                  export_refusal="its head reads the mean token vector, not the pooled [CLS] that transformers' "
                                 "heads read; " + OWN)


METHODS: Registry[Method] = Registry("method", {
    "vanilla": _vanilla, "ssaf": _ssaf, "asa": _asa, "bernoulli-mask": _bernoulli_mask, "ssa-co": _ssa_co,
    "ssa-hybrid": _ssa_hybrid, "bert-mask": _bert_mask, "mean-pool": _mean_pool})
register, get_method, every_method = METHODS.register, METHODS.get, METHODS.every
option_owners = METHODS.option_readers  # {option: the methods that read it} (`FinetuneConfig.foreign`)
