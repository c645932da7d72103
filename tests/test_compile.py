"""The `compile` option: a compiled run trains the same model as an eager one, `graphs` pads batches without
changing what the model computes on real tokens, and a machine without a GPU refuses `graphs` before training."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from course_lib.model.weights import load_pretrained
from course_lib.runtime.compiled import next_length, pad_batch
from course_lib.tasks.tagging import IGNORE_INDEX
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune


@pytest.fixture(scope="module")
def no_dropout_model(tmp_path_factory, tiny_model_dir):
    """The tiny BERT without dropout: a compiled step draws its dropout masks from another generator, so only a
    model without dropout can show that the compiled step computes the same thing."""
    import transformers

    folder = tmp_path_factory.mktemp("tiny_no_dropout")
    model = transformers.BertModel.from_pretrained(str(tiny_model_dir), hidden_dropout_prob=0.0,
                                                   attention_probs_dropout_prob=0.0)
    model.save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).write_bytes((tiny_model_dir / name).read_bytes())
    return folder


def test_compile_default_trains_like_eager_on_a_cpu(no_dropout_model, tmp_path):
    """torch.compile (inductor, C++ on the CPU) against eager, both without the CPU kernel swaps: the same losses
    to float32 rounding over two epochs, and the same dev accuracy."""
    common = dict(task="sst2", model=str(no_dropout_model), max_train_samples=48, max_eval_samples=32, epochs=2,
                  batch_size=16, max_len=32, lr=1e-3, classifier_dropout=0.0, fast_kernels=False, log_every=2)
    eager = finetune(FinetuneConfig(**common, output_dir=str(tmp_path / "eager")))
    compiled = finetune(FinetuneConfig(**common, compile="default", output_dir=str(tmp_path / "compiled")))
    losses = [[e["train_loss"] for e in run["history"]] for run in (eager, compiled)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4, abs=1e-5)
    assert losses[0][1] < losses[0][0]  # it trained
    assert compiled["dev"] == eager["dev"]
    assert json.loads((tmp_path / "compiled" / "metrics.json").read_text())["config"]["compile"] == "default"


CACHE = ("import os; os.environ.pop('TORCHINDUCTOR_CACHE_DIR', None)\n"
         "import torch._inductor.config  # it writes torch's default folder into the environment\n"
         "from course_lib.runtime.compiled import cache_per_cpu_path; print(cache_per_cpu_path())")


def test_compiled_code_is_cached_per_cpu_path():
    """Code compiled under ATEN_CPU_CAPABILITY=avx2 and loaded on the machine's own path crashed the process: each
    path has its own cache folder, unless the user names one."""
    folders = [subprocess.run([sys.executable, "-c", CACHE], env={**os.environ, "ATEN_CPU_CAPABILITY": capability},
                              capture_output=True, text=True, check=True).stdout.strip()
               for capability in ("avx2", "default")]
    assert folders[0].endswith("AVX2") and folders[1].endswith("DEFAULT") and folders[0] != folders[1]
    chosen = subprocess.run([sys.executable, "-c", "\n".join(CACHE.split("\n")[1:])], capture_output=True, text=True,
                            check=True, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": "/tmp/mine"}).stdout.strip()
    assert chosen == "/tmp/mine"


def test_graphs_without_a_gpu_is_one_line_and_exit_2_before_training(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: graphs can run")
    done = subprocess.run([sys.executable, "-m", "course_lib", "finetune", "--compile", "graphs", "--output-dir",
                           str(tmp_path / "run")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "compile 'graphs' needs a CUDA GPU" in done.stderr and "(valid here: off, default)" in done.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_padding_to_a_fixed_length_leaves_real_tokens_alone(tiny_model_dir, sentences):
    """A batch padded to the next fixed length: the same encoder outputs on every real token (the mask hides the
    padding), per-token labels padded with their ignore index, per-example labels untouched."""
    encoder, tokenizer = load_pretrained(tiny_model_dir)
    encoder.eval()
    enc = tokenizer(sentences, padding=True, return_tensors="pt")
    L = enc["input_ids"].shape[1]
    batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
             "token_type_ids": enc["token_type_ids"], "labels": torch.full_like(enc["input_ids"], 1)}
    padded = pad_batch(batch, tokenizer.pad_token_id, max_len=64)
    assert padded["input_ids"].shape[1] == next_length(L, 64) > L
    assert (padded["labels"][:, L:] == IGNORE_INDEX).all() and (padded["attention_mask"][:, L:] == 0).all()
    assert (padded["input_ids"][:, L:] == tokenizer.pad_token_id).all()
    with torch.no_grad():
        short = encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
        long = encoder(padded["input_ids"], padded["attention_mask"], padded["token_type_ids"]).last_hidden_state
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(long[:, :L][real], short[real], atol=1e-5, rtol=1e-5)
    per_example = {**batch, "labels": torch.tensor([0, 1, 0, 1])}
    assert torch.equal(pad_batch(per_example, 0, 64)["labels"], per_example["labels"])


@pytest.mark.parametrize("hybrid", [False, True])
def test_a_batch_padded_for_graphs_has_the_unpadded_ssa_loss(hybrid):
    """`graphs` pads every batch to a fixed length (pad_batch, the path its collate takes): SSA's padded token
    labels take the ignore index, so both the task and the token loss are the unpadded batch's."""
    from course_lib.methods.ssa import SSAClassifier
    from course_lib.model.bert import BertModel
    from course_lib.model.config import BertConfig

    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0))
    model = SSAClassifier(encoder, 2, 0.0, [2, 3, 0], max_len=64, hybrid=hybrid).double().train()
    ids = torch.tensor([[2, 11, 12, 13, 14, 3], [2, 21, 22, 3, 0, 0]])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long(), "token_type_ids": torch.zeros_like(ids),
             "token_labels": torch.tensor([[-1, 1, 0, 1, 1, -1], [-1, 0, 1, -1, -1, -1]]),
             "labels": torch.tensor([1, 0])}
    padded = pad_batch(batch, 0, max_len=64)
    assert padded["input_ids"].shape[1] == 32
    losses = [model(b["input_ids"], b["attention_mask"], b["token_type_ids"], labels=b["labels"],
                    token_labels=b["token_labels"]).loss for b in (batch, padded)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-7)  # float32 casts in the loss
