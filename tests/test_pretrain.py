"""MLM pre-training from scratch, with and without AG: curves, determinism, resume, data, bad input."""
import json
import math
import time

import pytest
import torch

from course_lib.model.config import BertConfig
from course_lib.readers import local_data
from course_lib.readers.squad_json import write_article_split
from course_lib import cli
from course_lib.runtime.errors import RunFailed, UsageError
from course_lib.training import loop as loop_module
from course_lib.training.config import FinetuneConfig, PretrainConfig
from course_lib.training.finetune import finetune
from course_lib.training.mlm_data import generated_corpus, load_corpus, mask_tokens, pack_blocks, step_generator
from course_lib.training.pretrain import BertForMaskedLM, export_model, pretrain

STEPS = 40


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from a second thread, and OpenMP threads that spin-wait on shared cores
    make them up to 20x slower (measured on 2 busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(generated_corpus(3000)) + "\n")
    return path


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(str(minilm_dir))


def tiny(corpus, out, method, **extra) -> PretrainConfig:
    """2 layers, d = 64, 4 heads (2 guided: next, prev, plus one first head): about a second per 10 steps."""
    return PretrainConfig.from_dict({
        "method": method, "corpus": str(corpus), "output_dir": str(out), "max_steps": STEPS, "num_hidden_layers": 2,
        "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "max_len": 32, "batch_size": 16,
        "lr": 1e-3, "eval_every": 20, "log_every": 10, "eval_blocks": 32, "ag_head_types": "0,1,1,1", "seed": 0,
        **extra})


@pytest.fixture(scope="module")
def runs(corpus_file, tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    return {m: (pretrain(tiny(corpus_file, root / m, m)), root / m) for m in ("mlm", "ag")}


def numbers(result: dict) -> dict:
    """metrics.json without wall-clock times and the output folder, the only things allowed to differ."""
    result = json.loads(json.dumps(result))
    result.pop("timing")
    result["config"].pop("output_dir")
    return result


@pytest.mark.parametrize("method", ["mlm", "ag"])
def test_runs_complete_with_curves_and_the_mlm_loss_falls(runs, method):
    result, out = runs[method]
    assert result["status"] == "complete" and result["train_steps"] == STEPS
    assert result["corpus"]["source"] == "file" and result["corpus"]["lines"] == 3000
    assert [e["step"] for e in result["train_curve"]] == [10, 20, 30, 40]
    assert [e["step"] for e in result["eval_curve"]] == [0, 20, 40]
    evals = [e["mlm_loss"] for e in result["eval_curve"]]
    assert abs(evals[0] - 10.33) < 0.1, "an untrained model should be near ln(30522)"
    assert evals[2] < evals[1] < evals[0] - 1.0
    assert result["train_curve"][-1]["mlm_loss"] < result["train_curve"][0]["mlm_loss"]
    assert all("ag_loss" in e for e in result["eval_curve"])  # scored for both methods
    assert ("ag_alpha" in result["train_curve"][0]) == (method == "ag")
    assert json.loads((out / "metrics.json").read_text())["final"] == result["final"]
    assert not (out / "checkpoint.pt").exists() and (out / "model.safetensors").exists()


def test_ag_guides_the_heads_and_decays_alpha(runs):
    ag, mlm = runs["ag"][0], runs["mlm"][0]
    assert ag["eval_curve"][-1]["ag_loss"] < mlm["eval_curve"][-1]["ag_loss"]
    alphas = [e["ag_alpha"] for e in ag["train_curve"]]
    assert alphas == sorted(alphas, reverse=True) and alphas[0] < 10.0  # alpha at the window's last step
    assert ag["eval_curve"][0] == mlm["eval_curve"][0], "same seed, same initial model and held-out masks"


def test_same_command_twice_resumes_to_identical_numbers(runs, corpus_file, tmp_path, monkeypatch):
    """Stop right after the first checkpoint, run the same command again: the numbers of one unbroken run."""
    real_save = loop_module.save_torch

    def save_then_stop(path, obj):
        real_save(path, obj)
        raise KeyboardInterrupt

    cfg = tiny(corpus_file, tmp_path, "ag")
    monkeypatch.setattr(loop_module, "save_torch", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg)
    monkeypatch.setattr(loop_module, "save_torch", real_save)
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["state"]["global_step"] == 20
    assert numbers(pretrain(cfg)) == numbers(runs["ag"][0])
    started = time.perf_counter()
    assert numbers(pretrain(cfg)) == numbers(runs["ag"][0])  # completed: nothing to do
    assert time.perf_counter() - started < 1.0


def test_refuses_another_runs_output(runs, corpus_file):
    _, out = runs["mlm"]
    with pytest.raises(UsageError, match="different run's checkpoint \\(lr=0.001, this run has lr=0.0005\\)"):
        pretrain(tiny(corpus_file, out, "mlm", lr=5e-4))


def test_nonfinite_loss_stops_keeping_the_checkpoint_or_is_skipped(corpus_file, tmp_path):
    blow_up = {"lr": 1e30, "max_grad_norm": 0.0, "max_steps": 6, "eval_every": 1}
    with pytest.raises(RunFailed, match="loss is (nan|inf) at step .*last good checkpoint is kept"):
        pretrain(tiny(corpus_file, tmp_path / "stop", "ag", **blow_up))
    torch.load(tmp_path / "stop" / "checkpoint.pt", weights_only=True)  # still a readable checkpoint
    skipped = pretrain(tiny(corpus_file, tmp_path / "skip", "ag", on_nonfinite_loss="skip", **blow_up))
    assert skipped["status"] == "complete" and skipped["skipped_steps"] > 0


def test_export_is_a_hugging_face_masked_lm(tmp_path, tokenizer, minilm_dir):
    """The saved folder loads in transformers' BertForMaskedLM with the same predictions as ours."""
    import transformers

    torch.manual_seed(0)
    ours = BertForMaskedLM(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=32)).eval()
    with torch.no_grad():
        ours.bias.normal_()  # not all zeros, so the bias mapping is checked too
    export_model(ours, tmp_path, minilm_dir)
    theirs = transformers.BertForMaskedLM.from_pretrained(str(tmp_path)).eval()
    batch = tokenizer(["the cat sees the ball .", "one two"], padding=True, return_tensors="pt")
    labels = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -100)  # predict every real token
    with torch.no_grad():
        mine = ours(batch["input_ids"], batch["attention_mask"], labels)
        ref = theirs(**batch, labels=labels)
    torch.testing.assert_close(mine.loss, ref.loss, atol=1e-5, rtol=0)


