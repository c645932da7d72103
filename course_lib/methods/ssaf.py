"""SSAF: fine-tuning BERT with sparse self-attention (Cui et al., EMNLP-IJCNLP 2019).

Every head of every layer swaps its row softmax for sparsegen-lin with one global lambda (paper Eqs. 7-8),
and all of BERT is fine-tuned as usual. Negative lambda (the paper uses -3 to -7) is *less* sparse than
sparsemax; see `course_lib.model.sparsemax.sparsegen_lin` for the mathematics.
"""
from __future__ import annotations

import torch
from pydantic import Field

from course_lib.model.attention import sparsity
from course_lib.runtime.settings import Settings

# Cui et al. (2019), Sec. 4: the lambda chosen per task (paper task names: SST-1 is our sst5). A grid or preset
# that runs SSAF on one of these tasks sets this value; tests/test_paper_settings.py checks every grid file and
# notebook preset.
PAPER_LAMBDA = {"sst2": -4.0, "sst5": -3.0, "semeval2013": -3.0, "scitail": -6.0, "squad": -7.0}


class SSAFOptions(Settings):
    """`--method ssaf`'s option."""

    sparsegen_lambda: float = Field(-4.0, description="sparsegen-lin's lambda (Cui et al. 2019 use -4 on SST-2); must "
                                    "be < 1", lt=1)


def encoder_overrides(sparsegen_lambda: float) -> dict:
    """BertConfig fields that turn a pretrained BERT into an SSAF model: the normaliser and its lambda."""
    return {"attn_normalizer": "sparsegen_lin", "attn_normalizer_params": {"lam": sparsegen_lambda}}


@torch.no_grad()
def attention_sparsity(encoder, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
    """Fraction of exact zeros in each head's attention over real tokens: (layers, heads), for plots."""
    was_training = encoder.training
    encoder.eval()
    out = encoder(input_ids, attention_mask, token_type_ids, output_attentions=True)
    encoder.train(was_training)
    return torch.stack([sparsity(probs, attention_mask) for probs in out.attentions])


def encoder_config(cfg) -> dict:
    """The method registry's hook (`course_lib.methods.registry`): the run's lambda into the encoder's config."""
    return encoder_overrides(cfg.options.sparsegen_lambda)
