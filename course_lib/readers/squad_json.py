"""SQuAD's files: reading and checking a SQuAD JSON file (v1.1 or v2.0 layout), cutting one by article, and where a
split comes from (a file, `SQUAD_DIR`, the repository's data/squad, else the hub), each version's files
(`SquadVersion`) and the questions they hold (`QAExample`); what is done with them (windows, decoding, the official
scores) is `tasks/squad.py`.

Only the dev file of SQuAD v1.1 may be at hand offline. `write_article_split` cuts it by article (e.g. the first 38
articles to train, the last 10 to evaluate) so that no paragraph is seen on both sides; say which split you used
next to every number.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from course_lib.readers import local_data
from course_lib.runtime.errors import UsageError, choice_error
from course_lib.runtime.repro import atomic_write

@dataclass(frozen=True)
class SquadVersion:
    """Where one SQuAD version's data lives: its hub dataset and its official file names."""

    name: str  # 'v1.1'
    hub_id: str  # Hugging Face hub dataset id (splits 'train' and 'validation')
    train_file: str  # official file names, looked up in $SQUAD_DIR
    dev_file: str
    has_impossible: bool  # v2.0 adds questions without an answer in the paragraph


SQUAD_VERSIONS = {
    "v1.1": SquadVersion("v1.1", "rajpurkar/squad", "train-v1.1.json", "dev-v1.1.json", False),
    "v2.0": SquadVersion("v2.0", "rajpurkar/squad_v2", "train-v2.0.json", "dev-v2.0.json", True),
}


def get_version(name: str) -> SquadVersion:
    """A version by name, with or without the 'v' ('v1.1', '1.1', 'v2.0', '2.0')."""
    key = "v" + str(name).lower().removeprefix("v")
    if key not in SQUAD_VERSIONS:
        raise choice_error("SQuAD version", name, SQUAD_VERSIONS)
    return SQUAD_VERSIONS[key]


@dataclass
class QAExample:
    """One question with its paragraph. `answers[i]` starts at character `answer_starts[i]` of `context`;
    v1.1's dev questions have up to five gold answers (crowd workers'), v2.0's impossible ones none."""

    id: str
    title: str  # the article's title; consecutive questions with one title are one article
    context: str
    question: str
    answers: list[str]
    answer_starts: list[int]
    is_impossible: bool = False


SPLITS = {"train": "train", "validation": "validation", "dev": "validation"}  # 'dev' is the official files' name


def _split_name(split: str) -> str:
    if split not in SPLITS:
        raise choice_error("SQuAD split", split, SPLITS)
    return SPLITS[split]


# ----------------------------------------------------------------------------------------------
# Reading and checking a SQuAD JSON file


def read_squad(path: str | os.PathLike, answered: bool = True) -> list[QAExample]:
    """The questions of a SQuAD JSON file (v1.1 or v2.0 layout), in file order.

    The file is checked as it is read, and the first problem is one line naming the file and the position
    (data[3].paragraphs[2].qas[5]): a bad answer offset otherwise becomes a wrong training label, silently.
    answered False: questions to predict, which may come without answers.
    """
    return _examples_from(_read_json(path), path, answered)


def _read_json(path: str | os.PathLike):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read it ({err.strerror})") from None


def _describe(value) -> str:
    if isinstance(value, dict):
        return f"an object with keys {', '.join(map(repr, list(value)[:6])) or 'none'}"
    return f"a JSON {type(value).__name__}"


