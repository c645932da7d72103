"""The one training loop: what fine-tuning, multitask training and MLM pre-training have in common.

minGPT's `Trainer` knows nothing about GPT; this loop knows nothing about tasks or methods. It owns the run's
machinery: accelerate, AdamW with BERT's parameter groups, the warmup/decay schedule, gradient clipping, the
guarded step (a non-finite loss stops the run or skips the step), checkpoints and resume, the progress bar and
`metrics.json`. A `Job` supplies the rest: the steps of each segment (an epoch, or an evaluation interval of
pre-training), each step's loss, what to do at a segment's end (evaluate) and the summary that metrics.json
holds.

Output folder, every file written atomically: `checkpoint.pt` (model, optimiser, schedule, RNG, position) while
the run is going, `metrics.json` (config, history, final metrics), and the job's final weights at the end (the
checkpoint is then removed unless keep_checkpoint). The same command after an interruption resumes from the last
checkpoint; after completion it returns the finished run's metrics at once.
"""
from __future__ import annotations

import functools
import signal
import time
from pathlib import Path

import torch
from accelerate import Accelerator

from course_lib.runtime.compiled import check_compile, compile_modules
from course_lib.runtime.errors import Preempted, RunFailed, UsageError
from course_lib.fast import optimize
from course_lib.runtime.repro import (CHECKPOINT, METRICS, ProgressLines, check_writable_dir, log_line, progress,
                                      progress_lines_wanted, progress_seconds, remove_stale_temporaries,
                                      restore_training_state, save_torch, training_state, write_json)
