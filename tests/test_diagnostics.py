"""Controlled diagnostics: generators, ground truth after tokenisation, precision@k, and a tiny end-to-end run."""
import json
import random

import pytest
from transformers import BertTokenizerFast

from benchmarks import diagnostics as d
from benchmarks.__main__ import main
from course_lib.tasks.sentence import Example, encode_examples as encode


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return BertTokenizerFast.from_pretrained(str(minilm_dir))


def test_every_word_is_one_wordpiece_of_the_packaged_vocabulary(tokenizer):
    for word in [*d.POSITIVE, *d.NEGATIVE, *d.FILLER, d.SPURIOUS]:
        assert len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1, word
    assert not set(d.POSITIVE) & set(d.NEGATIVE) and d.SPURIOUS not in d.FILLER


@pytest.mark.parametrize("make", [lambda seed: d.shortcut_sentences(50, seed, "train"),
                                  lambda seed: d.planted_sentences(50, seed, "dev")])
def test_generators_are_deterministic_per_seed_and_differ_across_seeds(make):
    assert make(0) == make(0)
    assert [s.text for s in make(0)] != [s.text for s in make(1)]


@pytest.mark.parametrize("split, rate", [("train", 0.9), ("clean", 0.5), ("anti", 0.1)])
def test_spurious_word_follows_the_label_at_the_stated_rate(split, rate):
    sentences = d.shortcut_sentences(4000, 0, split, spurious_rate=0.9)
    for s in sentences:
        assert (d.SPURIOUS in s.words) == s.spurious and s.words.count(d.SPURIOUS) <= 1
    positive = [s for s in sentences if s.label == 1]
    negative = [s for s in sentences if s.label == 0]
    assert abs(sum(s.spurious for s in positive) / len(positive) - rate) < 0.03
    assert abs(sum(s.spurious for s in negative) / len(negative) - (1 - rate)) < 0.03


def test_shortcut_label_is_the_majority_polarity_outside_training_noise():
    for split, noise in (("clean", 0.0), ("anti", 0.0), ("train", 0.1)):
        sentences = d.shortcut_sentences(2000, 3, split, label_noise=0.1)
        majority = [int(sum(w in d.POSITIVE for w in s.words) > sum(w in d.NEGATIVE for w in s.words))
                    for s in sentences]
        flipped = sum(m != s.label for m, s in zip(majority, sentences)) / len(sentences)
        assert abs(flipped - noise) < 0.025, split


def test_planted_positions_point_to_the_planted_words_after_tokenisation(tokenizer):
    sentences = d.planted_sentences(200, 0, "dev") + d.shortcut_sentences(200, 0, "anti")
    positions = d.wordpiece_positions(sentences, tokenizer, max_len=32)
    features = encode([Example((s.text,), s.label) for s in sentences], tokenizer, 32)
    cues = set(d.POSITIVE) | set(d.NEGATIVE)
    for s, pos, f in zip(sentences, positions, features):
        assert 1 <= len(pos) == len(s.planted) <= 3
        tokens = tokenizer.convert_ids_to_tokens(f["input_ids"])
        assert [tokens[i] for i in pos] == [s.words[i] for i in s.planted]
        assert {i for i, t in enumerate(tokens) if t in cues} == set(pos)  # every cue word, nothing else


def test_precision_at_k_perfect_complement_and_random_baseline():
    candidates, truth = list(range(1, 9)), [2, 5, 7]
    perfect = [1.0 if i in truth else 0.0 for i in range(10)]
    assert d.precision_at_k(perfect, truth, candidates) == 1.0
    assert d.precision_at_k([1 - s for s in perfect], truth, candidates) == 0.0
    assert d.precision_at_k([0, 0, 1, 0, 0, 0.5, 0, 0, 0, 0], truth, candidates) == pytest.approx(2 / 3)
    assert d.precision_at_k([0, 0, 1, 0, 0, 0, 0, 0, 0, 0], truth, candidates) == pytest.approx(1 / 3)  # ties: 1, 3
    assert d.random_precision(3, 8) == 3 / 8
    rng = random.Random(0)
    trials = [d.precision_at_k([rng.random() for _ in range(10)], truth, candidates) for _ in range(20000)]
    assert sum(trials) / len(trials) == pytest.approx(3 / 8, abs=0.01)


def test_paired_test_and_table_structure():
    runs = [{"task": "shortcut", "method": m, "seed": s, "clean": 0.9, "anti": a, "reliance": 0.9 - a}
            for s in range(3) for m, a in (("vanilla", 0.5 + 0.01 * s), ("asa", 0.8 + 0.02 * s))]
    results = {"budget": {}, "seeds": [0, 1, 2], "summary": d.summarize(runs, ["vanilla", "asa"])}
    row = results["summary"]["shortcut"]["rows"]["asa"]
    assert row["reliance"]["mean"] == pytest.approx(0.08) and row["vs_vanilla"]["diff"] == pytest.approx(-0.31)
    assert row["vs_vanilla"]["p"] < 0.01
    assert results["summary"]["shortcut"]["rows"]["vanilla"]["vs_vanilla"] == {"diff": None, "p": None}
    table = d.format_table(results)
    assert "| asa | 0.900 ± 0.000 | 0.820 ± 0.020 | 0.080 ± 0.020 | -0.310 |" in table


def test_tiny_end_to_end_run_through_the_cli(tiny_model_dir, tmp_path, capsys):
    argv = ["diagnostics", "--quick", "--model", str(tiny_model_dir), "--methods", "vanilla,ssa-hybrid",
            "--seeds", "0,1", "--output-dir", str(tmp_path)]
    assert main(argv + ["--json"]) == 0
    results = json.loads(capsys.readouterr().out)  # finetune's own lines go to stderr
    assert len(results["runs"]) == 2 * 2 * 2
    planted = results["summary"]["planted"]["rows"]
    assert "p@k_ssa" in planted["ssa-hybrid"] and "p@k_ssa" not in planted["vanilla"]
    for row in planted.values():
        assert 0 <= row["p@k_cls_last"]["mean"] <= 1 and 0 < row["p@k_random"]["mean"] < 1
    assert (tmp_path / "quick" / "data" / "shortcut" / "seed1" / "SST-2" / "train.tsv").is_file()
    assert main(argv) == 0  # every run cached now: no training
    lines = capsys.readouterr().out.splitlines()
    assert "| method | clean | anti | reliance | Δreliance vs vanilla | p |" in lines
    assert any(line.startswith("| ssa-hybrid | ") and line.count("|") == 8 for line in lines)
    assert main(["diagnostics", "--methods", "nope"]) == 2
    assert "valid:" in capsys.readouterr().err