def test_masking_follows_bert(tokenizer):
    ids = torch.randint(1000, 30000, (64, 128))
    ids[:, 0], ids[:, -1], ids[:8, 100:] = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    args = dict(special_ids=tokenizer.all_special_ids, mask_token_id=tokenizer.mask_token_id, vocab_size=30522,
                mlm_probability=0.15)
    inputs, labels = mask_tokens(ids, generator=step_generator(0, 1), **args)
    chosen = labels != -100
    assert not chosen[torch.isin(ids, torch.tensor(tokenizer.all_special_ids))].any()
    assert abs(chosen.float().sum() / (~torch.isin(ids, torch.tensor(tokenizer.all_special_ids))).sum() - 0.15) < 0.01
    assert (labels[chosen] == ids[chosen]).all() and (inputs[~chosen] == ids[~chosen]).all()
    masked = (inputs[chosen] == tokenizer.mask_token_id).float().mean()
    kept = (inputs[chosen] == ids[chosen]).float().mean()
    assert abs(masked - 0.8) < 0.02 and abs(kept - 0.1) < 0.02
    again, _ = mask_tokens(ids, generator=step_generator(0, 1), **args)
    assert torch.equal(inputs, again)


def test_blocks_pack_whole_lines(tokenizer):
    lines = ["the cat sees the ball .", "one two three .", "a much longer line " * 10]
    blocks = pack_blocks(lines, tokenizer, 16)
    assert all(len(b) <= 16 and b[0] == tokenizer.cls_token_id and b[-1] == tokenizer.sep_token_id for b in blocks)
    assert tokenizer.decode(blocks[0]) == "[CLS] the cat sees the ball. [SEP] one two three. [SEP]"
    assert len(blocks) == 2 and len(blocks[1]) == 16  # the long line is cut to fit one block


