"""The encoded-data cache: a split read back from it is the split the family encodes, row for row and type for
type; the same examples encoded the same way are read, never encoded again; a changed data file is encoded again;
a damaged or planted entry is encoded again and nothing in it runs; a run gives the same numbers cold and warm."""
import json
import os
import pickle
import shutil

import numpy as np
import pytest

from course_lib.readers.choice_files import ChoiceQuestion
from course_lib.model.model_folder import load_tokenizer
from course_lib import cli
from course_lib.runtime import feature_cache
from course_lib.runtime.feature_cache import EncodedSplit
from course_lib.tasks import batching, multiple_choice, sentence
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import encode_split, split_features
from course_lib.training.run import resolve


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return load_tokenizer(minilm_dir)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache of this test's own, and a count of the entries written."""
    monkeypatch.setenv(feature_cache.CACHE_ENV, str(tmp_path / "cache"))
    writes = []
    real = feature_cache.write_split
    monkeypatch.setattr(feature_cache, "write_split", lambda folder, split: (writes.append(folder),
                                                                             real(folder, split)))
    return writes


def typed(rows) -> list:
    """Rows with each value's type beside it: 1 and 1.0 compare equal, and a collate tells them apart."""
    return [{k: (type(v), v) for k, v in row.items()} for row in rows]


@pytest.mark.parametrize("task, split, training, max_len", [
    ("sst2", "train", True, 64), ("rte", "dev", False, 128), ("stsb", "train", True, 128),
    ("wnut17", "train", True, 64), ("squad_articles", "train", True, 256)])
def test_a_cached_split_is_the_encoded_split_row_for_row(task, split, training, max_len, tokenizer, cache):
    cfg = FinetuneConfig(task=task, max_len=max_len)
    run = resolve(cfg)
    examples = batching.subsample(run.family.read(run.task, split, cfg), 300, 0)
    features = run.family.encode(examples, tokenizer, cfg, training)
    cold = encode_split(run, examples, tokenizer, training)
    warm = encode_split(run, examples, tokenizer, training)
    assert isinstance(cold, EncodedSplit) and isinstance(warm, EncodedSplit) and len(cache) == 1
    assert typed(cold) == typed(features) and typed(warm) == typed(features)


def test_evaluation_features_that_hold_objects_are_not_cached(tokenizer, cache):
    cfg = FinetuneConfig(task="wnut17", max_len=64)
    run = resolve(cfg)
    examples = run.family.read(run.task, "dev", cfg)[:50]
    features = encode_split(run, examples, tokenizer, training=False)  # each keeps its sentence, for decoding
    assert isinstance(features, list) and "sentence" in features[0] and cache == []


def test_chunks_written_one_by_one_read_back_as_one_dict_per_example(tokenizer, cache):
    cfg = FinetuneConfig(task="rte", max_len=40)
    run = resolve(cfg)
    pairs = run.family.read(run.task, "dev", cfg)[:50]
    chunks = list(sentence.encode_chunks(pairs, tokenizer, 40, chunk_size=7))
    assert [c.n for c in chunks] == [7] * 7 + [1] and chunks[0].columns["input_ids"][1]["values"].dtype == np.uint16
    columns = feature_cache.cached({"test": 1}, pairs, tokenizer, None, lambda: iter(chunks))
    assert typed(columns) == typed(sentence.encode_examples(pairs, tokenizer, 40))
    assert columns[-1] == columns[49] and columns[3:5] == [columns[3], columns[4]]
    with pytest.raises(IndexError):
        columns[50]


def test_multiple_choice_features_round_trip_through_columns(tokenizer, tmp_path):
    """A list of token-id lists per row (one per choice), with DREAM's layout but made here (DREAM is not
    shipped)."""
    questions = [ChoiceQuestion(f"q{i}", "W: where is the bank? M: across the street " * (i % 3 + 1),
                                "Where is the bank?", ("across the street", "next door", f"{i} miles away"), i % 3)
                 for i in range(20)]
    features = multiple_choice.encode(questions, tokenizer, FinetuneConfig(task="dream", max_len=48), training=True)
    split = feature_cache.to_columns(features)
    assert split.columns["input_ids"][0] == "int_lists" and typed(split) == typed(features)
    halves = [feature_cache.to_columns(features[:7]), feature_cache.to_columns(features[7:])]  # appended: shifted
    feature_cache.write_split(tmp_path / "entry", halves)
    assert typed(feature_cache.read_split(tmp_path / "entry")) == typed(features)


