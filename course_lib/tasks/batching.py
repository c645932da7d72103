"""Token ids into padded tensors, the part of a batch every task family shares."""
from __future__ import annotations

import torch


def pad_tokens(features: list[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """input_ids, token_type_ids and attention_mask (1 = real token), each (B, L), padded to the batch's own
    longest sequence (dynamic padding), not to max_len."""
    B, L = len(features), max(len(f["input_ids"]) for f in features)
    input_ids = torch.full((B, L), pad_token_id, dtype=torch.long)
    token_type_ids = torch.zeros((B, L), dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    for b, f in enumerate(features):
        n = len(f["input_ids"])
        input_ids[b, :n] = torch.tensor(f["input_ids"])
        token_type_ids[b, :n] = torch.tensor(f["token_type_ids"])
        attention_mask[b, :n] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