def test_corpus_sources(keyword_glue, tmp_path, monkeypatch):
    lines, info = load_corpus(PretrainConfig(glue_dir=str(keyword_glue)))
    assert info["source"] == "glue" and info["tasks"] == ["sst2"] and 0 < len(lines) <= 192
    monkeypatch.delenv("GLUE_DIR", raising=False)
    lines, info = load_corpus(PretrainConfig())  # the repository's data/glue
    assert info["source"] == "glue" and info["tasks"] == ["cola", "sst2", "stsb", "rte"] and len(lines) > 60_000
    monkeypatch.setattr(local_data, "REPO_DATA", tmp_path / "no-repository-data")  # a wheel: no data/
    lines, info = load_corpus(PretrainConfig())
    assert info == {"source": "generated"} and lines == generated_corpus()
    with pytest.raises(UsageError, match="is not a file"):
        load_corpus(PretrainConfig(corpus=str(tmp_path / "missing.txt")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="has no training set"):
        load_corpus(PretrainConfig(glue_dir=str(tmp_path / "empty")))


@pytest.mark.parametrize("args, message", [
    (["--method", "magic"], "unknown pretraining method 'magic' (valid: ag, mlm)"),
    (["--ag-head-types", "0,1,1,9"], "ag_head_types '0,1,1,9' guides 11 heads but the model has 8"),
    (["--ag-reduction", "sum"], "unknown ag_reduction 'sum' (valid: mean, frobenius)"),
    (["--ag-boundary", "wrap"], "unknown ag_boundary 'wrap' (valid: uniform, zero)"),
    (["--hidden-size", "100"], "hidden_size 100 is not divisible by num_attention_heads 8"),
    (["--max-steps", "0"], "PretrainConfig.max_steps must be > 0, got 0"),
    (["--frobnicate", "1"], "unknown option '--frobnicate' for pretrain (valid: --ag-boundary, --ag-head-types"),
])
def test_bad_options_are_one_line_usage_errors(args, message, capsys):
    assert cli.main(["pretrain", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0


def test_an_ag_pretrained_encoder_fine_tunes_on_span_qa(runs, tmp_path):
    """AG changes pre-training only: its exported folder is a BERT that any task family fine-tunes, SQuAD too."""
    files = write_article_split(local_data.data_folder("SQUAD_DIR") / "dev-v1.1.json", 38, tmp_path / "data")
    cfg = FinetuneConfig.from_dict(dict(task="squad", model=str(runs["ag"][1]), train_file=str(files[0]),
                                        validation_file=str(files[1]), max_len=32, doc_stride=8, max_query_length=12,
                                        max_train_samples=16, max_eval_samples=8, epochs=1, batch_size=8, lr=1e-3,
                                        output_dir=str(tmp_path / "qa")))
    result = finetune(cfg)
    assert result["status"] == "complete" and set(result["dev"]) == {"exact_match", "f1"}
    assert all(math.isfinite(entry["train_loss"]) for entry in result["history"])


def test_the_vocabulary_comes_from_any_bert_folder_without_the_default_model_package(corpus_file, tmp_path,
                                                                                     minilm_dir, monkeypatch):
    """A GPU image without the MiniLM package (or a user with another vocabulary) pre-trains with --tokenizer: a
    folder holding only a tokenizer's files; the exported model carries that vocabulary. Without it, the missing
    package is one line naming the option, before any file is written."""
    from course_lib.model import model_folder

    vocab = tmp_path / "vocab_only"
    vocab.mkdir()
    words = (minilm_dir / "vocab.txt").read_text().splitlines()
    (vocab / "vocab.txt").write_text("\n".join(words[:3000]) + "\n")  # a smaller vocabulary
    monkeypatch.setattr(model_folder, "DEFAULT_MODEL_PACKAGE", "no_such_model_package")
    with pytest.raises(UsageError, match="pass a BERT folder or hub id"):
        pretrain(tiny(corpus_file, tmp_path / "default", "mlm", max_steps=2, eval_every=2))
    assert not (tmp_path / "default").exists()
    result = pretrain(tiny(corpus_file, tmp_path / "run", "mlm", max_steps=4, eval_every=2, tokenizer=str(vocab)))
    assert result["status"] == "complete"
    assert (tmp_path / "run" / "vocab.txt").read_text() == (vocab / "vocab.txt").read_text()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["vocab_size"] == 3000