@pytest.mark.parametrize("preset", ["sst2", "custom"])
def test_a_split_encoded_before_is_read_back_and_a_changed_file_is_encoded_again(preset, tokenizer, cache,
                                                                                  glue_dir, tmp_path):
    """GLUE's preset names its file, so a split found in the cache is not even read; a run's own files (custom)
    are read, and keyed on what was read. Either way an edited row is encoded again."""
    mine = tmp_path / "glue"
    shutil.copytree(glue_dir / "SST-2", mine / "SST-2")
    train = mine / "SST-2" / "train.tsv"
    train.write_text("".join(train.read_text().splitlines(keepends=True)[:201]))
    files = {"train_file": str(train), "validation_file": str(mine / "SST-2" / "dev.tsv"), "task_type":
             "classification", "text_columns": "sentence", "label_column": "label", "labels": "1,0"}
    cfg = FinetuneConfig.from_dict({"task": preset, "max_len": 64,
                                    **({"glue_dir": str(mine)} if preset == "sst2" else files)})

    def encoded():
        seconds = {"read": 0.0}
        features = list(split_features(resolve(cfg), "train", tokenizer, True, seconds))
        return features, seconds["read"] > 0

    first, read = encoded()
    assert read and len(cache) == 1
    again, read = encoded()
    assert again == first and len(cache) == 1 and read == (preset == "custom")  # GLUE's: not read at all
    lines = train.read_text().splitlines(keepends=True)
    lines[5] = "a wholly different sentence\t0\n"
    train.write_text("".join(lines))
    changed, read = encoded()
    assert read and len(cache) == 2 and changed[4] != first[4] and changed[:4] == first[:4]
    assert changed[4]["input_ids"] == sentence.encode_examples([sentence.Example(("a wholly different sentence",), 0)],
                                                               tokenizer, 64)[0]["input_ids"]


class Planted:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_damaged_or_planted_entry_is_encoded_again_and_never_unpickled(tokenizer, cache, tmp_path):
    cfg = FinetuneConfig(task="sst2", max_len=64)
    run = resolve(cfg)
    examples = run.family.read(run.task, "dev", cfg)[:40]
    expected = typed(run.family.encode(examples, tokenizer, cfg, False))
    encode_split(run, examples, tokenizer, False)
    entry = feature_cache.entries()[0]
    marker = tmp_path / "PAYLOAD_RAN"
    meta = json.loads((entry / "split.json").read_text())
    meta["columns"]["label"]["dtypes"]["values"] = "|O"  # an object array: numpy would unpickle it
    (entry / "split.json").write_text(json.dumps(meta))
    (entry / "label.values").write_bytes(pickle.dumps(np.array([Planted(marker)] * 40, dtype=object)))
    assert typed(encode_split(run, examples, tokenizer, False)) == expected and not marker.exists()
    assert len(cache) == 2  # refused, so written again
    (entry / "input_ids.ends").write_bytes(b"cut short")
    assert typed(encode_split(run, examples, tokenizer, False)) == expected and len(cache) == 3


def test_a_run_ends_the_same_from_a_cold_and_a_warm_cache(tiny_model_dir, keyword_glue, tmp_path, cache, capsys):
    def run(out):
        args = ["finetune", "--task", "sst2", "--method", "ssa-co", "--model", str(tiny_model_dir), "--glue-dir",
                str(keyword_glue), "--output-dir", str(out), "--epochs", "2", "--batch-size", "16", "--max-len", "32",
                "--lr", "1e-3"]
        assert cli.main(args) == 0
        result = json.loads((out / "metrics.json").read_text())
        result.pop("timing"), result["config"].pop("output_dir")
        return {**result, "history": [{k: v for k, v in e.items() if k != "label_seconds"} for e in result["history"]]}

    cold = run(tmp_path / "cold")
    written = len(cache)
    assert written == 2  # the training set and the dev set
    assert run(tmp_path / "warm") == cold and len(cache) == written


def test_the_cache_command_lists_and_clears(tokenizer, cache, capsys):
    cfg = FinetuneConfig(task="sst2", max_len=64)
    run = resolve(cfg)
    encode_split(run, run.family.read(run.task, "dev", cfg)[:30], tokenizer, False)
    root = feature_cache.cache_root()
    capsys.readouterr()
    assert cli.main(["cache"]) == 0
    assert capsys.readouterr().out.startswith(f"{root}: 1 encoded splits, ")
    assert cli.main(["cache", "--clear"]) == 0
    assert capsys.readouterr().out.startswith("removed 1 encoded splits (") and not root.exists()


def test_pretraining_blocks_come_back_as_packed(tokenizer, cache, sentences):
    from course_lib.training.mlm_data import cached_blocks, pack_blocks
    blocks = pack_blocks(sentences, tokenizer, 48)
    assert cached_blocks(sentences, tokenizer, 48) == blocks and cached_blocks(sentences, tokenizer, 48) == blocks
    assert len(cache) == 1
    assert cached_blocks(sentences[1:], tokenizer, 48) == pack_blocks(sentences[1:], tokenizer, 48) and len(cache) == 2
