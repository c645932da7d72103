"""Side by side in one process: glue-submission's prediction of SST-2's test rows against `predict` on the same
rows written to a TSV file, each with its model load, alternating which goes first (results/glue_submission.md).

    .venv/bin/python ci/glue_predict_speed.py RUN_DIR    # a finished SST-2 run, e.g. the GLUE smoke grid's
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

from course_lib.lab.glue_submission import predict_rows
from course_lib.lab.glue_test_splits import TEST_SPLITS, read_test
from course_lib.training.predict import predict_file


def main(run: Path, repeats: int = 10) -> None:
    rows = read_test(TEST_SPLITS["SST-2"])
    tsv = Path(tempfile.mkdtemp()) / "sst2_test_rows.tsv"
    tsv.write_text("index\tsentence\n" + "".join(f"{i}\t{ex.texts[0]}\n"  # GLUE's sentences hold no tab
                                                 for i, ex in zip(rows.indices, rows.examples)))
    calls = {"glue-submission": lambda: predict_rows(run, ["SST-2"], {"SST-2": rows}, None),
             "predict": lambda: predict_file(run, tsv, tsv.with_suffix(".jsonl"))}
    calls["predict"]()  # one warm-up: the first load reads the weights from disk
    times = {name: [] for name in calls}
    for i in range(repeats):
        for name in (list(calls) if i % 2 else list(calls)[::-1]):
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    for name, seconds in times.items():
        print(f"{name}: median {statistics.median(seconds):.2f} s over {repeats} (model load + {len(rows.indices)} rows)")
    ratio = statistics.median(times["glue-submission"]) / statistics.median(times["predict"])
    print(f"glue-submission / predict: {ratio:.2f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