from course_lib.runtime.run_folder import check_same_run, lock_run_folder, read_checkpoint, unlock_run_folder
from course_lib.runtime.tracking import log_with, scalars, tracker_config


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices only: biases and LayerNorm parameters (all 1-D) are left alone, as in BERT."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def linear_warmup_decay(optimizer, warmup_steps: int, total_steps: int):
    """lr factor rises linearly 0 → 1 over warmup, then falls linearly to 0 at the last step."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def skips_on_device(optimizer) -> bool:
    """Whether the optimiser takes a `found_inf` flag and skips its update on the device (torch's fused Adam and
    AdamW do: the gradient scaler's mechanism). The training loops use fused AdamW."""
    inner = getattr(optimizer, "optimizer", optimizer)  # under accelerate's wrapper
    return bool(getattr(inner, "defaults", {}).get("fused"))


def guarded_step(loss: torch.Tensor, value: torch.Tensor, accelerator: Accelerator, model, optimizer,
                 max_grad_norm: float, clipped: list | None = None) -> torch.Tensor:
    """Backward, clip and step, with the update skipped when the loss `value` (a detached 0-d tensor) is not
    finite; returns whether the step was taken, as a tensor on the device: nothing here waits for the GPU.

    The clip scales the gradients of `clipped` (None: every parameter of the model) to a global norm of at
    most max_grad_norm; the method decides which (`Job.clipped_parameters`: ASA leaves its adversaries out).
    A non-finite step still runs backward (its gradients are thrown away) and hands the optimiser a
    `found_inf` flag, so the weights, moments and step count stay as they were, as under a gradient scaler.
    An optimiser without that flag reads the value on the host instead (one read, before backward).
    """
    taken = torch.isfinite(value)
    on_device = skips_on_device(optimizer)
    if not on_device and not bool(taken):
        optimizer.zero_grad(set_to_none=True)
        return taken
    accelerator.backward(loss)
    if max_grad_norm > 0:
        accelerator.clip_grad_norm_(model.parameters() if clipped is None else clipped, max_grad_norm)
    if on_device:
        getattr(optimizer, "optimizer", optimizer).found_inf = (~taken).to(torch.float32)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return taken


class DeviceTotals:
    """Running sums a training step adds to without waiting for the GPU; `read` copies them into the loop's
    state, all in one transfer, once per logging window.

    A sum is named by its path in the state (("epoch_loss",), ("epoch_stats", "masked_fraction")); it starts
    from the state's value there, so reading and going on adds the same numbers in the same order as adding
    on the host after every step (float64, bit for bit). A value of a step not taken adds 0.
    """

    def __init__(self):
        self.sums: dict[tuple, torch.Tensor] = {}

    def add(self, state: dict, path: tuple, value, taken: torch.Tensor) -> None:
        """Add `value` (a tensor, or a list of 0-d tensors: one per layer) to the sum at `path`."""
        if isinstance(value, list):
            value = torch.stack(list(value))
        self._accumulate(state, path, torch.where(taken, value.detach().to(torch.float64), 0.0))

    def count(self, state: dict, path: tuple, flag: torch.Tensor) -> None:
        """Add 1 to the count at `path` where the boolean `flag` is set."""
        self._accumulate(state, path, flag.to(torch.float64))

    def _accumulate(self, state: dict, path: tuple, value: torch.Tensor) -> None:
        if path not in self.sums:
            self.sums[path] = _on_device(_at(state, path), value.device)
        self.sums[path] = self.sums[path] + value

    def read(self, state: dict, extra: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
        """Write every sum into `state` (a number, or a list for a per-layer sum) and forget it; return the
        `extra` tensors' values (0-d), read in the same transfer."""
        extra = extra or {}
        parts = [*self.sums.values(), *extra.values()]
        if not parts:
            return {}
        flat = torch.cat([t.reshape(-1).to(torch.float64) for t in parts]).tolist()  # the window's one read
        at = 0
        for path, total in self.sums.items():
            n = total.numel()
            _put(state, path, flat[at] if total.ndim == 0 else flat[at:at + n])
            at += n
        self.sums = {}
        return dict(zip(extra, flat[at:]))


def add_stats(totals: DeviceTotals, state: dict, sums: tuple, seen: tuple, stats: dict, taken) -> None:
    """Add a step's method statistics to the sums at `sums` + (key,). A statistic given as (value, present)
    (SSA's token loss, in a batch with a labelled token) also counts the steps it was present in at
    `seen` + (key,), so that a segment where it never was can leave it out (`present_stats`)."""
    for key, value in stats.items():
        if isinstance(value, tuple):
            value, present = value
            totals.count(state, (*seen, key), taken & present)
        totals.add(state, (*sums, key), value, taken)


def present_stats(sums: dict, seen: dict) -> dict:
    """The statistics of `add_stats` that were present in at least one step taken."""
    return {key: value for key, value in sums.items() if seen.get(key, 1) > 0}


def _on_device(start, device) -> torch.Tensor:
    """A value already read (None, a number or a per-layer list) as a float64 tensor on `device`, made there by
    `torch.full` (a copy from host memory would wait for the device)."""
    full = functools.partial(torch.full, (), dtype=torch.float64, device=device)
    if isinstance(start, list):
        return torch.stack([full(float(v)) for v in start])
    return full(0.0 if start is None else float(start))


def _at(state: dict, path: tuple):
    for key in path:
        if not isinstance(state, dict) or key not in state:
            return None
        state = state[key]
    return state


def _put(state: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        state = state.setdefault(key, {})
    state[path[-1]] = value


STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # a scheduler's "stop soon": checkpoint, then exit


def allow_new_precision(mixed_precision: str) -> None:
    """Let a second run in the same process (a notebook's kernel) use another mixed precision than the first.

    accelerate keeps one state per process and refuses to change its precision once set (a bf16 run followed
    by an fp32 one raised "AcceleratorState has already been initialized"). In a single process nothing else
    holds that state, so it is cleared (accelerate's `_reset_state`, as its own tests do between cases); the
    process group (`PartialState`) is kept. Under a multi-process launch the launcher sets the precision.
    """
    from accelerate.state import AcceleratorState, PartialState

    current = AcceleratorState._shared_state.get("_mixed_precision")
    if current is not None and current != mixed_precision and PartialState().num_processes == 1:
        AcceleratorState._reset_state()


def open_run(cfg, out: Path, command: str | None = None) -> Accelerator:
    """The checks and set-up before data or model: the folder is writable, `compile` can run here (CUDA graphs
    need a GPU), and the accelerator; `command` names a loop that runs in one process only (launched in more, it
    refuses)."""
    check_writable_dir(out)  # here, not at the first checkpoint an epoch later
    progress_seconds()  # a bad $ATTENTION_LAB_PROGRESS_SECONDS stops here
    check_compile(cfg.compile)
    allow_new_precision(cfg.mixed_precision)
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=cfg.mixed_precision,
                              log_with=log_with(getattr(cfg, "report_to", "none"), out), project_dir=str(out))
    if command is not None and accelerator.num_processes > 1:
        raise UsageError(f"{command} runs in one process; it was launched in {accelerator.num_processes} "
                         f"(run it with python -m course_lib {command})")
    return accelerator


def data_ready_line(read_seconds: float, encode_seconds: float, what: str) -> str:
    """The line a run's log shows once its data is read and encoded, before its first step: where the time went
    before training (on a large task, minutes), and how much data there is."""
    return f"data ready: read {read_seconds:.1f} s, encoded {encode_seconds:.1f} s ({what})"


class Job:
    """What one kind of training supplies to `TrainingLoop`; the loop calls these in this order.

    segments: how many segments the run has (epochs; pre-training's evaluation intervals). Per segment:
    `plan(s)` lists its steps; per step `loss(item)` gives (loss to backpropagate, its value as a detached 0-d
    tensor, the step's record of tensors), `record(rec, taken)` adds the record to the loop's `DeviceTotals`
    (a step not taken adds nothing), `after_step(state)` runs after every step, once the state holds what was
    read; then `end_segment(s, state)` evaluates and appends to state["history"]. `summary(state, status)` is
    metrics.json. Nothing a step does may read a tensor on the host: the loop reads once per logging window.
    """

    segments: int = 1
    hint = "try a lower --lr"  # what the non-finite loss message suggests
    data_ready: str | None = None  # the log's `data ready` line (`data_ready_line`), printed before the first step

    def plan(self, segment: int) -> list:
        raise NotImplementedError

    def loss(self, item) -> tuple[torch.Tensor, torch.Tensor, dict]:
        raise NotImplementedError

    def record(self, record: dict, taken: torch.Tensor) -> None:
        """Add the step's numbers to the loop's device totals (`self.loop.totals`), for a step taken only."""

    def after_step(self, state: dict) -> None:
        """Runs after every step, taken or skipped, once what the step added has been read if it ended a logging
        window (pre-training logs its loss curve here)."""

    def end_segment(self, segment: int, state: dict) -> None:
        raise NotImplementedError

    def summary(self, state: dict, status: str) -> dict:
        raise NotImplementedError

    def save_final(self) -> None:
        raise NotImplementedError

    def where(self, segment: int, index: int, item) -> str:
        return f"epoch {segment + 1}, step {index + 1}"

    def describe(self, segment: int) -> str:
        return f"epoch {segment + 1}/{self.segments}"

    def position(self, state: dict) -> str:
        """Where a resumed run stands: the segment it is in and the steps of it already done."""
        return f"epoch {state['epoch'] + 1}, step {state['step_in_epoch']}"

    def postfix(self, item, value: float) -> dict:
        """The progress bar's numbers after a logging window: `value` is its mean loss, `item` its last step."""
        return {"loss": f"{value:.4f}"}

    def check_resume(self, checkpoint: dict) -> None:
        """Refuse a checkpoint that the config check cannot catch (pre-training: another corpus)."""

    def clipped_parameters(self, model: torch.nn.Module) -> list | None:
        """The parameters the gradient clip covers; None: all of the model's."""
        return None

    graphs_fallback: str | None = None  # why this job's step cannot be a CUDA graph (data-dependent shapes)

    def compiled_modules(self, model: torch.nn.Module) -> list:
        """The modules `compile` compiles: the model, unless the job calls parts of it directly."""
        return [model]

    def begin(self, loop: "TrainingLoop") -> None:
        """Called once the model is prepared, before the first step: keep `loop` (its model, base, state)."""
        self.loop = loop

    def tracked(self, state: dict) -> dict:
        """What the trackers get at a segment's end (`report_to`): the numbers of the epoch's history entry."""
        return scalars(state["history"][-1], "epoch/") if state["history"] else {}


class TrainingLoop:
    """One run's machinery around a `Job`: optimiser, schedule, guarded steps, checkpoints, metrics.json.

    `state` is what a checkpoint restores: the position (segment, step in it, global step), the history, the
    training seconds and skipped steps, plus whatever running sums the job keeps in it.
    """

    def __init__(self, cfg, out: Path, accelerator: Accelerator, model: torch.nn.Module, total_steps: int,
                 warmup_steps: int, extra_checkpoint: dict | None = None):
        self.cfg, self.out, self.accelerator, self.model = cfg, out, accelerator, model
        if cfg.fast_kernels and cfg.compile == "off":  # compiled, the compiler's own kernels
            optimize(model)
        self.optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.999),
                                           eps=1e-8, fused=True)  # one kernel for all parameters: ~5x faster on CPU
        self.scheduler = linear_warmup_decay(self.optimizer, warmup_steps, total_steps)
        self.total_steps, self.lines, self._last_loss = total_steps, None, None  # for the log's progress lines
        self.ckpt_path = out / CHECKPOINT
        self.extra_checkpoint = extra_checkpoint or {}  # saved beside the state (pre-training: its corpus)
        self.state = {"epoch": 0, "step_in_epoch": 0, "global_step": 0, "history": [], "train_seconds": 0.0,
                      "skipped_steps": 0}
        self.base = model  # the unwrapped model, once accelerate has prepared it
        self.clipped = None  # the parameters the gradient clip covers (None: all), as the job says at the start
        self.totals = DeviceTotals()  # what the steps add up on the device between reads
        self._window: dict[int, tuple] = {}  # global step -> (segment, index, item), for the steps not yet read
        self._first_bad = self._bad_value = None  # the window's first non-finite step and its loss (device)
        self.job: Job | None = None
        self._previous_handlers, self._stop_signal = {}, None  # stop signals caught while `run` trains
        self.tracking = getattr(cfg, "report_to", "none") != "none"  # live curves to the accelerator's trackers

    def run(self, job: Job) -> dict:
        """Resume if a checkpoint is there, train every remaining segment, write the final files; return
        the metrics.json content."""
        if self.accelerator.is_main_process:
            lock_run_folder(self.out)  # before anything is written or removed: the folder may be another run's
            remove_stale_temporaries(self.out)
        self.job = job
        try:
            self._resume(job)
            self._catch_stop_signals()
            self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)
            self.base = self.accelerator.unwrap_model(self.model)
            self.clipped = job.clipped_parameters(self.base)
            self._compile(job)
            job.begin(self)
            main = self.accelerator.is_main_process
            if main and job.data_ready is not None:
                log_line(job.data_ready)
            self.lines = ProgressLines(self.total_steps, self.state["global_step"], main and progress_lines_wanted())
            if self.tracking:
                self.accelerator.init_trackers(self.out.name, config=tracker_config(self.cfg.to_dict()))
            while self.state["epoch"] < job.segments:
                segment = self.state["epoch"]
                self._train_segment(job, segment)
                job.end_segment(segment, self.state)
                self.track(job.tracked(self.state))
                self.state.update(epoch=segment + 1, step_in_epoch=0)
                self.save_checkpoint()
                self.write_metrics(job, "running")
            result = self.write_metrics(job, "complete")
            if self.accelerator.is_main_process:  # keep the final weights; drop the optimiser state unless asked
                job.save_final()
                if not self.cfg.keep_checkpoint:
                    self.ckpt_path.unlink(missing_ok=True)
            return result
        finally:
            for signum, handler in self._previous_handlers.items():
                signal.signal(signum, handler)
            if self.tracking:
                self.accelerator.end_training()
            unlock_run_folder(self.out)  # released however the run ends

    def _compile(self, job: Job) -> None:
        """The `compile` option on the job's modules; a job whose step has data-dependent shapes compiles
        `graphs` as `default`, with dynamic shapes, and says so."""
        how = self.cfg.compile
        if how == "graphs" and job.graphs_fallback is not None:
            self.accelerator.print(f"compile graphs: {job.graphs_fallback}; this run compiles as default")
            how = "default"
        compile_modules(job.compiled_modules(self.base), how, dynamic=job.graphs_fallback is not None or None)

    def _catch_stop_signals(self) -> None:
        """A scheduler's stop request (SIGTERM; SIGUSR1, Slurm's usual --signal) ends the run at the next step
        boundary with a checkpoint (`_stop_if_asked`) instead of killing it mid-step."""
        for signum in STOP_SIGNALS:
            try:
                self._previous_handlers[signum] = signal.signal(signum, self._ask_to_stop)
            except ValueError:  # not the main thread: the signal keeps its handler
                pass

    def _ask_to_stop(self, signum, frame) -> None:
        self._stop_signal = signal.Signals(signum).name

    def _stop_if_asked(self, started: float, window_read: bool) -> None:
        """Several processes agree on stopping at window reads only: asking the others is a read of its own."""
        asked = self._stop_signal is not None
        if self.accelerator.num_processes > 1:  # every process stops at the same step, or none does
            if not window_read:
                return
            flag = torch.tensor([float(asked)], device=self.accelerator.device)
            asked = self.accelerator.reduce(flag, reduction="sum").item() > 0
        if not asked:
            return
        self.state["train_seconds"] += time.perf_counter() - started
        self.save_checkpoint()
        raise Preempted(f"{self._stop_signal or 'a stop signal'} at step {self.state['global_step']}: checkpoint "
                        f"saved in {self.out}; run the same command to resume")

    def _resume(self, job: Job) -> None:
        """Restore model, optimiser, schedule, RNGs and position from the checkpoint, if there is one; a
        checkpoint of another configuration is refused (`check_same_run`)."""
        if not self.ckpt_path.exists():
            return
        checkpoint = read_checkpoint(self.ckpt_path)
        check_same_run(checkpoint["config"], self.cfg, self.out)
        job.check_resume(checkpoint)
        restore_training_state(checkpoint, self.model, self.optimizer, self.scheduler)
        self.state = checkpoint["state"]
        self.accelerator.print(f"resuming {self.out} at {job.position(self.state)}")

    def _train_segment(self, job: Job, segment: int) -> None:
        """Every remaining step of one segment: the job's loss, the guarded step, the schedule, the bar, a read
        of the device totals every `log_every` steps and at the segment's end, and mid-segment checkpoints
        every `save_every` steps when the config asks for them."""
        state, cfg = self.state, self.cfg
        items = job.plan(segment)
        self.model.train()
        save_every = getattr(cfg, "save_every", 0)
        started = time.perf_counter()
        bar = progress(total=len(items), initial=state["step_in_epoch"], desc=job.describe(segment))
        for index in range(state["step_in_epoch"], len(items)):
            loss, value, record = job.loss(items[index])
            taken = guarded_step(loss, value, self.accelerator, self.model, self.optimizer, cfg.max_grad_norm,
                                 self.clipped)
            job.record(record, taken)
            self._watch(value, taken, (segment, index, items[index]))
            self.scheduler.step()
            state["step_in_epoch"] += 1
            state["global_step"] += 1
            bar.update()
            window_read = state["step_in_epoch"] == len(items) or state["global_step"] % cfg.log_every == 0
            if window_read:
                self.read(bar)
            if window_read or self.lines.due():  # a log's line: the bar's numbers, the loss last read
                self.lines.write(state["global_step"], segment + 1, self._last_loss, self.scheduler.get_last_lr()[0])
            job.after_step(state)
            if save_every and state["global_step"] % save_every == 0 and state["step_in_epoch"] < len(items):
                state["train_seconds"] += time.perf_counter() - started
                started = time.perf_counter()
                self.save_checkpoint()
            self._stop_if_asked(started, window_read)
        bar.close()
        state["train_seconds"] += time.perf_counter() - started

    def _watch(self, value: torch.Tensor, taken: torch.Tensor, position: tuple) -> None:
        """The loop's own sums of a step: the window's loss for the bar, the skipped steps, the first bad one."""
        state, step = self.state, self.state["global_step"] + 1
        self.totals.add(state, ("log_window", "loss"), value, taken)
        self.totals.count(state, ("log_window", "steps"), taken)
        self.totals.count(state, ("skipped_steps",), ~taken)
        if self._first_bad is None:
            self._first_bad = torch.full((), -1.0, dtype=torch.float64, device=value.device)
            self._bad_value = torch.zeros((), dtype=torch.float64, device=value.device)
        first = ~taken & (self._first_bad < 0)
        self._first_bad = torch.where(first, float(step), self._first_bad)
        self._bad_value = torch.where(first, value.detach().to(torch.float64), self._bad_value)
        self._window[step] = position

    def read(self, bar=None) -> None:
        """Copy the window's device totals into the state (one read). A non-finite step in it stops the run
        here under on_nonfinite_loss=stop, naming the step; the last good checkpoint on disk is untouched."""
        if not self._window:
            return
        got = self.totals.read(self.state, {"first_bad": self._first_bad, "bad_value": self._bad_value})
        window, self._window, self._first_bad = self._window, {}, None
        self.state["skipped_steps"] = int(self.state.get("skipped_steps", 0))
        logged = self.state.pop("log_window", {})
        if got["first_bad"] >= 0 and self.cfg.on_nonfinite_loss == "stop":
            segment, index, item = window[int(got["first_bad"])]
            kept = (f"the last good checkpoint is kept in {self.ckpt_path}" if self.ckpt_path.exists()
                    else "no checkpoint was written yet")
            raise RunFailed(f"loss is {got['bad_value']} at {self.job.where(segment, index, item)}; {kept} "
                            f"({self.job.hint}, or --on-nonfinite-loss skip)")
        if logged.get("steps"):
            self._last_loss = logged["loss"] / logged["steps"]
            self.track({"train/loss": logged["loss"] / logged["steps"], "train/lr": self.scheduler.get_last_lr()[0]})
        if bar is not None and logged.get("steps"):
            bar.set_postfix(**self.job.postfix(window[max(window)][2], logged["loss"] / logged["steps"]))

    def track(self, values: dict) -> None:
        """Log numbers to the run's trackers at the current step (`report_to`; nothing when it is none)."""
        if self.tracking and values:
            self.accelerator.log(values, step=self.state["global_step"])

    def save_checkpoint(self) -> None:
        self.read()  # the state a checkpoint holds is the one read from the device
        if self.accelerator.is_main_process:
            save_torch(self.ckpt_path, {"config": self.cfg.to_dict(), **self.extra_checkpoint, "state": self.state,
                                        **training_state(self.base, self.optimizer, self.scheduler)})
        self.accelerator.wait_for_everyone()

    def write_metrics(self, job: Job, status: str) -> dict:
        result = job.summary(self.state, status)
        if self.accelerator.is_main_process:
            write_json(self.out / METRICS, result)
        return result
