"""Encoded splits cached on disk and shared by every run that encodes the same examples the same way.

A grid fine-tunes one task many times (methods x seeds), and encoding MNLI's 393k pairs takes longer than reading
them. Like run_glue's `datasets.map` cache, an encoded split is written once, as columns of numpy arrays, and every
later run with the same examples, tokenizer, family and length reads it memory-mapped: a run's host memory then
holds no Python object per token. The key is a hash of the data's content (the files a preset names, GLUE's, so a
run that finds its split encoded does not read it; else the examples read), the tokenizer's own definition
(vocabulary, normaliser, special tokens), the family, the task, `max_len` and the family's options, and the source
of the code that reads and encodes (an edited reader or encoder encodes again): a changed file is encoded again,
whatever its path.

A split's features come back as an `EncodedSplit`: a sequence whose rows are the same dicts, with the same Python
types, that the family's `encode` gives. Features that are not plain data (evaluation features keep the example
they decode against) are not cached: they are returned as encoded. An entry is raw arrays of the types its
split.json names, memory-mapped, with object types refused: a cache folder, like a run folder, cannot run code.

Where: $ATTENTION_LAB_CACHE, else $XDG_CACHE_HOME/attention-lab, else ~/.cache/attention-lab; `python -m
course_lib cache` lists it and `--clear` empties it.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import Field

from course_lib.runtime.command_line import add_fields, parsed
from course_lib.runtime.errors import Parser, UsageError, report_errors
from course_lib.runtime.settings import Settings

CACHE_ENV = "ATTENTION_LAB_CACHE"
ENCODERS = ("readers", "tasks", "training/mlm_data.py", "model/pair_heads.py", "runtime/feature_cache.py")  # the
#   code that reads, encodes and stores data: an entry keyed on a data file's content is only as good as it
SCALARS = {int: "int", float: "float", str: "str"}


def cache_root() -> Path:
    """The folder every run's encoded splits go to (made on first use)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser() / "features"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "attention-lab" / "features"


class EncodedSplit(Sequence):
    """Features as columns: `columns[name]` is (kind, arrays), n rows; row i is rebuilt as the dict encode gave.

    Kinds: int, float (a scalar per row: `values`); str, ints and tuple (a string, list or tuple of ints per row:
    row i is values[ends[i - 1]:ends[i]]); int_lists (a list of lists of ints per row, multiple choice's pairs:
    row i is lists ends[i - 1] to ends[i], list j is flat[list_ends[j - 1]:list_ends[j]]).
    """

    def __init__(self, columns: dict[str, tuple[str, dict[str, np.ndarray]]], n: int):
        self.columns, self.n = columns, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.n))]
        if not -self.n <= index < self.n:
            raise IndexError(f"row {index} of {self.n}")
        i = index % self.n
        return {name: _cell(kind, arrays, i) for name, (kind, arrays) in self.columns.items()}


def _span(ends: np.ndarray, i: int) -> tuple[int, int]:
    return (int(ends[i - 1]) if i else 0), int(ends[i])


def _cell(kind: str, arrays: dict[str, np.ndarray], i: int):
    if kind == "int":
        return int(arrays["values"][i])
    if kind == "float":
        return float(arrays["values"][i])
    start, end = _span(arrays["ends"], i)
    if kind == "int_lists":
        list_ends, flat = arrays["list_ends"], arrays["flat"]
        return [flat[slice(*_span(list_ends, j))].tolist() for j in range(start, end)]
    part = arrays["values"][start:end]
    if kind == "str":
        return part.tobytes().decode("utf-8")
    return part.tolist() if kind == "ints" else tuple(part.tolist())


def ragged(rows: list, dtype=None) -> dict[str, np.ndarray]:
    """A list of ints per row as one flat array and where each row ends; dtype None: the smallest that holds
    every value (uint16 holds BERT's 30,522 token ids; labels may be negative)."""
    ends = np.cumsum(np.fromiter(map(len, rows), np.int64, len(rows)))
    values = np.fromiter(itertools.chain.from_iterable(rows), dtype or np.int64, int(ends[-1]) if len(rows) else 0)
    if dtype is None:
        values = values.astype(smallest_dtype(values))
    return {"values": values, "ends": ends}


def smallest_dtype(values: np.ndarray):
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    for dtype in (np.uint16, np.int16, np.int32):
        if np.iinfo(dtype).min <= low and high <= np.iinfo(dtype).max:
            return dtype
    return np.int64


