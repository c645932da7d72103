"""The token-tagging family: a tag per word, named entities scored by entity (WNUT-17, CoNLL-2003).

Its files are CoNLL, read by `readers/conll.py` (tags always as IOB2).

BERT tags a word on its first sub-word (Devlin et al. 2019, Sec. 5.3): the other sub-words and the special tokens
carry IGNORE_INDEX, so neither the loss nor decoding sees them. Entities are scored as seqeval scores them (exact
span and type, as the CoNLL shared tasks' conlleval does), with token accuracy beside.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from pydantic import Field
from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score

from course_lib.model.heads import IGNORE_INDEX, TokenClassifier
from course_lib.readers.conll import DOCSTART, OUTSIDE, TaggedSentence, check_tag, read_conll, to_iob2
from course_lib.readers.sources import Source, read_split, split_paths
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import atomic_write
from course_lib.runtime.settings import Settings
from course_lib.tasks.batching import pad_tokens

TAGGING = "tagging"
CUSTOM = "custom"  # the name of a run's own files (`--task custom --task-type tagging`)


class TaggingFileOptions(Settings):
    """The label set of a run's own CoNLL files (`--task custom --task-type tagging`); a preset's is fixed."""

    labels: str | None = Field(None, description=
        "custom files: the label set, comma list (None: the training file's; for classification sorted, numbers as "
        "numbers; for tagging O, then B-type and I-type of every type it tags)")


@dataclass(frozen=True)
class TagPrediction:
    """A sentence's predicted tags beside its gold ones; `truncated` counts its last words, cut off by max_len,
    which the model never saw and are predicted O."""

    words: tuple[str, ...]
    gold: tuple[str, ...]
    predicted: tuple[str, ...]
    truncated: int = 0


def entity_tags(types) -> tuple[str, ...]:
    """O, then B-x and I-x for each entity type x, in the order given (the hub datasets' order)."""
    return (OUTSIDE, *(f"{prefix}-{kind}" for kind in types for prefix in "BI"))


@dataclass(frozen=True)
class TaggingTask:
    """A tagging preset: its label set (tag ids index it), where its files are, the files it was bound to."""

    name: str
    label_names: tuple[str, ...]
    source: Source
    family: str = TAGGING
    dev_splits: tuple[str, ...] = ("dev",)
    is_regression: bool = False
    max_len: int = 128
    metrics: tuple[str, ...] = ("f1", "precision", "recall")  # entity level; f1 first, the headline number
    paths: dict = field(default_factory=dict)  # split -> file, None for the hub; set by bind

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    def bind(self, cfg) -> "TaggingTask":
        """The preset for a run: its splits' files (the run's, its folder's, else the hub's), test scored beside
        dev when there is one. --labels is refused: a preset's label set is fixed."""
        if cfg.task_options.labels:
            raise UsageError(f"--labels is not read for tagging task {self.name!r}: its label set is fixed")
        paths = split_paths(self.source, cfg)
        return replace(self, paths=paths, dev_splits=_dev_splits(paths))


def _dev_splits(paths: dict) -> tuple[str, ...]:
    return ("dev", "test") if "test" in paths else ("dev",)


PRESETS = (
    # WNUT-17 (Derczynski et al. 2017): tweets, two columns, IOB2; tag order as the hub's ner_tags.
    TaggingTask("wnut17", entity_tags(("corporation", "creative-work", "group", "location", "person", "product")),
                Source(files={"train": "wnut17train.conll", "dev": "emerging.dev.conll",
                              "test": "emerging.test.annotated"},
                       env="WNUT17_DIR", hub="leondz/wnut_17", labelled_test=True)),
    # CoNLL-2003 (Tjong Kim Sang & De Meulder 2003): four columns, IOB1 in the original files (the hub's are IOB2).
    TaggingTask("conll2003", entity_tags(("PER", "ORG", "LOC", "MISC")),
                Source(files={"train": "train.txt", "dev": "valid.txt", "test": "test.txt"},
                       env="CONLL2003_DIR", hub="eriktks/conll2003", labelled_test=True)),
)


# ----------------------------------------------------------------------------------------------
# Reading


def _from_hub(task: TaggingTask, rows: list[dict]) -> list[TaggedSentence]:
    """The hub's rows ({tokens, ner_tags}, tags as ids in the hub's order, which the preset's label set keeps)."""
    sentences = []
    for row in rows:
        tags = to_iob2(task.label_names[t] if isinstance(t, int) else t for t in row["ner_tags"])
        sentences.append(TaggedSentence(tuple(row["tokens"]), tags, tuple(task.label_names.index(t) for t in tags)))
    return sentences


def read_inputs(task: TaggingTask, path) -> list[TaggedSentence]:
    """A prediction's input: a word per line (its first column; a tag column may be there and is not read), a
    blank line between sentences, as in a CoNLL file."""
    path, sentences, words = Path(path), [], []
    try:
        with open(path, encoding="utf-8") as f:
            for line in [*f, "\n"]:
                fields = line.split()
                if fields and fields[0] != DOCSTART:
                    words.append(fields[0])
                elif words:
                    sentences.append(tuple(words))
                    words = []
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    if not sentences:
        raise UsageError(f"{path}: no sentences (a word per line, a blank line between sentences)")
    outside = task.label_names.index(OUTSIDE)
    return [TaggedSentence(words, (OUTSIDE,) * len(words), (outside,) * len(words)) for words in sentences]


def prediction_rows(task: TaggingTask, outputs: list[torch.Tensor], features: list[dict], examples) -> list[dict]:
    """One row per sentence: its words and a tag per word (O for words past max_len, counted in `truncated`)."""
    rows = []
    for prediction in decode(task, outputs, features):
        row = {"words": list(prediction.words), "tags": list(prediction.predicted)}
        rows.append({**row, "truncated": prediction.truncated} if prediction.truncated else row)
    return rows


def read(task: TaggingTask, split: str, cfg) -> list[TaggedSentence]:
    """A split's sentences: the bound task's file for it, else the hub's copy."""
    return read_split(task, split, lambda path: read_conll(path, task.label_names), lambda rows: _from_hub(task, rows))


def _labels_option(text: str) -> tuple[str, ...]:
    """--labels as a label set: well-formed tags, O among them, B-x and I-x both present for each type."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        check_tag("--labels", name, None)
    missing = [f"{p}-{name[2:]}" for name in names if name != OUTSIDE for p in "BI" if f"{p}-{name[2:]}" not in names]
    if OUTSIDE not in names or missing or len(set(names)) < len(names):
        why = f"{missing[0]!r} is missing" if missing else "O is missing" if OUTSIDE not in names else "a tag repeats"
        raise UsageError(f"--labels {text!r}: {why} (expected O and B-type, I-type for each type, each once)")
    return names


def file_labels(sentences: list[TaggedSentence]) -> tuple[str, ...]:
    """The label set a training file implies: O, then B-x and I-x of every type it tags, sorted (both forms,
    so a dev file may use one the training file happens not to)."""
    types = {tag[2:] for sentence in sentences for tag in sentence.tags if tag != OUTSIDE}
    return (OUTSIDE, *sorted(f"{p}-{kind}" for kind in types for p in "BI"))


def custom(cfg) -> TaggingTask:
    """`--task custom --task-type tagging`: the run's CoNLL files, the label set from --labels (ids in that
    order) else from the training file."""
    source, given = Source(), cfg.task_options.labels  # the run's files only: no folder, no hub
    paths = split_paths(source, cfg)
    labels = _labels_option(given) if given else file_labels(read_conll(paths["train"]))
    return TaggingTask(CUSTOM, labels, source, paths=paths, dev_splits=_dev_splits(paths))


# ----------------------------------------------------------------------------------------------
# Features and batches


def _first_subwords(word_ids: list[int | None], n_words: int) -> list[int]:
    """Each word's first sub-word position, -1 for a word with none in the window: cut off by max_len, or text
    the tokenizer drops (an emoji's variation selector U+FE0F), which is predicted O."""
    first = [-1] * n_words
    for position, word in enumerate(word_ids):
        if word is not None and first[word] < 0:
            first[word] = position
    return first


def encode(examples: list[TaggedSentence], tokenizer, cfg, training: bool = True,
           chunk_size: int = 2048) -> list[dict]:
    """Token ids of each sentence's words (split into sub-words, cut to max_len) and a label per token: the
    word's tag id on its first sub-word, IGNORE_INDEX elsewhere. Evaluation features keep the sentence and
    each word's first sub-word position, for decoding back to words. The fast tokenizer runs on chunks."""
    features = []
    for start in range(0, len(examples), chunk_size):
        chunk = examples[start:start + chunk_size]
        ids = tokenizer([list(s.words) for s in chunk], is_split_into_words=True, truncation=True,
                        max_length=cfg.max_len)
        for i, sentence in enumerate(chunk):
            first = _first_subwords(ids.word_ids(i), len(sentence.words))
            labels = [IGNORE_INDEX] * len(ids["input_ids"][i])
            for word, position in enumerate(first):
                if position >= 0:
                    labels[position] = sentence.tag_ids[word]
            feature = {"input_ids": ids["input_ids"][i], "token_type_ids": ids["token_type_ids"][i],
                       "label": labels}
            if not training:
                cut = len(labels) >= cfg.max_len  # a full window: words after its last one were cut off
                seen = max((w for w, p in enumerate(first) if p >= 0), default=-1)
                feature.update(sentence=sentence, first_subword=first,
                               truncated=len(first) - 1 - seen if cut else 0)
            features.append(feature)
    return features


def collate(features: list[dict], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """A padded batch; labels (B, L), padding labelled IGNORE_INDEX."""
    batch = pad_tokens(features, pad_token_id)
    B, L = batch["input_ids"].shape
    batch["labels"] = torch.full((B, L), IGNORE_INDEX, dtype=torch.long)
    for b, f in enumerate(features):
        batch["labels"][b, :len(f["label"])] = torch.tensor(f["label"], dtype=torch.long)
    return batch


def length(feature: dict) -> int:
    return len(feature["input_ids"])


def plain_head(cfg, encoder, task, tokenizer) -> TokenClassifier:
    """Plain fine-tuning's tagger: dropout and a linear layer on every token (Devlin et al. 2019, Sec. 5.3)."""
    return TokenClassifier(encoder, task.num_labels, cfg.classifier_dropout)


# ----------------------------------------------------------------------------------------------
# Predictions, scores, the predictions file


def decode(task: TaggingTask, outputs: list[torch.Tensor], features: list[dict]) -> list[TagPrediction]:
    """Each sentence's tags: the best tag of each word's first sub-word, O for a word the model did not see.
    The tags are left as the model gives them (an I-x that opens an entity is scored as one, as conlleval
    does)."""
    predictions = []
    for logits, feature in zip(outputs, features):  # logits (L_batch, C): the batch's padding is never read
        best = logits.argmax(-1).tolist()
        first = feature["first_subword"]
        tags = tuple(task.label_names[best[p]] if p >= 0 else OUTSIDE for p in first)
        sentence = feature["sentence"]
        predictions.append(TagPrediction(sentence.words, sentence.tags, tags, feature["truncated"]))
    return predictions


def score(task: TaggingTask, predictions: list[TagPrediction], features: list[dict]) -> tuple[dict, str | None]:
    """Entity-level precision, recall and F1 (seqeval's default mode, as conlleval), token accuracy, and
    `truncated_words` when max_len cut some sentences' last words off (predicted O). The problem line: every
    word got the same tag (all O: no entity predicted at all)."""
    gold = [list(p.gold) for p in predictions]
    predicted = [list(p.predicted) for p in predictions]
    scores = {"f1": f1_score(gold, predicted, zero_division=0),
              "precision": precision_score(gold, predicted, zero_division=0),
              "recall": recall_score(gold, predicted, zero_division=0),
              "accuracy": accuracy_score(gold, predicted)}
    scores = {name: float(value) for name, value in scores.items()}
    truncated = sum(p.truncated for p in predictions)
    if truncated:
        scores["truncated_words"] = truncated
    distinct = {tag for tags in predicted for tag in tags}
    n_words = sum(len(tags) for tags in predicted)
    problem = None
    if n_words > 1 and len(distinct) == 1 and len({tag for tags in gold for tag in tags}) > 1:
        tag = next(iter(distinct))
        problem = f"all {n_words} words are tagged {tag!r}" + (": no entity predicted" if tag == OUTSIDE else "")
    return scores, problem


def write_predictions(path: Path, task: TaggingTask, predictions: list[TagPrediction], scores: dict) -> None:
    """CoNLL layout: `word<TAB>gold<TAB>predicted` per line, a blank line between sentences (conlleval reads
    the last two columns)."""
    buffer = io.StringIO()
    for prediction in predictions:
        for row in zip(prediction.words, prediction.gold, prediction.predicted):
            buffer.write("\t".join(row) + "\n")
        buffer.write("\n")
    atomic_write(path, lambda f: f.write(buffer.getvalue().encode("utf-8")))
