"""Task heads on top of the encoder."""
from __future__ import annotations

import torch
from torch import nn

from .bert import BertModel


class SequenceClassifier(nn.Module):
    """BERT's sentence-level head (Devlin et al. 2019, Sec. 4.1): dropout(pooled [CLS]) → linear.

    num_labels = 1 makes it a regressor (STS-B). Returns (logits (B, num_labels), encoder output).
    """

    def __init__(self, encoder: BertModel, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.num_labels = num_labels
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **encoder_kwargs):
        out = self.encoder(input_ids, attention_mask, token_type_ids, **encoder_kwargs)
        return self.classifier(self.dropout(out.pooler_output)), out

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy for classes, mean squared error for regression (as run_glue does)."""
        if self.num_labels == 1:
            return nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float(), reduction=reduction)
        return nn.functional.cross_entropy(logits.float(), labels, reduction=reduction)
