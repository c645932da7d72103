"""Every report that `python -m benchmarks reproduce` writes from the results archive is rebuilt here from `results/runs/` alone
(each run's metrics.json; nothing is trained) into a temporary folder and must equal the committed file byte for
byte. Where it does not, the test names the first line that differs, the committed line and the rebuilt one.

What is not rebuilt: the date, machine and CPU count of the "Written on" line say when and where the committed file
was written, so the rebuild takes them from that line; everything else, the command lines included, is computed.
A chance level needs the task's dev data (accuracy: the share of the most common label, `reproduce.chance_level`).
DREAM's licence keeps its files out of the repository: without DREAM_DIR its chance level cannot be read, the
rebuild takes that one cell from the committed report, and the test warns that it did.

Which reports: `REPORTS`, every results/*.md whose header names `--from-archive`, with the options of its command
(None: the command's default). `test_every_report_the_command_writes_is_rebuilt` keeps the table complete: each
results/*.md whose first lines name `python -m benchmarks reproduce` is either in it or in `EXCLUDED`, and each archive folder in
results/runs/ feeds a rebuilt report or is named there too. Excluded, because `--from-archive` does not write them:

- `cpu_reproduction_400.md`: the first, superseded reproduction (2026-11-22), written before the archive existed:
  results/runs/ holds none of its runs, and the grid its header names now holds another grid.
- `asa_tau0.3.md`, `ssaf_lambda-4.md`: runs of the families grid with an option since corrected; their archives
  (results/runs/asa_tau0.3, results/runs/ssaf_lambda-4) are real, but the reports are per-seed tables written by
  hand, and their first lines name the command that ran the grid, not one that writes them.
- `cpu_reproduction_summary.md`, `cpu_reproduction_families_summary.md`, `cpu_reproduction_400_summary.md` and
  `README.md`: prose written by hand about the reports above.

Results made by other commands (timings, memory, `python -m benchmarks reference`, ...) name no `python -m benchmarks reproduce` and are out of
scope. It reads metrics.json files and, for the chance levels, dev sets: about 3 s for all eleven on 2 cores
(0.5 s for each of the two largest), after the imports.
"""
import datetime
import re
import types
import warnings
from pathlib import Path

import pytest

from benchmarks import reproduce

pytestmark = pytest.mark.stored_numbers  # CI runs these under other CPU paths too

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
# Made by `--grid ci/grids/<name>.yaml --report results/<name>.md --archive results/runs/<name>`.
FULL_OPTIONS = ("asa_fixed_clip", "asa_fixed_clip_wnut17", "asa_fixed_clip_word_mean_wnut17", "asa_word_mean_wnut17",
                "ssa_authors_cola_rte", "ssa_co_alpha1_cola", "ssa_co_shared_head_rte", "ssa_hybrid_beta05_cola",
                "ssaf_squad_3000")
# report file -> (--grid, --report, --archive) as its command gives them; None: left at the default.
REPORTS = {
    "cpu_reproduction.md": (None, None, None),
    "cpu_reproduction_families.md": ("ci/grids/cpu_reproduction_families.yaml",
                                     "results/cpu_reproduction_families.md", None),
    **{f"{name}.md": (f"ci/grids/{name}.yaml", f"results/{name}.md", f"results/runs/{name}") for name in FULL_OPTIONS},
}
EXCLUDED = {
    "cpu_reproduction_400.md": "superseded; written before the archive, which holds none of its runs",
    "asa_tau0.3.md": "a per-seed table written by hand from results/runs/asa_tau0.3",
    "ssaf_lambda-4.md": "a per-seed table written by hand from results/runs/ssaf_lambda-4",
    "cpu_reproduction_summary.md": "prose written by hand",
    "cpu_reproduction_families_summary.md": "prose written by hand",
    "cpu_reproduction_400_summary.md": "prose written by hand",
    "README.md": "the index of results/, written by hand",
}
EXCLUDED_ARCHIVES = {"asa_tau0.3": "asa_tau0.3.md", "ssaf_lambda-4": "ssaf_lambda-4.md"}
HEADER_LINES = 15  # the header of every report here ends before line 15
WRITTEN_ON = re.compile(r"^Written on (\d{4}-\d\d-\d\d) \(([^,]+), (\d+) CPUs\)", re.M)
UNKNOWN = "unknown (dev data not found here)"


def _options(name: str) -> tuple[Path, Path, str, str]:
    """The grid and archive a report is rebuilt from, and its two command lines as its header gives them."""
    grid, report, archive = REPORTS[name]
    run_line, rebuild_line = reproduce.commands(grid, report, archive)
    grid_path = ROOT / grid if grid else reproduce.DEFAULT_GRID
    archive_path = ROOT / (archive or reproduce.default_archive(grid_path, report or reproduce.DEFAULT_REPORT))
    return grid_path, archive_path, run_line, rebuild_line