def column(values: list) -> tuple[str, dict[str, np.ndarray]] | None:
    """One feature key's values as a column, or None when they are not plain data of one kind."""
    types = set(map(type, values))
    if len(types) != 1:
        return None
    kind = types.pop()
    if kind in (int, float):
        return SCALARS[kind], {"values": np.array(values, np.int64 if kind is int else np.float64)}
    if kind is str:
        encoded = [v.encode("utf-8") for v in values]
        return "str", {"values": np.frombuffer(b"".join(encoded), np.uint8),
                       "ends": np.cumsum(np.fromiter(map(len, encoded), np.int64, len(values)))}
    if kind not in (list, tuple):
        return None
    inner = set(map(type, itertools.chain.from_iterable(values)))
    if inner <= {int}:
        return ("ints" if kind is list else "tuple"), ragged(values)
    if kind is list and inner == {list}:
        lists = list(itertools.chain.from_iterable(values))
        if set(map(type, itertools.chain.from_iterable(lists))) <= {int}:
            flat = ragged(lists)
            return "int_lists", {"ends": np.cumsum([len(v) for v in values], dtype=np.int64),
                                 "list_ends": flat["ends"], "flat": flat["values"]}
    return None


def to_columns(features: list[dict]) -> EncodedSplit | None:
    """The features as an EncodedSplit held in memory, or None when some are not plain data (their keys
    differ, or a value is an object, None or of mixed types)."""
    if not features or any(f.keys() != features[0].keys() for f in features):
        return None
    columns = {name: column([f[name] for f in features]) for name in features[0]}
    return None if None in columns.values() else EncodedSplit(columns, len(features))


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> its fingerprint


def tokenizer_fingerprint(tokenizer) -> str | None:
    """A hash of what the tokenizer computes (a fast tokenizer's definition: vocabulary, normaliser, pre- and
    post-processing), leaving out the truncation and padding a call sets; None for a slow tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    if tokenizer not in _FINGERPRINTS:
        _FINGERPRINTS[tokenizer] = _definition_hash(tokenizer, backend)
    return _FINGERPRINTS[tokenizer]


def _definition_hash(tokenizer, backend) -> str:
    import tokenizers

    definition = json.loads(backend.to_str())
    definition.pop("truncation", None), definition.pop("padding", None)
    text = json.dumps({"definition": definition, "tokenizers": tokenizers.__version__,
                       "class": type(tokenizer).__name__, "truncation_side": tokenizer.truncation_side},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@functools.cache
def encoders_fingerprint() -> str:
    """A hash of the source of every reader and encoder (the task families', pre-training's blocks, separately
    encoded pairs): an edit to any of them encodes again, with no version number to remember to raise."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for place in ENCODERS:
        for path in sorted((package / place).rglob("*.py")) if (package / place).is_dir() else [package / place]:
            digest.update(path.relative_to(package).as_posix().encode() + b"\x00" + path.read_bytes())
    return digest.hexdigest()


def file_fingerprint(path: Path) -> str:
    """A hash of a data file's bytes (MNLI's 47 MB training file: about 0.1 s)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def split_key(what: dict, examples: list, tokenizer) -> str | None:
    """The cache entry of one encoded split: `what` (family, task, length, options, training or not), the
    tokenizer and every example's content (its repr: every field of the reader's dataclass)."""
    fingerprint = tokenizer_fingerprint(tokenizer)
    if fingerprint is None:
        return None
    digest = hashlib.sha256(json.dumps({**what, "tokenizer": fingerprint, "encoders": encoders_fingerprint()},
                                       sort_keys=True, default=str).encode())
    for example in examples:
        digest.update(repr(example).encode())
        digest.update(b"\x00")
    return digest.hexdigest()


PARTS = {"int": ("values",), "float": ("values",), "str": ("values", "ends"), "ints": ("values", "ends"),
         "tuple": ("values", "ends"), "int_lists": ("flat", "list_ends", "ends")}
INDEXES = {("ends", "int_lists"): "list_ends", ("list_ends", "int_lists"): "flat"}  # else ends index values


def write_split(folder: Path, chunks) -> None:
    """Append consecutive chunks of rows (EncodedSplits) to one entry's raw arrays, so a large split is never
    whole in memory, and put the entry in place whole or not at all: written in a temporary folder beside it,
    then renamed, so two runs encoding the same split at once both end with one complete entry."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    meta, written = {"rows": 0, "columns": {}}, {}  # written: (column, part) -> elements so far
    try:
        for chunk in chunks:
            before = dict(written)
            for name, (kind, arrays) in chunk.columns.items():
                spec = meta["columns"].setdefault(name, {"kind": kind, "dtypes": {
                    part: arrays[part].dtype.str for part in PARTS[kind]}})
                if spec["kind"] != kind:
                    raise ValueError(f"column {name!r} is {spec['kind']} in one chunk and {kind} in another")
                for part in PARTS[kind]:
                    array = arrays[part].astype(spec["dtypes"][part], casting="same_kind", copy=False)
                    if part in ("ends", "list_ends"):  # positions in this chunk -> positions in the entry
                        array = array + before.get((name, INDEXES.get((part, kind), "values")), 0)
                    with open(temporary / f"{name}.{part}", "ab") as f:
                        f.write(np.ascontiguousarray(array).tobytes())
                    written[(name, part)] = written.get((name, part), 0) + len(array)
            meta["rows"] += chunk.n
        meta["sizes"] = {f"{name}.{part}": count for (name, part), count in written.items()}
        (temporary / "split.json").write_text(json.dumps(meta))
        _put_in_place(temporary, folder)
    except OSError as err:
        raise UsageError(f"cannot write the encoded-data cache in {str(folder.parent)!r} ({err.strerror}): set "
                         f"${CACHE_ENV} to a writable folder") from None
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _put_in_place(temporary: Path, folder: Path) -> None:
    try:
        os.rename(temporary, folder)
    except OSError:
        if read_split(folder) is None:  # not another run's complete entry, written meanwhile
            raise


