"""bench memory: each run in its own process under the setting it names, ours and transformers' side by side."""
import pytest

from benchmarks import memory


@pytest.fixture(scope="module")
def two_step_runs():
    """Ours and transformers' SST-2 model, two steps and one evaluation batch, under each setting."""
    return {"threads": 2, "steps": 2, "eval_batches": 1, "goal": memory.GOAL,
            "runs": [memory._in_fresh_process("sst2", who, mode, 2, 1, None)
                     for mode in memory.MODES for who in ("ours", "hf")]}


def test_each_run_takes_the_setting_it_names(two_step_runs):
    for run in two_step_runs["runs"]:
        assert run["kept"] is (run["mode"] == "1"), run
        assert run["peak_gb"] > 0.1 and len(run["tokens"]) == 2, run


def test_the_two_contestants_train_on_the_same_batches(two_step_runs):
    tokens = {(r["mode"], r["who"]): r["tokens"] for r in two_step_runs["runs"]}
    assert len({tuple(t) for t in tokens.values()}) == 1, tokens


def test_the_table_has_a_row_per_setting_and_a_verdict(two_step_runs):
    table = memory.format_memory(two_step_runs)
    assert table.count("| SST-2, 128 tokens, batch 32 |") == 2
    assert "SST-2, default setting (auto): ours" in table and "the goal of at most 1.2x" in table
    assert table.count("(the default's pick)") == 1


def test_auto_keeps_for_short_batches_only():
    """SST-2's batch of 32 x 128 tokens keeps freed memory by default; SQuAD's 16 x 384 does not."""
    assert memory.CASES["sst2"].default_mode() == "1" and memory.CASES["squad"].default_mode() == "0"