def _committed_chance(committed: str, task: str) -> float | None:
    """The chance-level cell of the task's row in the committed report's 'At a glance' table."""
    for line in committed.splitlines():
        if line.startswith(f"| {task} ("):
            cell = line.split("|")[3].strip()
            return None if cell.startswith("unknown") else float(cell)
    return None


def _first_difference(committed: str, rebuilt: str) -> str:
    ours, theirs = committed.split("\n"), rebuilt.split("\n")
    for number, (a, b) in enumerate(zip(ours, theirs), start=1):
        if a != b:
            return f"line {number}:\n  committed: {a}\n  rebuilt:   {b}"
    shorter, longer = ("committed", theirs) if len(ours) < len(theirs) else ("rebuilt", ours)
    line = min(len(ours), len(theirs)) + 1
    return f"line {line}: the {shorter} report ends there; the other goes on with: {longer[line - 1]!r}"


def rebuild(name: str, out: Path, monkeypatch) -> tuple[str, list[str]]:
    """The report rebuilt from its archive into out (never over the committed file), with the committed
    'Written on' date, machine and CPU count; and the tasks whose chance level came from the committed file."""
    committed = (RESULTS / name).read_text(encoding="utf-8")
    written = WRITTEN_ON.search(committed)
    assert written, f"{name}: no 'Written on DATE (MACHINE, N CPUs)' line in its header"
    day, machine, cpus = written.groups()
    monkeypatch.setattr(reproduce, "datetime", types.SimpleNamespace(
        date=types.SimpleNamespace(today=lambda: datetime.date.fromisoformat(day))))
    monkeypatch.setattr(reproduce, "platform", types.SimpleNamespace(machine=lambda: machine))
    monkeypatch.setattr(reproduce, "os", types.SimpleNamespace(cpu_count=lambda: int(cpus)))
    borrowed, read = [], reproduce.chance_level

    def chance_level(rows, metric):
        level = read(rows, metric)
        if level is None and rows:
            borrowed.append(rows[0]["task"])
            return _committed_chance(committed, rows[0]["task"])
        return level

    monkeypatch.setattr(reproduce, "chance_level", chance_level)
    monkeypatch.chdir(out.parent)  # the grid's runs/ folder is named, never made; keep it out of the checkout anyway
    grid, archive, run_line, rebuild_line = _options(name)
    assert archive.is_dir(), f"{name}: no archive at {archive}"
    assert reproduce.reproduce(grid, out=out, command=run_line, archive=archive, from_archive=True,
                               rebuild=rebuild_line) == 0
    return out.read_text(encoding="utf-8"), borrowed


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_a_committed_report_is_what_its_archive_rebuilds(name, tmp_path, monkeypatch, capsys):
    rebuilt, borrowed = rebuild(name, tmp_path / name, monkeypatch)
    capsys.readouterr()  # reproduce prints the report; it is compared below, not shown
    committed = (RESULTS / name).read_text(encoding="utf-8")
    _, _, _, rebuild_line = _options(name)
    assert rebuilt == committed, (f"results/{name} differs from what its archive rebuilds ({rebuild_line}), at "
                                  f"{_first_difference(committed, rebuilt)}")
    if borrowed:
        warnings.warn(f"results/{name}: the chance level of {', '.join(borrowed)} was taken from the committed "
                      "report, its dev data not being here (DREAM: set DREAM_DIR); every other cell was rebuilt")


def test_every_report_the_command_writes_is_rebuilt():
    named = {path.name for path in RESULTS.glob("*.md")
             if re.search(r"benchmarks reproduce|--from-archive",
                          "\n".join(path.read_text(encoding="utf-8").splitlines()[:HEADER_LINES]))}
    assert named - set(REPORTS) - set(EXCLUDED) == set(), "a report names `python -m benchmarks reproduce`: rebuild or exclude it"
    assert set(REPORTS) | set(EXCLUDED) <= {path.name for path in RESULTS.glob("*.md")}
    from_archive = {path.name for path in RESULTS.glob("*.md")
                    if "--from-archive" in "\n".join(path.read_text(encoding="utf-8").splitlines()[:5])}
    assert from_archive == set(REPORTS), "the reports whose header names --from-archive are the ones rebuilt here"
    fed = {_options(name)[1].name for name in REPORTS}
    archives = {path.name for path in (RESULTS / "runs").iterdir() if path.is_dir()}
    assert archives - fed == set(EXCLUDED_ARCHIVES), "every archive feeds a rebuilt report or is excluded"
    assert set(EXCLUDED_ARCHIVES.values()) <= set(EXCLUDED)
