"""Learnable data in the CS224N default project's file layout, written by the tests (the course's data is never
shipped): sentiment is the number of GOOD minus BAD words, a pair is a paraphrase when both sentences carry the
same polarity, and similar (4.5) when they do, dissimilar (0.5) when not."""
import random

from sentiment_words import BAD, FILLER, GOOD


def _sentence(rng: random.Random, good: int, bad: int) -> str:
    words = rng.sample(FILLER, 5) + rng.sample(GOOD, good) + rng.sample(BAD, bad)
    rng.shuffle(words)
    return " ".join(words) + "."


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if '"' in text or "," in text else text


def _write(path, header: list[str], rows: list[list[str]]) -> None:
    lines = ["\t" + "\t".join(header)] + [f"{i}\t" + "\t".join(_quoted(f) for f in row) for i, row in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


SENTIMENT = {0: (0, 2), 1: (0, 1), 2: (0, 0), 3: (1, 0), 4: (2, 0)}  # class -> (GOOD words, BAD words)


def learnable_course_folder(root, n_train: int = 240, n_dev: int = 80, seed: int = 0):
    """ids-sst-, quora- and sts-{train,dev,test-student}.csv in the course's layout, with learnable labels."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_dev), ("test-student", n_dev // 2)):
        labelled = split != "test-student"
        sst = []
        for i in range(n):
            label = rng.randrange(5)
            sst.append([f"sst-{split}-{i}", _sentence(rng, *SENTIMENT[label])] + ([str(label)] if labelled else []))
        quora, sts = [], []
        for i in range(n):
            a, b = rng.random() < 0.5, rng.random() < 0.5  # each sentence good (True) or bad
            pair = [_sentence(rng, int(a), int(not a)), _sentence(rng, int(b), int(not b))]
            quora.append([f"q-{split}-{i}", *pair] + (["1.0" if a == b else "0.0"] if labelled else []))
            score = (4.5 if a == b else 0.5) + rng.uniform(-0.4, 0.4)
            sts.append([f"s-{split}-{i}", *pair] + ([f"{score:.2f}"] if labelled else []))
        for stem, columns, rows in (("ids-sst", ["sentence", "sentiment"], sst),
                                    ("quora", ["sentence1", "sentence2", "is_duplicate"], quora),
                                    ("sts", ["sentence1", "sentence2", "similarity"], sts)):
            _write(root / f"{stem}-{split}.csv", ["id"] + (columns if labelled else columns[:-1]), rows)
    return root
