"""Which task each step of a multitask run trains: the sampling exponent, an epoch's task order and its batches.

The schedules of Stickland & Murray (2019, "BERT and PALs", Sec. 4): round robin, proportional to the tasks'
sizes, and annealed from one to the other. Each is a pure function of (seed, epoch), so a resumed run takes the
same steps (`course_lib.training.multitask` trains on them; notebook 02 derives them).
"""
from __future__ import annotations

import math

import numpy as np

from course_lib.tasks import batching

_SCHEDULE_STREAM = 1  # keeps the schedule's random numbers apart from epoch_batches' (seed, epoch) stream


def schedule_alpha(schedule: str, epoch: int, epochs: int, alpha_end: float = 0.2) -> float:
    """The exponent α of task sampling, p_k ∝ N_k^α (Stickland & Murray 2019, "BERT and PALs", Sec. 4).

    α = 0 is uniform (round robin), α = 1 proportional to dataset size. Annealed sampling lowers α linearly
    from 1 in the first epoch to `alpha_end` in the last (theirs: α = 1 - 0.8 (e - 1)/(E - 1), alpha_end 0.2):
    big tasks dominate early, and small tasks get more of the last epochs instead of being forgotten.
    """
    if schedule == "round_robin":
        return 0.0
    if schedule == "proportional" or epochs == 1:
        return 1.0
    return 1.0 - (1.0 - alpha_end) * epoch / (epochs - 1)


def task_schedule(schedule: str, num_batches: list[int], seed: int, epoch: int, epochs: int,
                  alpha_end: float = 0.2) -> list[int]:
    """The task index of every step of one epoch; an epoch is as many steps as all tasks have batches, S.

    round_robin cycles 0, 1, ..., K-1: equal steps per task, small tasks repeating their data. proportional
    and annealed give task k the share N_k^α / Σ N^α of the S steps (N_k in batches; largest-remainder
    rounding), in a random order. Taking the expected counts exactly, rather than drawing every step
    independently as the paper does, keeps a short run's task mix free of sampling noise; with α = 1 every
    batch of every task is trained exactly once an epoch. A pure function of (seed, epoch), for resume.
    """
    total, K = sum(num_batches), len(num_batches)
    if schedule == "round_robin":
        return [step % K for step in range(total)]
    weights = np.asarray(num_batches, dtype=float) ** schedule_alpha(schedule, epoch, epochs, alpha_end)
    quotas = total * weights / weights.sum()
    counts = np.floor(quotas).astype(int)
    counts[np.argsort(counts - quotas, kind="stable")[: total - counts.sum()]] += 1  # largest remainders
    rng = np.random.default_rng([seed % 2**64, epoch, _SCHEDULE_STREAM])
    return rng.permutation(np.repeat(np.arange(K), counts)).tolist()


def epoch_plan(schedule: str, lengths: list[list[int]], batch_size: int, seed: int, epoch: int, epochs: int,
               alpha_end: float = 0.2, bucket: bool = False) -> list[tuple[int, list[int]]]:
    """The epoch's steps as (task index, rows of that task's epoch features).

    Task k reads an endless stream of shuffled passes over its data (pass p batched by batching.epoch_batches with
    seed + k and 'epoch' p), each epoch going on where the last one stopped; so with one task the batches are
    exactly finetune's. An SSA task's features are relabelled every epoch: its rows index the current list.
    """
    sizes = [math.ceil(len(lens) / batch_size) for lens in lengths]
    read = [0] * len(sizes)  # batches each task has read before this epoch
    for past in range(epoch):
        for k in task_schedule(schedule, sizes, seed, past, epochs, alpha_end):
            read[k] += 1
    passes, plan = {}, []
    for k in task_schedule(schedule, sizes, seed, epoch, epochs, alpha_end):
        p, j = divmod(read[k], sizes[k])
        if (k, p) not in passes:
            passes[k, p] = batching.epoch_batches(lengths[k], batch_size, seed + k, p, shuffle=True, bucket=bucket)
        plan.append((k, passes[k, p][j]))
        read[k] += 1
    return plan