def read_split(folder: Path) -> EncodedSplit | None:
    """An entry memory-mapped (raw arrays of the types split.json names: nothing is unpickled), or None when it
    is missing, incomplete or unreadable (encoded again then)."""
    try:
        meta = json.loads((folder / "split.json").read_text())
        columns = {name: (spec["kind"], {part: _mapped(folder / f"{name}.{part}", spec["dtypes"][part],
                                                       meta["sizes"][f"{name}.{part}"])
                                         for part in PARTS[spec["kind"]]})
                   for name, spec in meta["columns"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return EncodedSplit(columns, int(meta["rows"]))


def _mapped(path: Path, dtype: str, count: int) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.hasobject or path.stat().st_size != count * dtype.itemsize:
        raise ValueError(f"{path} is not {count} values of {dtype}")
    return np.memmap(path, dtype, mode="r", shape=(count,)) if count else np.zeros(0, dtype)


def cached(what: dict, examples: list, tokenizer, encode, encode_chunks=None):
    """The split's features: read from the cache when this exact encoding was written before, else encoded
    (by `encode_chunks` straight into columns, a chunk of rows at a time, when the family has it and it does
    not return None; else by `encode`, then converted) and written for the next run. Features that are not plain data are returned as
    `encode` gave them, uncached."""
    key = split_key(what, examples, tokenizer)
    if key is None:
        return encode()
    folder = cache_root() / key[:2] / key
    hit = read_split(folder)
    if hit is not None:
        return hit
    shutil.rmtree(folder, ignore_errors=True)  # an entry damaged outside this library: written again
    chunks = encode_chunks() if encode_chunks is not None else None
    if chunks is None:
        features = encode()
        split = to_columns(features)
        if split is None:
            return features
        chunks = [split]
    write_split(folder, chunks)
    written = read_split(folder)
    if written is None:
        raise UsageError(f"the encoded-data cache entry {str(folder)!r} did not read back after it was written: "
                         f"set ${CACHE_ENV} to another folder")
    return written


def entries(root: Path | None = None) -> list[Path]:
    """Every complete entry of the cache."""
    root = root or cache_root()
    return sorted(p.parent for p in root.glob("*/*/split.json"))


def clear(root: Path | None = None) -> tuple[int, int]:
    """Delete every entry (and half-written ones); returns (entries, bytes) removed."""
    root = root or cache_root()
    found = entries(root)
    size = sum(f.stat().st_size for e in found for f in e.iterdir())
    if root.is_dir():
        shutil.rmtree(root)
    return len(found), size


class CacheOptions(Settings):
    """`python -m course_lib cache`'s options."""

    clear: bool = Field(False, description="delete every encoded split: runs encode again")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m course_lib cache",
                    description=f"the encoded-data cache every run shares (${CACHE_ENV} sets its folder)")
    add_fields(parser, CacheOptions, words=True)

    def body() -> int:
        args, root = parsed(parser.parse_strict(argv), CacheOptions), cache_root()
        if args.clear:
            count, size = clear(root)
            print(f"removed {count} encoded splits ({size / 1e6:.1f} MB) from {root}")
        else:
            found = entries(root)
            size = sum(f.stat().st_size for e in found for f in e.iterdir())
            print(f"{root}: {len(found)} encoded splits, {size / 1e6:.1f} MB (--clear empties it)")
        return 0
    return report_errors(body, "nothing was removed")
