"""BERT from scratch (Devlin et al. 2019), one file to read top to bottom.

    tokens ─► Embeddings (word + position + token type, LayerNorm, dropout)
           ─► N × Layer:  x = LN(x + Dropout(SelfAttention(x)))        post-LN, as in the paper
                          x = LN(x + Dropout(W2 · GELU(W1 · x)))
           ─► last_hidden_state (B, L, d);  pooler: tanh(W_p · h_[CLS]) (B, d)

Shapes: B batch, L sequence length, d hidden size, H heads, d_h = d / H.
Attention is the one pluggable part (see `course_lib.model.attention`): the row normaliser is chosen by name in
`BertConfig.attn_normalizer`, and callers may add a bias to the logits of every layer (`attention_bias`). A method
that changes each layer's attention on its own (ASA) does so from outside, with PyTorch forward pre-hooks on the
layers; the CPU kernels are swapped in from outside too (`course_lib.fast`).
Parameter names are our own; `course_lib.model.weights` maps Hugging Face checkpoints onto them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.model.attention import attend, get_normalizer
from course_lib.model.config import BertConfig


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, L, d)
    pooler_output: torch.Tensor  # (B, d)
    attentions: tuple[torch.Tensor, ...] | None = None  # per layer (B, H, L, L), when requested


class Embeddings(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        """[q1c] BERT's input embeddings (Devlin et al. 2019, Fig. 2): (B, L) ids → (B, L, d).

        Hints:
          1. Positions are 0, 1, ..., L - 1 (L = input_ids.shape[1]); make them with torch.arange on the ids'
             device. One (L, d) position table broadcasts over the batch.
          2. Add the three lookups: self.word(input_ids) + self.token_type(token_type_ids) + self.position(...),
             each (B, L, d).
          3. Apply self.norm (LayerNorm over d), then self.dropout, in that order.
        """
        ### BEGIN SOLUTION
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (L,)
        x = self.word(input_ids) + self.token_type(token_type_ids) + self.position(positions)  # (B, L, d)
        return self.dropout(self.norm(x))
        ### END SOLUTION


def split_heads(qkv: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[q1b] Split the fused projection into per-head queries, keys and values: (B, L, 3d) → 3 × (B, H, L, d_h).

    Hints:
      1. The last axis of qkv is [Q | K | V], each of width d = H · d_h, and inside each part head h owns
         columns h · d_h to (h + 1) · d_h - 1. So d_h = qkv.shape[-1] // (3 · num_heads).
      2. `view` the last axis as (3, H, d_h): (B, L, 3, H, d_h).
      3. `permute` to (3, B, H, L, d_h) and unpack the first axis into q, k and v (views, no copy).
    """
    ### BEGIN SOLUTION
    B, L, three_d = qkv.shape
    head_dim = three_d // (3 * num_heads)
    q, k, v = qkv.view(B, L, 3, num_heads, head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, L, d_h)
    return q, k, v
    ### END SOLUTION


def merge_heads(context: torch.Tensor) -> torch.Tensor:
    """[q1b] Concatenate the heads' outputs again: (B, H, L, d_h) → (B, L, d) with d = H · d_h.

    Hints:
      1. Bring the heads next to d_h: transpose to (B, L, H, d_h).
      2. Flatten the last two axes, head 0's d_h columns first. The transposed tensor is not contiguous,
         so use `reshape` (or `.contiguous().view`).
    """
    ### BEGIN SOLUTION
    B, H, L, head_dim = context.shape
    return context.transpose(1, 2).reshape(B, L, H * head_dim)
    ### END SOLUTION


