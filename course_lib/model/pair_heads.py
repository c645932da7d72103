"""A sentence pair encoded as two sentences: each side through the encoder on its own, a head on both [CLS] vectors.

BERT's own way with a pair is one sequence, [CLS] a [SEP] b [SEP], so every token of a attends to every token of
b (a cross-encoder; `heads.SequenceClassifier`). The CS224N default project's starter model instead encodes
each sentence separately and lets the head compare the two embeddings u and v (a bi-encoder), as Sentence-BERT
does (Reimers & Gurevych 2019, Sec. 3): the head sees (u, v, |u - v|, u * v), the two vectors, how far apart they
are coordinate by coordinate, and where they agree. A bi-encoder can embed each sentence once and compare many
pairs cheaply; a cross-encoder usually scores a single pair better.

The data side does not change for it. `encode_separately` writes one feature per pair holding both sentences,
each tokenized and truncated on its own, [CLS] a [SEP] [CLS] b [SEP], with token type 0 for a's tokens and 1 for
b's; batching, padding and prediction treat it like any sentence feature, and `split_packed_pair` takes the batch
apart again into the two sides, stacked into one encoder call of 2B rows.
"""
from __future__ import annotations

import torch
from torch import nn

from course_lib.model.bert import BertModel
from course_lib.model.host_reads import may_branch
from course_lib.model.heads import ClassifierOutput, SequenceClassifier


def encode_separately(examples: list, tokenizer, max_len: int) -> list[dict]:
    """Features of sentence pairs encoded one sentence at a time: [CLS] a [SEP] then [CLS] b [SEP], each side cut
    to `max_len` tokens on its own, token type 0 for a and 1 for b (the marker `split_packed_pair` reads)."""
    if any(len(ex.texts) != 2 for ex in examples):
        raise ValueError("encode_separately takes sentence pairs; a single sentence is encoded as usual")
    first = tokenizer([ex.texts[0] for ex in examples], truncation=True, max_length=max_len)["input_ids"]
    second = tokenizer([ex.texts[1] for ex in examples], truncation=True, max_length=max_len)["input_ids"]
    return [{"input_ids": a + b, "token_type_ids": [0] * len(a) + [1] * len(b), "label": ex.label}
            for a, b, ex in zip(first, second, examples)]


def split_packed_pair(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor,
                      pad_token_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask), each (2B, L'): rows 0..B-1 the first sentences, rows B..2B-1 the second ones, from a batch of
    `encode_separately` features (B, L). L' is the longest side (L itself where the code may not read values,
    `may_branch`: the extra columns are padding); each row is left-aligned and padded."""
    real = attention_mask.bool()
    len_a = (real & (token_type_ids == 0)).sum(1)  # (B,)
    len_b = (real & (token_type_ids == 1)).sum(1)
    width = int(torch.maximum(len_a, len_b).max()) if may_branch(len_a) else input_ids.shape[1]
    pos = torch.arange(width, device=input_ids.device).unsqueeze(0)  # (1, L')
    last = input_ids.shape[1] - 1
    sides = []
    for start, length in ((torch.zeros_like(len_a), len_a), (len_a, len_b)):
        index = (start.unsqueeze(1) + pos).clamp(max=last)
        mask = pos < length.unsqueeze(1)
        sides.append((input_ids.gather(1, index).masked_fill(~mask, pad_token_id), mask.long()))
    return torch.cat([sides[0][0], sides[1][0]]), torch.cat([sides[0][1], sides[1][1]])


def pad_side(ids: torch.Tensor, mask: torch.Tensor, width: int, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One side of a pair padded on the right to `width` columns, so both sides stack into one batch."""
    extra = width - ids.shape[1]
    return (nn.functional.pad(ids, (0, extra), value=pad_token_id), nn.functional.pad(mask, (0, extra), value=0))


class SeparatePairClassifier(SequenceClassifier):
    """A pair task's head on separately encoded sentences (a bi-encoder): dropout, then a linear layer on
    (u, v, |u - v|, u * v), u and v the pooled [CLS] of each side. num_labels = 1 makes it a regressor.

    `forward` takes a batch of `encode_separately` features, like any sentence head; `pair_logits` takes the two
    sides as the course's interface does (ids1, mask1, ids2, mask2). The loss is `SequenceClassifier`'s.
    """

    def __init__(self, encoder: BertModel, num_labels: int, dropout: float = 0.1, pad_token_id: int = 0):
        super().__init__(encoder, num_labels, dropout)
        self.pad_token_id = pad_token_id
        self.classifier = nn.Linear(4 * encoder.config.hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The pooled [CLS] vector of each row, (B, d); the last layer computes the [CLS] row only."""
        return self.encoder(input_ids, attention_mask, cls_only=True).pooler_output

    def pair_logits(self, ids1, mask1, ids2, mask2) -> torch.Tensor:
        """[q4b] The head's output for sentence pairs given as two sides, ids and masks (B, L1) and (B, L2):
        (B, num_labels).

        Hints:
          1. Pad the narrower side on the right to the other's width (`pad_side`), so both stack into one batch
             of 2B rows: one encoder call instead of two, the same numbers.
          2. `self.embed` gives the pooled [CLS] of every row, (2B, d); the first B rows are u, the others v.
          3. Then dropout on `combine_pair(u, v)` and the linear layer `self.classifier`.
        """
        ### BEGIN SOLUTION
        width = max(ids1.shape[1], ids2.shape[1])
        (ids1, mask1), (ids2, mask2) = (pad_side(ids1, mask1, width, self.pad_token_id),
                                        pad_side(ids2, mask2, width, self.pad_token_id))
        u, v = self.embed(torch.cat([ids1, ids2]), torch.cat([mask1, mask2])).chunk(2)
        return self.classifier(self.dropout(combine_pair(u, v)))
        ### END SOLUTION

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None) -> ClassifierOutput:
        ids, mask = split_packed_pair(input_ids, attention_mask, token_type_ids, self.pad_token_id)
        u, v = self.embed(ids, mask).chunk(2)
        logits = self.classifier(self.dropout(combine_pair(u, v)))
        return ClassifierOutput(logits, None if labels is None else self.loss(logits, labels))


def combine_pair(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """[q4a] The features a bi-encoder's head reads from two sentence embeddings, (B, d) each → (B, 4d).

    Hints:
      1. Concatenate, along the last dimension and in this order: u, v, |u - v| and u * v (Reimers & Gurevych
         2019, Sec. 3; their best classification objective uses the first three).
      2. |u - v| is symmetric in the two sentences and says how far apart they are in each coordinate; u * v is
         large where both agree. A linear layer on u and v alone cannot form either.
    """
    ### BEGIN SOLUTION
    return torch.cat([u, v, (u - v).abs(), u * v], dim=-1)
    ### END SOLUTION
