"""What every task family's batches share: padded tensors from token ids, the batch order of an epoch, a seeded
subset of the data, and the tokens that are not text."""
from __future__ import annotations

import numpy as np
import torch

from course_lib.runtime.errors import UsageError


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


def to_device(tensors, device):
    """A batch (a dict or a tuple of host tensors) on `device`, without making the host wait: on a GPU each
    tensor is copied from pinned memory asynchronously, since a plain copy from pageable memory waits for the
    stream, i.e. for every step queued before it."""
    device = torch.device(device)
    if device.type != "cuda":
        move = lambda t: t.to(device)  # noqa: E731
    else:
        move = lambda t: t.pin_memory().to(device, non_blocking=True)  # noqa: E731
    if isinstance(tensors, dict):
        return {k: move(v) for k, v in tensors.items()}
    return tuple(move(t) for t in tensors)


def special_token_ids(tokenizer) -> set[int]:
    """[CLS], [SEP] and [PAD]: the tokens that are not text, which no method masks, probes or labels."""
    return {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id}


def subsample(examples: list, n: int | None, seed: int) -> list:
    """A deterministic random subset of `n` examples (a debug cap like run_glue's max_train_samples).

    The chosen indices are the first n of one seeded permutation, so a smaller cap is a subset
    of a larger one; they are kept in file order so outputs line up with the file.
    """
    if n is None or n >= len(examples):
        return list(examples)
    if n < 1:
        raise UsageError(f"sample cap must be a positive number or unset, got {n}")
    chosen = np.sort(np.random.default_rng(seed).permutation(len(examples))[:n])
    return [examples[i] for i in chosen]


BUCKET_CHUNK_BATCHES = 50  # bucketing sorts chunks of this many batches: less padding, still random


def epoch_batches(
    lengths: list[int],
    batch_size: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    bucket: bool = False,
) -> list[list[int]]:
    """Split example indices into batches; every index appears exactly once.

    A pure function of its arguments (the generator is seeded from seed and epoch), so a run
    resumed mid-epoch rebuilds the same order and skips the batches it already did.
    bucket=True groups similar lengths: shuffle, sort each chunk of BUCKET_CHUNK_BATCHES batches
    by length, cut it into batches, then shuffle the batch order, which cuts padding while
    keeping batches random. Without shuffle, batches are in index order, or with bucket=True
    longest first (so an out-of-memory batch fails at once); either way eval batches should be
    scattered back by index.
    """
    if batch_size < 1:
        raise UsageError(f"batch size must be a positive number, got {batch_size}")
    n = len(lengths)
    lengths = np.asarray(lengths)
    if not shuffle:
        order = np.argsort(-lengths, kind="stable") if bucket else np.arange(n)
        return [order[i:i + batch_size].tolist() for i in range(0, n, batch_size)]
    rng = np.random.default_rng([seed % 2**64, epoch])  # one independent stream per (seed, epoch)
    order = rng.permutation(n)
    if not bucket:
        return [order[i:i + batch_size].tolist() for i in range(0, n, batch_size)]
    chunk = BUCKET_CHUNK_BATCHES * batch_size
    batches = []
    for start in range(0, n, chunk):
        part = order[start:start + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[i:i + batch_size].tolist() for i in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]
