"""CS224N mode: the course's model interface, pair encodings, the frozen option, a SQuAD 2.0 head beside the
course's three, the six predictions files in the course's format, and bad course files as one line, exit 2.

The data is written here in the course's layout (tests/cs224n_fixture.py): the course's own is never shipped."""
import json
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from course_lib.model.pair_heads import SeparatePairClassifier, encode_separately, split_packed_pair
from course_lib.model.weights import load_pretrained
from course_lib.readers import cs224n
from course_lib import cli
from course_lib.runtime.repro import seed_everything
from course_lib.tasks import sentence
from course_lib.teaching import cs224n_project
from course_lib.training.config import MultitaskConfig
from course_lib.training.multitask import build_multitask, train_multitask
from cs224n_fixture import learnable_course_folder

PAIRS = [("How do I cook rice?", "What is the best way to cook rice at home?"), ("Why?", "Because the sky is blue.")]


@pytest.fixture(autouse=True)
def _no_course_variable(monkeypatch):
    monkeypatch.delenv(cs224n.ENV, raising=False)


@pytest.fixture(scope="module")
def course_data(tmp_path_factory):
    return learnable_course_folder(tmp_path_factory.mktemp("cs224n") / "data")


# ----------------------------------------------------------------------------------------------
# The predictions files and the overall scores


@pytest.mark.parametrize("role, values, lines", [
    (0, [3, 0], "id \t Predicted_Sentiment \na-1 , 3 \nb-2 , 0 \n"),
    (1, [1, 0], "id \t Predicted_Is_Paraphrase \na-1 , 1.0 \nb-2 , 0.0 \n"),
    (2, [2.75, 3.1234567], "id \t Predicted_Similiary \na-1 , 2.75 \nb-2 , 3.1234567 \n"),
])
def test_predictions_files_are_the_course_format_byte_for_byte(tmp_path, role, values, lines):
    path = tmp_path / "out.csv"
    cs224n_project.write_course_predictions(path, cs224n_project.ROLES[role], ["a-1", "b-2"], values)
    assert path.read_bytes() == lines.encode()


def test_overall_scores_are_the_reports_mean_and_the_leaderboards():
    scores = cs224n_project.overall_scores(0.5, 0.8, -0.2)
    assert scores["overall"] == pytest.approx((0.5 + 0.8 - 0.2) / 3)
    assert scores["overall_normalized"] == pytest.approx((0.5 + 0.8 + 0.4) / 3)


# ----------------------------------------------------------------------------------------------
# Pair encodings and the course's interface