def add_and_norm(x: torch.Tensor, sublayer_out: torch.Tensor, dropout: nn.Module, norm: nn.Module) -> torch.Tensor:
    """[q1d] The residual connection around every sub-layer, post-LN as in BERT: LN(x + Dropout(sublayer(x))).

    Hints:
      1. x is the sub-layer's input and sublayer_out its output, both (B, L, d).
      2. Dropout applies to the sub-layer's output only, before the residual sum (Vaswani et al. 2017, 5.4).
      3. LayerNorm comes last, on the sum.
    """
    ### BEGIN SOLUTION
    return norm(x + dropout(sublayer_out))
    ### END SOLUTION


class SelfAttention(nn.Module):
    """Multi-head self-attention with add & norm. Q, K and V come from one fused (d → 3d) projection."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.normalize = get_normalizer(cfg.attn_normalizer, **cfg.normalizer_params())
        self.probs_dropout = nn.Dropout(cfg.attention_probs_dropout_prob)  # on the attention map
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, bias, need_weights: bool, rows: slice | None = None):
        """rows: compute these query rows only (`BertModel`'s cls_only: the [CLS] row); every row by default.
        Keys and values always come from every token, so a row's output is the same either way."""
        q, k, v = split_heads(self.qkv(x), self.num_heads)  # (B, L, 3d) → 3 × (B, H, L, d_h), one projection
        if rows is not None:
            x, q, bias = x[:, rows], q[:, :, rows], None if bias is None else bias[..., rows, :]
        context, probs = attend(q, k, v, bias, self.normalize, self.probs_dropout, need_weights)  # (B, H, Lq, d_h)
        return add_and_norm(x, self.out(merge_heads(context)), self.dropout, self.norm), probs


class FeedForward(nn.Module):
    """Position-wise W2 · GELU(W1 · x) with add & norm."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[q1d] The position-wise feed-forward sub-layer with add & norm: (B, L, d) → (B, L, d).

        Hints:
          1. self.up maps d → d_ff (the intermediate size), self.down maps d_ff → d.
          2. BERT's activation is the exact (erf) GELU between them: F.gelu.
          3. Wrap it with add_and_norm(x, ..., self.dropout, self.norm).
        """
        ### BEGIN SOLUTION
        hidden = F.gelu(self.up(x))  # (B, L, d_ff)
        return add_and_norm(x, self.down(hidden), self.dropout, self.norm)
        ### END SOLUTION


class Layer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.ffn = FeedForward(cfg)

    def forward(self, x, bias, need_weights, rows=None):
        x, probs = self.attention(x, bias, need_weights, rows)
        return self.ffn(x), probs


class BertModel(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_hidden_layers))
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """Truncation-free N(0, 0.02) as in the BERT release; LayerNorm starts as the identity."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            nn.init.zeros_(module.weight[module.padding_idx])
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_attentions: bool = False,
                attention_bias: torch.Tensor | None = None, cls_only: bool = False) -> BertOutput:
        """input_ids, attention_mask (1 = real token), token_type_ids: (B, L).

        attention_bias: extra additive logits for every layer, broadcastable to (B, H, L, L).
        cls_only: the last layer computes the [CLS] row alone, all that the pooler reads, for about a quarter of
        that layer's compute (the classification heads ask for it); last_hidden_state is then (B, 1, d).
        """
        L, positions = input_ids.shape[1], self.config.max_position_embeddings
        if L > positions:  # else the position lookup fails with a bare "index out of range in self"
            raise ValueError(f"input of {L} tokens is longer than the model's max_position_embeddings "
                             f"{positions}: truncate it to {positions} tokens or fewer")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)  # (B, L, d)
        bias = attention_bias
        if attention_mask is not None:  # padding keys get a large negative logit: (B, 1, 1, L)
            mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
            bias = mask if attention_bias is None else mask + attention_bias
        attentions = []
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            x, probs = layer(x, bias, output_attentions, slice(0, 1) if cls_only and last else None)
            attentions.append(probs)
        pooled = torch.tanh(self.pooler(x[:, 0]))  # (B, d), from the [CLS] position
        return BertOutput(x, pooled, tuple(attentions) if output_attentions else None)
