"""Task heads on top of the encoder."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .bert import BertModel, BertOutput
from .dropout import Dropout


@dataclass
class ClassifierOutput:
    logits: torch.Tensor  # (B, num_labels)
    loss: torch.Tensor | None = None  # the training objective, when labels are given
    stats: dict = field(default_factory=dict)  # method-specific numbers to log (masking proportion, ...)
    token_logits: torch.Tensor | None = None  # (B, L, 2) from a token head (SSA), for plots of token scores


class SequenceClassifier(nn.Module):
    """BERT's sentence-level head (Devlin et al. 2019, Sec. 4.1): dropout(pooled [CLS]) → linear.

    num_labels = 1 makes it a regressor (STS-B). Like Hugging Face's task models, `forward` computes the
    training loss when labels are given, so method subclasses can change the objective behind one call
    (which is also what DistributedDataParallel needs).
    """

    # The same logits and gradients either way, up to float rounding (~1e-9 in the gradients); False computes
    # every position of the last layer as Hugging Face does, for bit-for-bit comparisons.
    cls_only = True

    def __init__(self, encoder: BertModel, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.num_labels = num_labels
        self.dropout = Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def logits(self, input_ids, attention_mask=None, token_type_ids=None,
               **encoder_kwargs) -> tuple[torch.Tensor, BertOutput]:
        """(logits, encoder output). Unless attention maps are asked for, the encoder's last layer computes the
        [CLS] position only (`BertModel.forward`'s cls_only, when `self.cls_only`): the head reads nothing else."""
        encoder_kwargs.setdefault("cls_only", self.cls_only and not encoder_kwargs.get("output_attentions", False))
        out = self.encoder(input_ids, attention_mask, token_type_ids, **encoder_kwargs)
        return self.classifier(self.dropout(out.pooler_output)), out

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> ClassifierOutput:
        logits, _ = self.logits(input_ids, attention_mask, token_type_ids)
        return ClassifierOutput(logits, None if labels is None else self.loss(logits, labels))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy for classes, mean squared error for regression (as run_glue does)."""
        if self.num_labels == 1:
            return nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float())
        return nn.functional.cross_entropy(logits.float(), labels)