def test_a_separately_encoded_pair_splits_back_into_each_sentence_alone(tiny_model_dir):
    _, tokenizer = load_pretrained(str(tiny_model_dir))
    examples = [sentence.Example(pair, 1) for pair in PAIRS]
    batch = sentence.collate(encode_separately(examples, tokenizer, 12), tokenizer.pad_token_id)
    ids, mask = split_packed_pair(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    alone = [tokenizer(text, truncation=True, max_length=12)["input_ids"] for side in zip(*PAIRS) for text in side]
    assert [row[m.bool()].tolist() for row, m in zip(ids, mask)] == alone
    assert ids.shape[1] == max(len(a) for a in alone) and (ids[~mask.bool()] == tokenizer.pad_token_id).all()


def test_joining_two_tokenized_sides_gives_berts_pair_encoding(tiny_model_dir):
    _, tokenizer = load_pretrained(str(tiny_model_dir))
    sides = [tokenizer(list(side), padding=True, return_tensors="pt") for side in zip(*PAIRS)]
    ids, mask, types = cs224n_project.join_pair(sides[0]["input_ids"], sides[0]["attention_mask"],
                                                sides[1]["input_ids"], sides[1]["attention_mask"])
    want = tokenizer([a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True, return_tensors="pt")
    assert torch.equal(ids, want["input_ids"]) and torch.equal(mask, want["attention_mask"])
    assert torch.equal(types * mask, want["token_type_ids"])


@pytest.mark.parametrize("pair_encoding", ["separate", "cross"])
def test_the_course_interface_agrees_with_the_runs_own_evaluation(tiny_model_dir, pair_encoding):
    """predict_* on the course's tokenization gives what the run's heads give on its own features."""
    torch.manual_seed(0)
    encoder, tokenizer = load_pretrained(str(tiny_model_dir))
    cfg = MultitaskConfig(cs224n=True, pair_encoding=pair_encoding, max_len=32)
    model = cs224n_project.CourseModel(build_multitask(cfg, encoder, tokenizer), tokenizer.pad_token_id).eval()
    sides = [tokenizer(list(side), padding=True, return_tensors="pt") for side in zip(*PAIRS)]
    args = (sides[0]["input_ids"], sides[0]["attention_mask"], sides[1]["input_ids"], sides[1]["attention_mask"])
    encode = encode_separately if pair_encoding == "separate" else sentence.encode_examples
    examples = [sentence.Example(pair, 0.0) for pair in PAIRS]
    batch = sentence.collate(encode(examples, tokenizer, 32), tokenizer.pad_token_id)
    inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    with torch.no_grad():
        para, sts = model.model.heads["cs224n_para"](*inputs).logits, model.model.heads["cs224n_sts"](*inputs).logits
        torch.testing.assert_close(model.predict_similarity(*args), sts.squeeze(-1), atol=1e-5, rtol=0)
        one_logit = model.predict_paraphrase(*args)
        torch.testing.assert_close(one_logit.sigmoid(), para.softmax(-1)[:, 1], atol=1e-5, rtol=0)
        assert isinstance(model.model.heads["cs224n_para"], SeparatePairClassifier) == (pair_encoding == "separate")
        sst = tokenizer([a for a, _ in PAIRS], padding=True, return_tensors="pt")
        assert model.predict_sentiment(sst["input_ids"], sst["attention_mask"]).shape == (2, 5)
        cls = model(sst["input_ids"], sst["attention_mask"])
        torch.testing.assert_close(cls, encoder(sst["input_ids"], sst["attention_mask"]).pooler_output)


# ----------------------------------------------------------------------------------------------
# Runs


def course_run(data, out, *options) -> int:
    return cli.main(["multitask", "--cs224n", "--data-dir", str(data), "--output-dir", str(out), *options])


def read_predictions(path) -> tuple[str, list[str], list[str]]:
    header, *rows = path.read_text().splitlines()
    return header, [row.split(" , ")[0] for row in rows], [row.split(" , ")[1].strip() for row in rows]


@pytest.mark.parametrize("pair_encoding", ["separate", "cross"])
def test_both_pair_encodings_learn_and_the_six_files_hold_what_was_scored(course_data, tmp_path, pair_encoding):
    """The packaged MiniLM on learnable course-format files: the loss falls, every dev metric is far above
    chance (SST 0.2, Quora 0.5, STS 0), the files' dev predictions score what metrics.json says."""
    assert course_run(course_data, tmp_path, "--epochs", "3", "--max-len", "32", "--lr", "2e-4",
                      "--pair-encoding", pair_encoding) == 0
    result = json.loads((tmp_path / "metrics.json").read_text())
    assert result["config"]["pair_encoding"] == pair_encoding
    losses = [entry["train_loss"] for entry in result["history"]]
    assert losses[-1] < 0.7 * losses[0], losses
    dev = {name: scores["dev"] for name, scores in result["dev"].items()}
    assert dev["cs224n_sst"]["accuracy"] > 0.4 and dev["cs224n_para"]["accuracy"] > 0.8
    assert dev["cs224n_sts"]["pearson"] > 0.6
    scored = json.loads((tmp_path / "predictions" / "dev_metrics.json").read_text())
    assert scored["sst_accuracy"] == pytest.approx(dev["cs224n_sst"]["accuracy"])
    assert scored["para_accuracy"] == pytest.approx(dev["cs224n_para"]["accuracy"])
    assert scored["sts_pearson"] == pytest.approx(dev["cs224n_sts"]["pearson"], abs=1e-6)
    assert scored["overall"] == pytest.approx(result["overall"], abs=1e-6)
    files = sorted(p.name for p in (tmp_path / "predictions").glob("*.csv"))
    assert files == sorted(f"{r}-{s}-output.csv" for r in ("sst", "para", "sts") for s in ("dev", "test"))
    check_files_against_labels(course_data, tmp_path / "predictions", scored)


def check_files_against_labels(data, predictions, scored) -> None:
    """Each file lists its source file's ids in order; the dev files score what dev_metrics.json says."""
    for role, source in zip(cs224n_project.ROLES, ("ids-sst", "quora", "sts")):
        for split, stem in (("dev", "dev"), ("test", "test-student")):
            header, ids, values = read_predictions(predictions / f"{role.prefix}-{split}-output.csv")
            rows = (data / f"{source}-{stem}.csv").read_text().splitlines()[1:]
            assert header == f"id \t {role.header} " and ids == [row.split("\t")[1] for row in rows]
            if split == "dev":
                labels = np.array([float(row.split("\t")[-1]) for row in rows])
                got = np.array([float(v) for v in values])
                metric = np.corrcoef(got, labels)[0, 1] if role.prefix == "sts" else np.mean(got == labels)
                assert metric == pytest.approx(scored[f"{role.prefix}_{role.metric}"], abs=1e-6)


def test_the_frozen_option_trains_the_heads_and_leaves_every_encoder_parameter_as_loaded(course_data, tmp_path,
                                                                                       tiny_model_dir):
    cfg = MultitaskConfig(cs224n=True, option="pretrain", data_dir=str(course_data), model=str(tiny_model_dir),
                          output_dir=str(tmp_path), epochs=1, max_len=32, lr=1e-2, max_train_samples=64)
    train_multitask(cfg)
    trained = load_file(tmp_path / "model.safetensors")
    seed_everything(cfg.seed)  # as the run built its heads
    encoder, tokenizer = load_pretrained(str(tiny_model_dir))
    initial = build_multitask(cfg, encoder, tokenizer).unique_state_dict()
    encoder_keys = [k for k in initial if k.startswith("encoder.")]
    assert encoder_keys and all(torch.equal(trained[k], initial[k]) for k in encoder_keys)
    for name in ("cs224n_sst", "cs224n_para", "cs224n_sts"):
        key = f"heads.{name}.classifier.weight"
        assert not torch.equal(trained[key], initial[key]), f"{name}'s head did not train"


def squad_v2_folder(root, seed: int = 0):
    """train-v2.0.json and dev-v2.0.json: who won and where, answerable; who lost, not (is_impossible)."""
    rng = random.Random(seed)
    names, cities = ["Alice", "Bruno", "Chen", "Dana"], ["Paris", "Lima", "Oslo", "Cairo"]
    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 24), ("dev", 8)):
        paragraphs = []
        for i in range(n):
            name, city = rng.choice(names), rng.choice(cities)
            context = f"{name} won the final in {city}."
            qas = [{"id": f"{split}{i}w", "question": "Who won the final?", "is_impossible": False,
                    "answers": [{"text": name, "answer_start": 0}]},
                   {"id": f"{split}{i}c", "question": "Where was the final?", "is_impossible": False,
                    "answers": [{"text": city, "answer_start": context.index(city)}]},
                   {"id": f"{split}{i}l", "question": "Who lost the final?", "is_impossible": True, "answers": []}]
            paragraphs.append({"context": context, "qas": qas})
        doc = {"version": "v2.0", "data": [{"title": f"t{split}", "paragraphs": paragraphs}]}
        (root / f"{split}-v2.0.json").write_text(json.dumps(doc))
    return root


