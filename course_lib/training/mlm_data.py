"""The pre-training data: lines of text, packed into blocks, and BERT's masking of them.

Lines come from a file, the GLUE training sentences, or a generated corpus (the same on every machine). They
are tokenised and packed whole into blocks `[CLS] line [SEP] line [SEP] ...` of at most `max_len` tokens, close to
the contiguous blocks the AG authors trained on. Masks come from a generator seeded with a tuple of ints, so a
step's masks depend on (seed, step) only (`course_lib.training.pretrain` trains on them; notebook 04 shows them).
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from course_lib.readers import local_data
from course_lib.runtime.errors import UsageError
from course_lib.tasks import glue
from course_lib.training.config import PretrainConfig

IGNORE = -100  # label of the positions that are not predicted


_WORDS = {
    "subject": ["the cat", "the dog", "a child", "my friend", "the teacher", "the old man", "a young woman",
                "the farmer", "the doctor", "our neighbour", "the students", "her brother"],
    "verb": ["sees", "likes", "follows", "helps", "finds", "calls", "visits", "watches", "paints", "remembers"],
    "object": ["the ball", "a small house", "the red car", "the river", "an old book", "the garden", "a letter",
               "the market", "a bright star", "the blue door"],
    "place": ["in the morning", "after school", "near the station", "at night", "in the park", "on sunday",
              "before dinner", "by the sea"],
    "adjective": ["happy", "tired", "quiet", "late", "kind", "busy", "hungry", "brave"],
}
_NUMBERS = "one two three four five six seven eight nine ten eleven twelve".split()


def generated_corpus(num_lines: int = 20000) -> list[str]:
    """Templated English, the same on every machine: the fallback when there is no file and no GLUE data.

    Its regularities (fixed phrases, counting sequences, clause structure, periods) are what the AG patterns
    and an MLM can pick up within a few hundred steps.
    """
    rng = random.Random(0)
    pick = {k: (lambda words=v: rng.choice(words)) for k, v in _WORDS.items()}

    def sentence() -> str:
        kind = rng.randrange(5)
        if kind == 0:
            return f"{pick['subject']()} {pick['verb']()} {pick['object']()} {pick['place']()} ."
        if kind == 1:
            return f"{pick['subject']()} is {pick['adjective']()} {pick['place']()} ."
        if kind == 2:
            start = rng.randrange(len(_NUMBERS) - 3)
            count = " ".join(_NUMBERS[start:start + rng.randint(3, len(_NUMBERS) - start)])
            return f"{pick['subject']()} counts {count} ."
        if kind == 3:
            return (f"if {pick['subject']()} {pick['verb']()} {pick['object']()} , "
                    f"{pick['subject']()} is {pick['adjective']()} .")
        return f"{pick['subject']()} {pick['verb']()} {pick['subject']()} and {pick['object']()} ."

    return [" ".join(sentence() for _ in range(rng.randint(1, 3))) for _ in range(num_lines)]


def load_corpus(cfg: PretrainConfig) -> tuple[list[str], dict]:
    """(lines, description): `corpus` if given, else the GLUE training sentences found, else generated."""
    if cfg.corpus is not None:
        path = Path(cfg.corpus).expanduser()
        if not path.is_file():
            raise UsageError(f"corpus {cfg.corpus!r} is not a file (a text file, one sentence or paragraph a line)")
        try:
            lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError:
            raise UsageError(f"corpus {str(path)!r} is not UTF-8 text") from None
        if not lines:
            raise UsageError(f"corpus {str(path)!r} has no text lines")
        return lines, {"source": "file", "path": str(path)}
    folder = local_data.data_folder("GLUE_DIR", cfg.glue_dir)  # the option, $GLUE_DIR, else data/glue
    if folder is not None:
        glue_dir = str(folder)
        if not folder.is_dir():
            raise UsageError(f"GLUE folder {glue_dir!r} does not exist or is not a folder")
        tasks = [t for t in glue.GLUE_TASKS.values() if (folder / t.folder / "train.tsv").is_file()]
        if not tasks:
            raise UsageError(f"GLUE folder {glue_dir!r} has no training set (looked for "
                             f"{', '.join(t.folder + '/train.tsv' for t in glue.GLUE_TASKS.values())})")
        texts = (text for t in tasks for ex in glue.load_split(t, "train", folder) for text in ex.texts)
        lines = list(dict.fromkeys(text.strip() for text in texts if text.strip()))  # SST-2 repeats phrases
        return lines, {"source": "glue", "path": str(folder), "tasks": [t.name for t in tasks]}
    return generated_corpus(), {"source": "generated"}


def pack_blocks(lines: list[str], tokenizer, max_len: int, chunk_size: int = 4096) -> list[list[int]]:
    """Token ids packed whole-line into blocks `[CLS] a [SEP] b [SEP] ...` of at most max_len (a longer line
    is cut), so there is little padding and attention sees sentence boundaries, as in contiguous text."""
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    blocks, current = [], [cls]
    for start in range(0, len(lines), chunk_size):
        ids = tokenizer(lines[start:start + chunk_size], add_special_tokens=False, truncation=True,
                        max_length=max_len - 2)["input_ids"]
        for tokens in ids:
            if not tokens:
                continue
            if len(current) + len(tokens) + 1 > max_len:
                blocks.append(current)
                current = [cls]
            current += tokens + [sep]
    if len(current) > 1:
        blocks.append(current)
    return blocks


def cached_blocks(lines: list[str], tokenizer, max_len: int) -> list[list[int]]:
    """`pack_blocks`, read from the encoded-data cache when another run packed the same lines with the same
    tokenizer and length (`runtime.feature_cache`), else packed and written there."""
    from course_lib.runtime import feature_cache  # here: a notebook's first cell loads the lesson, not the cache

    what = {"family": "mlm_blocks", "max_len": max_len}
    split = feature_cache.cached(what, lines, tokenizer,
                                 lambda: [{"input_ids": b} for b in pack_blocks(lines, tokenizer, max_len)])
    return [row["input_ids"] for row in split]


def pad_blocks(blocks: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (B, L), padded to the batch's longest block."""
    B, L = len(blocks), max(map(len, blocks))
    input_ids = torch.full((B, L), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    for b, block in enumerate(blocks):
        input_ids[b, :len(block)] = torch.tensor(block)
        attention_mask[b, :len(block)] = 1
    return input_ids, attention_mask


def step_generator(*key: int) -> torch.Generator:
    """A CPU generator seeded from a tuple of ints: masks that depend on (seed, step) only, on every device."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1)[0]))


def mask_tokens(input_ids: torch.Tensor, special_ids: list[int], mask_token_id: int, vocab_size: int,
                mlm_probability: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption (Devlin et al. 2019, Sec. 3.1): (inputs, labels), both (B, L).

    mlm_probability of the tokens are chosen, never special ones or padding; of those 80% become [MASK],
    10% a random token and 10% stay as they are. Labels hold the original id where chosen, IGNORE elsewhere.
    """
    special = torch.isin(input_ids, torch.tensor(special_ids))
    chosen = (torch.rand(input_ids.shape, generator=generator) < mlm_probability) & ~special
    kind = torch.rand(input_ids.shape, generator=generator)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    inputs = torch.where(chosen & (kind < 0.8), mask_token_id, input_ids)
    inputs = torch.where(chosen & (kind >= 0.8) & (kind < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, input_ids, IGNORE)
