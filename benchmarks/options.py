"""Each benchmark's options, declared once as a settings model: its `python -m benchmarks WHAT` flags, their help,
defaults and ranges (`course_lib.runtime.command_line` makes the flags; the model checks what is given)."""
from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from course_lib.runtime.errors import UsageError
from course_lib.runtime.settings import Settings


def _shard(text: str | None) -> str | None:
    from course_lib.lab.sweep import parse_shard

    if text is not None:
        parse_shard(text)  # I/N with 0 <= I < N, or one line saying so
    return text


def _seeds(text: str) -> str:
    """`--seeds 0,1,2`: a comma list of at least one integer."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds:
        raise UsageError(f"--seeds must be a comma list of integers, got {text!r}")
    return text


class Bench(Settings):
    """What every bench takes: its output as a markdown table or as JSON."""

    what: ClassVar[str]  # the bench's name, for a module that runs several (benchmarks.suite)
    as_json: bool = Field(False, description="print JSON instead of a markdown table",
                          json_schema_extra={"flag": "--json"})


class ModelBench(Bench):
    model: str | None = Field(None, description="BERT folder or hub id (default: the packaged MiniLM)")


class Threads(Settings):
    threads: int | None = Field(None, ge=1, description="torch threads (default: torch's choice); 1 is steadier on "
                                "cores other jobs share")
    batch_size: int = Field(32, ge=1)


class Sparsemax(Bench, Threads):
    what = "sparsemax"
    seq_lens: list[int] | None = Field(None, description="the sequence length (default: 128)")
    repeats: int = Field(10, ge=1, description="timed repeats")


class Speed(ModelBench, Threads):
    what = "speed"
    seq_lens: list[int] | None = Field(None, description="sequence lengths (default: 64 128)")
    repeats: int = Field(10, ge=1, description="timed repeats")
    qa_batch_size: int = Field(8, ge=1, description="questions per batch of the span-QA case")
    compile: bool = Field(False, description="also time the plain encoder under torch.compile (the compile=default "
                          "run option) against it eager")


class Methods(ModelBench, Threads):
    what = "methods"
    seq_lens: list[int] | None = Field(None, description="the sequence length (default: 64)")
    repeats: int = Field(10, ge=1, description="timed repeats")
    fast_kernels: bool = Field(True, description="swap the CPU kernels in (fast.optimize) as training does")
    epoch_examples: int = Field(512, ge=1, description="sentences in the SSA epoch")
    glue_dir: str | None = Field(None, description="SST-2 sentences from here (default: $GLUE_DIR, else data/glue)")


class Diagnostics(ModelBench):
    methods: str | None = Field(None, description="comma list (default: all fine-tuning methods)")
    seeds: str = Field("0,1,2", description="comma list of seeds")
    quick: bool = Field(False, description="the smoke budget (tiny data, for tests)")

    _seeds_parse = field_validator("seeds")(_seeds)
    output_dir: str | None = Field(None, description="run folders, reused if there (default runs/diagnostics)")


class Reproduce(Settings):
    grid: str | None = Field(None, description="the sweep grid (default ci/grids/cpu_reproduction.yaml)")
    report: str | None = Field(None, description="where the report goes (default results/cpu_reproduction.md)")
    output_dir: str | None = Field(None, description="run folders, reused if there (default runs/sweep/<grid name>)")
    shard: str | None = Field(None, description="run only the I-th of N parts", json_schema_extra={"metavar": "I/N"})
    archive: str | None = Field(None, description="the results archive, where each run's metrics.json (only that "
                                "file) is copied as the run completes, DIR/<run folder>/metrics.json (default: "
                                "runs/<grid name> beside the report, results/runs/cpu_reproduction)",
                                json_schema_extra={"metavar": "DIR"})
    from_archive: bool = Field(False, description="rebuild the report from the archive (--archive) alone, running "
                               "nothing")

    _shard_parses = field_validator("shard")(_shard)

    @model_validator(mode="after")
    def _nothing_ignored(self):
        if self.from_archive and (self.shard is not None or self.output_dir is not None):
            raise UsageError("--from-archive runs nothing: drop --shard and --output-dir (the archive is --archive "
                             "DIR)")
        return self


class Squad(ModelBench):
    squad_file: str | None = Field(None, description="the SQuAD v1.1 dev file to split by article (default: "
                                   "$SQUAD_DIR, else data/squad)")
    train_questions: int = Field(2000, ge=0, description="a seeded subset of the training articles' questions (0: all)")
    epochs: int | None = Field(None, ge=1, description="training epochs (default 2)")
    output_dir: str | None = Field(None, description="run folders, reused if there (default runs/bench/squad)")


class Reference(ModelBench):
    task: Literal["wnut17", "dream"] | None = Field(None, description="wnut17 (data/ or WNUT17_DIR) or dream "
                                                    "(DREAM_DIR)")
    seeds: str = Field("0,1,2", description="comma list of seeds")
    epochs: int | None = Field(None, ge=1, description="training epochs (default: the task's budget)")

    _seeds_parse = field_validator("seeds")(_seeds)
    output_dir: str | None = Field(None, description="run folders, reused if there (default "
                                   "runs/bench/reference/<task>)")


class Predict(ModelBench, Threads):
    sentences: int = Field(10000, ge=1, description="SST-2 training sentences predicted")
    repeats: int = Field(3, ge=1, description="timed rounds, each running both")
    run: str | None = Field(None, description="a finished SST-2 run (default: a short one trained once into the "
                            "output folder)")
    glue_dir: str | None = Field(None, description="SST-2 from here (default: $GLUE_DIR, else data/glue)")
    output_dir: str | None = Field(None, description="the run and the files (default runs/bench/predict)")


class Memory(ModelBench):
    repeats: int = Field(10, ge=1, description="training steps per run")


class Contention(Bench):
    busy: list[int] = Field([0, 1, 2], description="how many busy programs run beside, one case each")

    @field_validator("busy")
    @classmethod
    def _quiet_first(cls, busy: list[int]) -> list[int]:
        """The quiet case (0 busy) comes first, since every ratio is to it."""
        if not busy or busy[0] != 0 or min(busy) < 0 or len(set(busy)) != len(busy):
            raise UsageError(f"--busy {' '.join(map(str, busy))}: give distinct counts of busy programs starting "
                             "with 0 (the quiet case every ratio is taken to), e.g. --busy 0 1 2")
        return busy
    rounds: int = Field(2, ge=1, description="rounds, each running every setting and load")
    repeats: int = Field(4, ge=1, description="timed steps per run")
    batch_size: int = Field(32, ge=1)
    seq_len: int = Field(64, ge=1)
