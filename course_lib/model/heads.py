"""Task heads on top of the encoder."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from course_lib.model.bert import BertModel, BertOutput


@dataclass
class ClassifierOutput:
    logits: torch.Tensor  # (B, num_labels)
    loss: torch.Tensor | None = None  # the training objective, when labels are given
    stats: dict = field(default_factory=dict)  # method-specific numbers to log (masking proportion, ...)
    token_logits: torch.Tensor | None = None  # (B, L, 2) from a token head (SSA), for plots of token scores


class LinearHead(nn.Module):
    """The encoder, then dropout and one linear layer of `num_labels` outputs, initialised as BERT's (normal,
    std 0.02; zero bias): what the sentence, tagging and multiple-choice heads share."""

    def __init__(self, encoder: BertModel, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.num_labels = num_labels
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)


class SequenceClassifier(LinearHead):
    """BERT's sentence-level head (Devlin et al. 2019, Sec. 4.1): dropout(pooled [CLS]) → linear.

    num_labels = 1 makes it a regressor (STS-B). Like Hugging Face's task models, `forward` computes the
    training loss when labels are given, so method subclasses can change the objective behind one call
    (which is also what DistributedDataParallel needs).
    """

    # The same logits and gradients either way, up to float rounding (~1e-9 in the gradients); False computes
    # every position of the last layer as Hugging Face does, for bit-for-bit comparisons.
    cls_only = True

    def logits(self, input_ids, attention_mask=None, token_type_ids=None,
               **encoder_kwargs) -> tuple[torch.Tensor, BertOutput]:
        """(logits, encoder output). Unless attention maps are asked for, the encoder's last layer computes the
        [CLS] row only (the encoder's `cls_only`, when `self.cls_only`): the head reads nothing else."""
        if self.cls_only and not encoder_kwargs.get("output_attentions", False):
            encoder_kwargs.setdefault("cls_only", True)
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


class MeanPoolClassifier(SequenceClassifier):
    """`SequenceClassifier` on the mean of the last layer's token vectors (padding left out) instead of the pooled
    [CLS]: dropout → linear, the same loss. The packaged MiniLM was trained as a sentence encoder through mean
    pooling (Reimers & Gurevych 2019), so its [CLS] row was never a trained summary; this head is the control that
    tells a method's gain from the mere use of every token (SSA-Hybrid's pooling also reads them all)."""

    def logits(self, input_ids, attention_mask=None, token_type_ids=None,
               **encoder_kwargs) -> tuple[torch.Tensor, BertOutput]:
        out = self.encoder(input_ids, attention_mask, token_type_ids, **encoder_kwargs)
        mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).unsqueeze(-1)
        mean = (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1)
        return self.classifier(self.dropout(mean)), out


class SpanHead(nn.Module):
    """BERT's span question answering head (Devlin et al. 2019, Sec. 4.2): one linear layer gives every token a
    start score and an end score; the answer is the best-scoring start..end pair (decoding is the task family's).

    Output logits (B, L, 2): [..., 0] start, [..., 1] end. Labels (B, 2): the gold start and end token, 0 ([CLS])
    when the answer is not in the window. Like Hugging Face's `BertForQuestionAnswering`, no dropout before the
    output layer and the loss is the mean of the start and end cross-entropies.
    """

    def __init__(self, encoder: BertModel, num_labels: int = 2):
        super().__init__()
        if num_labels != 2:
            raise ValueError(f"a span head has 2 outputs per token (start, end), got num_labels={num_labels}")
        self.encoder = encoder
        self.num_labels = num_labels
        self.qa_outputs = nn.Linear(encoder.config.hidden_size, 2)
        nn.init.normal_(self.qa_outputs.weight, std=0.02)
        nn.init.zeros_(self.qa_outputs.bias)

    def logits(self, input_ids, attention_mask=None, token_type_ids=None,
               **encoder_kwargs) -> tuple[torch.Tensor, BertOutput]:
        out = self.encoder(input_ids, attention_mask, token_type_ids, **encoder_kwargs)
        return self.qa_outputs(out.last_hidden_state), out  # (B, L, 2)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> ClassifierOutput:
        logits, _ = self.logits(input_ids, attention_mask, token_type_ids)
        return ClassifierOutput(logits, None if labels is None else self.loss(logits, labels))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean of the start and end cross-entropies over the window's positions."""
        start, end = logits.float().unbind(-1)  # (B, L) each
        return (nn.functional.cross_entropy(start, labels[:, 0]) + nn.functional.cross_entropy(end, labels[:, 1])) / 2


IGNORE_INDEX = -100  # a token whose label is not scored (special tokens, padding, later sub-words)


class TokenClassifier(LinearHead):
    """BERT's tagging head (Devlin et al. 2019, Sec. 5.3): dropout and a linear layer on every token's final
    hidden state, as Hugging Face's `BertForTokenClassification`.

    Output logits (B, L, num_labels). Labels (B, L): a tag id per token, IGNORE_INDEX where no tag is scored (a
    word is tagged on its first sub-word only); the loss is the cross-entropy over the scored tokens.
    """

    def logits(self, input_ids, attention_mask=None, token_type_ids=None,
               **encoder_kwargs) -> tuple[torch.Tensor, BertOutput]:
        out = self.encoder(input_ids, attention_mask, token_type_ids, **encoder_kwargs)
        return self.classifier(self.dropout(out.last_hidden_state)), out  # (B, L, C)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> ClassifierOutput:
        logits, _ = self.logits(input_ids, attention_mask, token_type_ids)
        return ClassifierOutput(logits, None if labels is None else self.loss(logits, labels))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)


class MultipleChoiceHead(LinearHead):
    """BERT's multiple-choice head (Devlin et al. 2019, Sec. 4.4, SWAG): each (context, choice) pair is encoded
    on its own, a linear layer scores its pooled [CLS], and a softmax over the choices picks one, as Hugging
    Face's `BertForMultipleChoice`.

    Inputs (B, C, L), C choices per question; logits (B, C); labels (B,), the right choice's index. As in
    `SequenceClassifier`, the last layer computes the [CLS] row only (`cls_only`) unless maps are asked for.
    """

    cls_only = True

    def __init__(self, encoder: BertModel, num_labels: int = 1, dropout: float = 0.1):
        super().__init__(encoder, 1, dropout)  # one score per choice; the number of choices comes with the batch
        self.num_labels = num_labels

    @staticmethod
    def flatten(x: torch.Tensor | None) -> torch.Tensor | None:
        """(B, C, L) -> (B * C, L): the pairs as the encoder sees them."""
        return None if x is None else x.flatten(0, 1)

    def logits(self, input_ids, attention_mask=None, token_type_ids=None,
               **encoder_kwargs) -> tuple[torch.Tensor, BertOutput]:
        if self.cls_only and not encoder_kwargs.get("output_attentions", False):
            encoder_kwargs.setdefault("cls_only", True)
        out = self.encoder(self.flatten(input_ids), self.flatten(attention_mask), self.flatten(token_type_ids),
                           **encoder_kwargs)
        scores = self.classifier(self.dropout(out.pooler_output))  # (B * C, 1)
        return scores.view(input_ids.shape[:2]), out  # (B, C)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> ClassifierOutput:
        logits, _ = self.logits(input_ids, attention_mask, token_type_ids)
        return ClassifierOutput(logits, None if labels is None else self.loss(logits, labels))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits.float(), labels)