def test_a_squad_v2_head_trains_beside_the_course_heads(course_data, tmp_path, tiny_model_dir, monkeypatch):
    """The report's extension: a span-QA head with no-answer on the same encoder; the course's files still come."""
    monkeypatch.setenv("SQUAD_DIR", str(squad_v2_folder(tmp_path / "squad")))
    assert course_run(course_data, tmp_path / "run", "--tasks", "cs224n_sst,cs224n_para,cs224n_sts,squad_v2",
                      "--model", str(tiny_model_dir), "--epochs", "1", "--max-len", "64", "--doc-stride", "16",
                      "--max-query-length", "16", "--max-train-samples", "48") == 0
    result = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert result["tasks"][-1] == "squad_v2" and result["history"][0]["tasks"]["squad_v2"]["steps"] > 0
    assert {"exact_match", "f1"} <= set(result["dev"]["squad_v2"]["dev"])
    assert len(list((tmp_path / "run" / "predictions").glob("*-output.csv"))) == 6


@pytest.mark.parametrize("stem, text, wanted", [
    ("ids-sst-train", "\tid\tsentence\n0\ta\tFine.\n", "header lacks column 'sentiment'"),
    ("ids-sst-train", "\tid\tsentence\tsentiment\n0\ta\tFine.\t3\n1\tb\tBad.\t7\n", "ids-sst-train.csv:3"),
    ("quora-dev", "\tid\tsentence1\tsentence2\tis_duplicate\n0\tq\tA?\tB?\t2.0\n", "quora-dev.csv:2"),
    ("sts-train", "", "sts-train.csv"),
])
def test_a_bad_course_file_is_one_line_and_exit_2_before_training(course_data, tmp_path, capsys, stem, text, wanted):
    data = tmp_path / "data"
    data.mkdir()
    for path in course_data.iterdir():
        (data / path.name).write_bytes(path.read_bytes())
    (data / f"{stem}.csv").write_text(text)
    assert course_run(data, tmp_path / "run", "--epochs", "1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and wanted in err[0], err
    assert not (tmp_path / "run" / "metrics.json").exists() and not (tmp_path / "run" / "checkpoint.pt").exists()


def test_without_a_data_folder_the_error_names_the_option_and_the_variable(tmp_path, capsys):
    assert cli.main(["multitask", "--cs224n", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--data-dir" in err and cs224n.ENV in err and len(err.splitlines()) == 1


def test_the_course_scripts_spelling_of_options_is_accepted():
    """`--batch_size 8` as the starter scripts spell it; values, `=` forms and positionals keep their underscores."""
    assert cli.dashed(["multitask", "--batch_size", "8", "--data_dir=/a_b/c_d", "x_y", "--use_gpu"]) == [
        "multitask", "--batch-size", "8", "--data-dir=/a_b/c_d", "x_y", "--use-gpu"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible: --use_gpu is then accepted")
def test_use_gpu_without_a_gpu_is_one_line_and_exit_2(course_data, tmp_path, capsys):
    assert course_run(course_data, tmp_path, "--use_gpu", "--option", "pretrain") == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --use-gpu: no CUDA GPU is visible here (leave the flag out to train on the CPU)"