def _articles(doc, path) -> list[dict]:
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise UsageError(f"{path}: not SQuAD JSON: expected an object with a 'data' list of articles "
                         f"(found {_describe(doc)})")
    for a, article in enumerate(doc["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise UsageError(f"{path}: data[{a}]: not a SQuAD article: expected a 'paragraphs' list "
                             f"(found {_describe(article)})")
    return doc["data"]


def _examples_from(doc, path, answered: bool = True) -> list[QAExample]:
    examples, seen = [], {}  # seen: question id -> where it first appeared
    for a, article in enumerate(_articles(doc, path)):
        title = str(article.get("title", ""))
        for p, paragraph in enumerate(article["paragraphs"]):
            where = f"data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
                raise UsageError(f"{path}: {where}: a paragraph needs a 'context' text (found {_describe(paragraph)})")
            if not isinstance(paragraph.get("qas"), list):
                raise UsageError(f"{path}: {where}: a paragraph needs a 'qas' list of questions")
            for q, qa in enumerate(paragraph["qas"]):
                examples.append(_read_question(qa, paragraph["context"], title, path, f"{where}.qas[{q}]", seen,
                                               answered))
    if not examples:
        raise UsageError(f"{path}: no questions in {len(doc['data'])} articles")
    return examples


def _read_question(qa, context: str, title: str, path, where: str, seen: dict,
                   answered: bool = True) -> QAExample:
    """One question object, checked: id present and unique, a question text, answers consistent with
    is_impossible (answerable questions need at least one, impossible ones have none)."""
    if not isinstance(qa, dict):
        raise UsageError(f"{path}: {where}: expected a question object (found {_describe(qa)})")
    qid = qa.get("id")
    if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
        raise UsageError(f"{path}: {where}: question has no 'id' (found {qid!r})")
    qid = str(qid)
    if qid in seen:
        raise UsageError(f"{path}: {where}: duplicate id {qid!r} (first at {seen[qid]})")
    seen[qid] = where
    if not isinstance(qa.get("question"), str) or not qa["question"].strip():
        raise UsageError(f"{path}: {where}: question {qid!r} has no 'question' text")
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        raise UsageError(f"{path}: {where}: is_impossible must be true or false, found {impossible!r}")
    texts, starts = _read_answers(qa.get("answers", []), context, path, where)
    if impossible and texts:
        raise UsageError(f"{path}: {where}: question {qid!r} is marked is_impossible but has {len(texts)} answers")
    if not impossible and not texts and answered:
        raise UsageError(f"{path}: {where}: question {qid!r} has no answers and is not marked is_impossible")
    return QAExample(qid, title, context, qa["question"], texts, starts, impossible)


def _read_answers(answers, context: str, path, where: str) -> tuple[list[str], list[int]]:
    if not isinstance(answers, list):
        raise UsageError(f"{path}: {where}: 'answers' must be a list (found {_describe(answers)})")
    texts, starts = [], []
    for k, answer in enumerate(answers):
        at = f"{path}: {where}.answers[{k}]"
        text = answer.get("text") if isinstance(answer, dict) else None
        start = answer.get("answer_start") if isinstance(answer, dict) else None
        if not isinstance(text, str) or not text:
            raise UsageError(f"{at}: an answer needs a non-empty 'text' (found {_describe(answer)})")
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise UsageError(f"{at}: answer_start {start!r} is not a character offset (a whole number >= 0)")
        there = context[start:start + len(text)]
        if there != text:
            raise UsageError(f"{at}: answer_start {start} does not point at the answer text {text!r} "
                             f"(the context there reads {there!r})")
        texts.append(text)
        starts.append(start)
    return texts, starts


# ----------------------------------------------------------------------------------------------
# Article splits (the CPU protocol: train on the dev file's first articles, evaluate on the rest)


def _article_runs(examples: list[QAExample]) -> list[tuple[int, int]]:
    """(first, end) example indices of each article: a run of consecutive examples with one title."""
    runs = []
    for i, ex in enumerate(examples):
        if i == 0 or ex.title != examples[i - 1].title:
            runs.append([i, i + 1])
        else:
            runs[-1][1] = i + 1
    return [tuple(run) for run in runs]


def _check_first_n(first_n: int, n_articles: int, what: str) -> None:
    if not isinstance(first_n, int) or not 0 < first_n < n_articles:
        raise UsageError(f"first_n {first_n!r} must leave articles on both sides: {what} has {n_articles} "
                         f"articles (valid: 1 to {n_articles - 1})")


def split_by_article(examples: list[QAExample], first_n: int) -> tuple[list[QAExample], list[QAExample]]:
    """(the questions of the first `first_n` articles, the rest), in order: no paragraph lands on both sides,
    which a split by question would allow (questions of one paragraph are near-duplicates in what they test)."""
    runs = _article_runs(examples)
    _check_first_n(first_n, len(runs), "the examples")
    cut = runs[first_n][0]
    return examples[:cut], examples[cut:]


def write_article_split(path: str | os.PathLike, first_n: int, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Write a SQuAD file's first `first_n` articles and the rest as two SQuAD JSON files in `out_dir`
    (named `<stem>-first<N>.json` and `<stem>-after<N>.json`), so that the usual file options read them.

    The file is checked first, as `read_squad` does; each half is written atomically.
    """
    doc = _read_json(path)
    _examples_from(doc, path)
    articles = doc["data"]
    _check_first_n(first_n, len(articles), str(path))
    stem, out = Path(path).stem, Path(out_dir)
    halves = ((out / f"{stem}-first{first_n}.json", articles[:first_n]),
              (out / f"{stem}-after{first_n}.json", articles[first_n:]))
    for half_path, half in halves:
        text = json.dumps({"version": doc.get("version", ""), "data": half}, ensure_ascii=False)
        atomic_write(half_path, lambda f, text=text: f.write(text.encode("utf-8")))
    return halves[0][0], halves[1][0]


def dev_article_split(out_dir: str | os.PathLike, first_n: int = 38) -> tuple[Path, Path] | None:
    """The offline protocol's two files from dev-v1.1.json ($SQUAD_DIR's, else the repository's data/squad): its
    first 38 articles to train on and the last 10 to evaluate on (no paragraph in both); None without that file."""
    folder = local_data.data_folder("SQUAD_DIR")
    source = folder / SQUAD_VERSIONS["v1.1"].dev_file if folder else None
    if source is None or not source.is_file():
        return None
    return write_article_split(source, first_n, out_dir)


# ----------------------------------------------------------------------------------------------
# Loading a split: a file, else $SQUAD_DIR, else the repository's data/squad, else the hub


def load_squad(version: str, split: str, files: dict | None = None,
               data_dir: str | os.PathLike | None = None) -> list[QAExample]:
    """One split's questions: from `files[split]` (a path), else the official file name in `data_dir` or
    $SQUAD_DIR, else the repository's data/squad (the v1.1 dev file), else (when online) the hub dataset
    (`rajpurkar/squad`, `rajpurkar/squad_v2`).

    A local file wins so that offline machines never touch the network; with HF_DATASETS_OFFLINE=1 (or
    HF_HUB_OFFLINE=1) the hub is not tried at all, and the error says how to provide the data.
    Splits are 'train' and 'validation' ('dev' means validation).
    """
    spec, split = get_version(version), _split_name(split)
    chosen = {}
    for key, value in (files or {}).items():
        chosen[_split_name(key)] = value
    if chosen.get(split):
        return read_squad(chosen[split])
    where, path = local_data.locate("SQUAD_DIR", data_dir, _official_name(spec, split))
    if where != "hub":
        return read_squad(_file_in(path, spec, split) if where == "chosen" else path)
    if _offline():
        raise UsageError(f"no SQuAD {spec.name} {split} file and the hub is off (HF_DATASETS_OFFLINE or "
                         f"HF_HUB_OFFLINE): {_how_to_get(spec, split)}")
    return _load_from_hub(spec, split)


def _official_name(spec: SquadVersion, split: str) -> str:
    return spec.train_file if split == "train" else spec.dev_file


def _how_to_get(spec: SquadVersion, split: str) -> str:
    return (f"pass the {split} file itself, set SQUAD_DIR to a folder that holds {_official_name(spec, split)}, "
            f"or go online (hub dataset {spec.hub_id})")


def _file_in(folder: Path, spec: SquadVersion, split: str) -> Path:
    if not folder.is_dir():
        raise UsageError(f"SQuAD folder {str(folder)!r} does not exist or is not a folder")
    path = folder / _official_name(spec, split)
    if not path.is_file():
        found = sorted(p.name for p in folder.glob("*.json"))
        hint = " (write_article_split cuts a dev file by article)" if split == "train" else ""
        raise UsageError(f"missing {str(path)!r} (JSON files there: {', '.join(found) or 'none'}): "
                         f"pass the {split} file itself{hint}, or point SQUAD_DIR at a folder that has it")
    return path


def _offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}
               for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def _load_from_hub(spec: SquadVersion, split: str) -> list[QAExample]:
    """The hub's copy: one row per question, answers as {'text': [...], 'answer_start': [...]}; v2.0's
    impossible questions are the rows with no answer."""
    try:
        import datasets  # imported here: slow to import and only needed without a local file

        table = datasets.load_dataset(spec.hub_id, split=split)
        columns = [list(table[c]) for c in ("id", "title", "context", "question", "answers")]
    except Exception as err:  # offline, no cache, hub changes: all mean "give me a file"
        raise UsageError(f"could not load SQuAD {spec.name} {split} from the hub ({type(err).__name__}): "
                         f"{_how_to_get(spec, split)}") from err
    return [QAExample(str(qid), title, context, question, list(answers["text"]),
                      [int(s) for s in answers["answer_start"]], spec.has_impossible and not answers["text"])
            for qid, title, context, question, answers in zip(*columns)]
