"""Pre-training a small BERT from scratch with masked language modelling, optionally guided by AG.

`method="mlm"` minimises BERT's MLM loss (Devlin et al. 2019, Sec. 3.1); `method="ag"` adds alpha_t · L_AG,
attention guidance (Deshpande & Narasimhan, Findings of EMNLP 2020; see `course_lib.methods.ag`): the method's
entry in `course_lib.methods.pretraining` names the term it adds, so this module has no branch per method. The
paper's claim to check is that the guided model's MLM loss falls faster; both methods log the same curves for that.

Data (`course_lib.training.mlm_data`): lines of text (a file, the GLUE training sentences, or a generated corpus)
are tokenised with the packaged MiniLM's uncased WordPiece and packed whole into blocks of at most `max_len`
tokens. A fixed set of blocks is held out and
scored with fixed masks, so held-out losses of runs with any seed or method compare directly.

The run is a pure function of its config: batch order comes from `batching.epoch_batches(seed, epoch)`, each
step's masks from a generator seeded with (seed, step), and the dropout RNG is checkpointed, so the same
command after a kill resumes and ends with the same numbers.

The loop that runs it is `course_lib.training.loop`. Output directory, every file written atomically: `checkpoint.pt`
while running, `metrics.json` (config, corpus,
loss curves, final numbers), and at the end a Hugging Face BertForMaskedLM folder (config.json,
model.safetensors, tokenizer files) that `load_pretrained` and `finetune --model` read.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save as safetensors_save
from torch import nn

from course_lib.methods.ag import AttentionGuidance
from course_lib.methods.pretraining import get_pretrain_method
from course_lib.model.bert import BertModel
from course_lib.model.config import BertConfig, check_mixed_precision
from course_lib.model.weights import ours_to_hf
from course_lib.model.model_folder import load_tokenizer, resolve_model_dir
from course_lib.runtime.errors import UsageError
from course_lib.runtime.repro import WEIGHTS, atomic_write, seed_everything, write_json
from course_lib.runtime.run_folder import finished_run
from course_lib.runtime.tracking import scalars
from course_lib.tasks import batching
from course_lib.training.config import PretrainConfig
from course_lib.training.loop import Job, TrainingLoop, data_ready_line, open_run
from course_lib.training.mlm_data import IGNORE, cached_blocks, load_corpus, mask_tokens, pad_blocks, step_generator

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
HELD_OUT_SEED = 20200  # the held-out blocks and their masks do not depend on the run's seed


# ----------------------------------------------------------------------------------------------
# Model


@dataclass
class MaskedLMOutput:
    loss_sum: torch.Tensor  # summed cross-entropy over the predicted positions
    count: int  # number of predicted positions
    attentions: tuple[torch.Tensor, ...] | None  # per layer (B, H, L, L), when requested

    @property
    def loss(self) -> torch.Tensor:
        return self.loss_sum / max(1, self.count)


def predicted_positions(labels: torch.Tensor) -> torch.Tensor:
    """The flat indices of the labelled positions of a (B, L) label batch, in order."""
    return (labels.flatten() != IGNORE).nonzero().squeeze(1)


class BertForMaskedLM(nn.Module):
    """Our BertModel plus BERT's MLM head: dense + GELU + LayerNorm, then a decoder tied to the word
    embeddings with its own bias (Devlin et al. 2019; Hugging Face's BertLMPredictionHead)."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.bert = BertModel(cfg)
        self.transform = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.transform.apply(BertModel._init_weights)

    def forward(self, input_ids, attention_mask, labels, output_attentions: bool = False,
                predicted: torch.Tensor | None = None) -> MaskedLMOutput:
        """`predicted`: the flat indices (into B·L) of the positions with a label, ascending; None: found from
        `labels`, which on a GPU waits for it. A training step passes them, found on the host where its masks
        are drawn (`predicted_positions`), so that its shapes are known without reading the device."""
        out = self.bert(input_ids, attention_mask, output_attentions=output_attentions)
        if predicted is None:
            predicted = predicted_positions(labels)
        hidden = out.last_hidden_state.flatten(0, 1)[predicted]  # the decoder runs on these positions only: (N, d)
        h = self.norm(F.gelu(self.transform(hidden)))  # (N, d)
        logits = h @ self.bert.embeddings.word.weight.T + self.bias  # (N, V)
        loss_sum = F.cross_entropy(logits.float(), labels.flatten()[predicted], reduction="sum")
        return MaskedLMOutput(loss_sum, predicted.numel(), out.attentions)

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors under Hugging Face BertForMaskedLM names (the tied decoder weight is the embedding)."""
        cfg = self.bert.config
        state = {f"bert.{k}": v for k, v in ours_to_hf(self.bert.state_dict(), cfg.num_hidden_layers).items()}
        state.update({"cls.predictions.transform.dense.weight": self.transform.weight,
                      "cls.predictions.transform.dense.bias": self.transform.bias,
                      "cls.predictions.transform.LayerNorm.weight": self.norm.weight,
                      "cls.predictions.transform.LayerNorm.bias": self.norm.bias,
                      "cls.predictions.bias": self.bias})
        return {k: v.detach().cpu().contiguous().clone() for k, v in state.items()}  # no shared storage


def tokenizer_dir(name_or_path: str | None) -> Path:
    """The folder of the run's vocabulary: a local folder with a BERT tokenizer (a model folder, or only the
    tokenizer's files), the packaged MiniLM's for None, else a hub id's download."""
    path = Path(name_or_path).expanduser() if name_or_path is not None else None
    if path is not None and path.is_dir():
        return path
    return resolve_model_dir(name_or_path)


def export_model(model: BertForMaskedLM, out: Path, source: Path) -> None:
    """Write a Hugging Face BertForMaskedLM folder with the run's tokenizer files (copied from the folder
    `source`), readable by load_pretrained."""
    cfg = model.bert.config
    write_json(out / "config.json", {**cfg.to_dict(), "model_type": "bert", "architectures": ["BertForMaskedLM"],
                                     "tie_word_embeddings": True})
    atomic_write(out / WEIGHTS, lambda f: f.write(safetensors_save(model.hf_state_dict())))
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            data = (source / name).read_bytes()
            atomic_write(out / name, lambda f, data=data: f.write(data))


# ----------------------------------------------------------------------------------------------
# Training


@torch.no_grad()
def evaluate(model: BertForMaskedLM, blocks: list[list[int]], batch_size: int, pad_id: int, masking: dict,
             guidance: AttentionGuidance, device) -> dict:
    """Held-out MLM loss (mean over all predicted tokens) and L_AG (mean over batches), with fixed masks.

    L_AG is scored for MLM runs too: how far unguided heads are from the patterns is half of the comparison.
    """
    model.eval()
    loss_sum, count, ag_sum, batches = 0.0, 0, 0.0, 0
    for start in range(0, len(blocks), batch_size):
        input_ids, attention_mask = pad_blocks(blocks[start:start + batch_size], pad_id)
        inputs, labels = mask_tokens(input_ids, generator=step_generator(HELD_OUT_SEED, start), **masking)
        inputs, attention_mask, labels = inputs.to(device), attention_mask.to(device), labels.to(device)
        out = model(inputs, attention_mask, labels, output_attentions=True)
        loss_sum += out.loss_sum.item()
        count += out.count
        ag_sum += guidance.loss(out.attentions, inputs, attention_mask).item()
        batches += 1
    model.train()
    return {"mlm_loss": loss_sum / max(1, count), "ag_loss": ag_sum / batches}



def build_mlm_model(cfg: PretrainConfig, tokenizer) -> tuple["BertForMaskedLM", AttentionGuidance]:
    """A fresh BERT with an MLM head shaped by the config, and the attention guidance its AG run would use."""
    bert_cfg = cfg.model_shape().replace(vocab_size=len(tokenizer), max_position_embeddings=cfg.max_len,
                                         pad_token_id=tokenizer.pad_token_id)
    model = BertForMaskedLM(bert_cfg)  # first: its initialisation draws from the seeded generator
    options = cfg.options
    guidance = AttentionGuidance(cfg.num_attention_heads, options.ag_head_types, options.ag_reduction,
                                 options.ag_boundary, delimiter_ids=(tokenizer.cls_token_id, tokenizer.sep_token_id),
                                 period_ids=tokenizer.convert_tokens_to_ids(["."]))
    return model, guidance


class PretrainJob(Job):
    """Pre-training as the training loop sees it: a segment is `eval_every` steps, each a batch of blocks with
    fresh masks; the loss curve is logged every `log_every` steps and the held-out blocks scored at each end."""

    hint = "try a lower --lr or --ag-scale"
    graphs_fallback = "the number of predicted tokens changes from step to step"

    def __init__(self, cfg: PretrainConfig, train_set: list, eval_set: list, tokenizer, guidance: AttentionGuidance,
                 corpus: dict, out: Path):
        self.cfg, self.train_set, self.eval_set, self.out = cfg, train_set, eval_set, out
        self.tokenizer, self.guidance, self.corpus = tokenizer, guidance, corpus
        make = get_pretrain_method(cfg.method).objective  # the term the method adds to L_MLM, if any
        self.objective = make(cfg.options, guidance, cfg.max_steps) if make else None
        self.masking = {"special_ids": tokenizer.all_special_ids, "mask_token_id": tokenizer.mask_token_id,
                        "vocab_size": len(tokenizer), "mlm_probability": cfg.mlm_probability}
        self.segments = math.ceil(cfg.max_steps / cfg.eval_every)
        self.steps_per_epoch = math.ceil(len(train_set) / cfg.batch_size)
        self.lengths, self.batches, self.batches_epoch = [len(b) for b in train_set], None, -1

    def begin(self, loop) -> None:
        super().begin(loop)
        for key, empty in (("train_curve", []), ("eval_curve", []), ("window", {}), ("eval_seconds", 0.0)):
            loop.state.setdefault(key, empty)
        if not loop.state["eval_curve"]:
            self.score_held_out()  # step 0: the untrained model, ln(vocab) or so

    def check_resume(self, checkpoint: dict) -> None:
        if checkpoint["corpus"] != self.corpus:
            saved, now = checkpoint["corpus"], self.corpus
            raise UsageError(f"{self.out} was trained on another corpus ({saved['source']}, {saved['lines']} lines; "
                             f"now {now['source']}, {now['lines']} lines): use another --output-dir or the same corpus")

    def plan(self, segment: int) -> list:
        every = self.cfg.eval_every
        return list(range(segment * every, min((segment + 1) * every, self.cfg.max_steps)))

    def loss(self, step: int):
        cfg, device = self.cfg, self.loop.accelerator.device
        epoch, index = divmod(step, self.steps_per_epoch)
        if epoch != self.batches_epoch:
            self.batches = batching.epoch_batches(self.lengths, cfg.batch_size, cfg.seed, epoch)
            self.batches_epoch = epoch
        input_ids, attention_mask = pad_blocks([self.train_set[i] for i in self.batches[index]],
                                               self.tokenizer.pad_token_id)
        inputs, labels = mask_tokens(input_ids, generator=step_generator(cfg.seed, step), **self.masking)
        predicted = predicted_positions(labels)  # on the host, where the masks were drawn
        inputs, attention_mask, labels, predicted = batching.to_device((inputs, attention_mask, labels, predicted),
                                                                       device)
        output = self.loop.model(inputs, attention_mask, labels, output_attentions=self.objective is not None,
                                 predicted=predicted)
        record, loss = {"mlm": output.loss}, output.loss
        if self.objective is not None:
            term, extra = self.objective.loss(step, output, inputs, attention_mask)
            record.update(extra)
            loss = output.loss + term
        return loss, loss.detach(), record

    def record(self, record: dict, taken) -> None:
        state, totals = self.loop.state, self.loop.totals
        totals.count(state, ("window", "steps"), taken)
        totals.add(state, ("window", "mlm"), record["mlm"], taken)
        if self.objective is not None:
            self.objective.add_to_window(totals, state, record, taken)

    def after_step(self, state: dict) -> None:
        """The training curve: the mean loss over each window of log_every steps, and the lr at its end."""
        if state["global_step"] % self.cfg.log_every and state["global_step"] != self.cfg.max_steps:
            return
        window = state["window"]
        if window.get("steps"):
            entry = {"step": state["global_step"], "mlm_loss": window["mlm"] / window["steps"],
                     "lr": self.loop.scheduler.get_last_lr()[0]}
            if self.objective is not None:
                entry.update(self.objective.summary(window))
            state["train_curve"].append(entry)
        state["window"] = {}

    def end_segment(self, segment: int, state: dict) -> None:
        self.score_held_out()

    def tracked(self, state: dict) -> dict:
        """The held-out losses just scored (MLM, and AG's guidance)."""
        return scalars({k: v for k, v in state["eval_curve"][-1].items() if k != "step"}, "held_out/")

    def score_held_out(self) -> None:
        state, started = self.loop.state, time.perf_counter()
        state["eval_curve"].append({"step": state["global_step"], **evaluate(
            self.loop.base, self.eval_set, self.cfg.batch_size, self.tokenizer.pad_token_id, self.masking,
            self.guidance, self.loop.accelerator.device)})
        state["eval_seconds"] += time.perf_counter() - started

    def where(self, segment: int, index: int, item) -> str:
        return f"step {segment * self.cfg.eval_every + index + 1}"

    def describe(self, segment: int) -> str:
        return f"pretrain {self.cfg.method} {segment + 1}/{self.segments}"

    def position(self, state: dict) -> str:
        return f"step {state['global_step']}"

    def summary(self, state: dict, status: str) -> dict:
        train, held_out = state["train_curve"], state["eval_curve"]
        final = {"train_mlm_loss": train[-1]["mlm_loss"] if train else None,
                 "eval_mlm_loss": held_out[-1]["mlm_loss"] if held_out else None,
                 "eval_ag_loss": held_out[-1]["ag_loss"] if held_out else None}
        return {"kind": "pretrain", "config": self.cfg.to_dict(), "corpus": self.corpus, "status": status,
                "method": self.cfg.method,
                "train_steps": state["global_step"], "skipped_steps": state["skipped_steps"],
                "parameters": sum(p.numel() for p in self.loop.base.parameters()),
                "train_curve": train, "eval_curve": held_out, "final": final,
                "timing": {"train_seconds": round(state["train_seconds"], 1),
                           "eval_seconds": round(state["eval_seconds"], 1)}}

    def save_final(self) -> None:
        export_model(self.loop.base, self.out, tokenizer_dir(self.cfg.tokenizer))


def pretrain(cfg: PretrainConfig) -> dict:
    """Pre-train, score the held-out blocks every eval_every steps, checkpoint, resume; return metrics.json."""
    out = Path(cfg.output_dir)
    done = finished_run(out, cfg)
    if done is not None:
        return done  # the same command after completion costs nothing
    check_mixed_precision(cfg.mixed_precision)  # fp16 without a GPU
    tokenizer = load_tokenizer(tokenizer_dir(cfg.tokenizer))  # a missing vocabulary stops here, before any file
    accelerator = open_run(cfg, out, "pretrain")
    started = time.perf_counter()
    lines, corpus = load_corpus(cfg)
    read_seconds, started = time.perf_counter() - started, time.perf_counter()
    blocks = cached_blocks(lines, tokenizer, cfg.max_len)
    encode_seconds = time.perf_counter() - started
    if len(blocks) <= cfg.eval_blocks:
        raise UsageError(f"the corpus packs into {len(blocks)} blocks of {cfg.max_len} tokens, not more than "
                         f"eval_blocks={cfg.eval_blocks}: give a larger corpus or a smaller --eval-blocks")
    held_out = set(np.random.default_rng(HELD_OUT_SEED).permutation(len(blocks))[:cfg.eval_blocks].tolist())
    eval_set = [b for i, b in enumerate(blocks) if i in held_out]
    train_set = [b for i, b in enumerate(blocks) if i not in held_out]
    corpus.update(lines=len(lines), train_blocks=len(train_set), eval_blocks=len(eval_set),
                  train_tokens=sum(map(len, train_set)))
    seed_everything(cfg.seed)
    model, guidance = build_mlm_model(cfg, tokenizer)
    job = PretrainJob(cfg, train_set, eval_set, tokenizer, guidance, corpus, out)
    job.data_ready = data_ready_line(read_seconds, encode_seconds, f"{len(lines)} lines packed into "
                                     f"{len(train_set)} training and {len(eval_set)} held-out blocks")
    loop = TrainingLoop(cfg, out, accelerator, model, cfg.max_steps, cfg.warmup_steps, {"corpus": corpus})
    return loop.run(job)
