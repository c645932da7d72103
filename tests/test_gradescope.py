"""Gradescope's autograder end to end (staff only, not in the student copy): the zip `assignment build --gradescope`
writes, unpacked as Gradescope lays it out (source/, submission/, results/), and its run_autograder run on four
submissions in a venv that holds only the packages setup.sh installs: the reference's files earn 64/64, the stub copy
nothing, a copy with answers put back exactly their points (and `assignment grade` gives that copy the same), and a
syntax error costs its file's questions only. results.json is held to Gradescope's documented keys and types."""
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from course_lib.teaching import assignment, gradescope, submission

RESTORED = ("q1b", "q3c", "q4b")  # answers put back into one student copy (q4b: without q1 and q4a, which
#   its checks must not need)
CRASHED = "q2a"  # in that copy, the stub of this question kills its process
BROKEN = "course_lib/model/bert.py"  # q1b, q1c, q1d: a syntax error in this file of an otherwise full submission
TOP_KEYS = {"score": (int, float), "execution_time": (int, float), "output": str, "visibility": str,
            "stdout_visibility": str, "extra_data": dict, "tests": list}  # Gradescope's results.json, top level
TEST_KEYS = {"score": (int, float), "max_score": (int, float), "status": str, "name": str, "output": str,
             "visibility": str, "number": str, "tags": list, "extra_data": dict}  # and each test
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}


def requirement_names(dist) -> list[str]:
    return [re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or [] if "extra ==" not in r]


def installed_closure(names) -> dict[str, metadata.Distribution]:
    """The distributions pip would install for `names`: them and what they require, as this venv has them."""
    found, todo = {}, list(names)
    while todo:
        try:
            dist = metadata.distribution(todo.pop())
        except metadata.PackageNotFoundError:  # a requirement for another platform or Python
            continue
        if dist.metadata["Name"].lower() not in found:
            found[dist.metadata["Name"].lower()] = dist
            todo += requirement_names(dist)
    return found


def setup_sh_venv(folder: Path) -> Path:
    """A venv holding only setup.sh's packages and their requirements, linked from this one (nothing downloaded):
    Gradescope's image as setup.sh leaves it. Returns its bin/ folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python*/site-packages"))
    for dist in installed_closure(gradescope.GRADING_PACKAGES).values():
        for top in sorted({f.parts[0] for f in dist.files} - {"..", "__pycache__"}):
            if not (site / top).exists():
                (site / top).symlink_to(Path(dist.locate_file(top)).resolve())
    return folder / "bin"


def unpack(zip_path: Path, root: Path) -> None:
    """Lay the zip out as Gradescope does: its files in source/ (modes kept), run_autograder copied to the top."""
    with zipfile.ZipFile(zip_path) as archive:
        for info in archive.infolist():
            target = root / "source" / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(info))
            target.chmod(info.external_attr >> 16 & 0o777)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    (root / "results").mkdir()


def question_files() -> list[str]:
    return list(submission.question_files(assignment.manifest()["questions"]))  # the manifest's order


def fill_reference(sub: Path, student: Path) -> None:
    """Only the files that hold questions, at their paths, as the reference has them."""
    for path in question_files():
        (sub / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(assignment.ROOT / path, sub / path)


def fill_stub(sub: Path, student: Path) -> None:
    """The whole student copy, untouched, inside one top folder (a zipped folder)."""
    shutil.copytree(student, sub / "student")


def fill_restored(sub: Path, student: Path) -> None:
    """The whole student copy at the top, RESTORED's answers put back, CRASHED's stub ending its process."""
    shutil.copytree(student, sub, dirs_exist_ok=True)
    titles = {q["id"]: q["title"] for q in assignment.manifest()["questions"]}
    regions = assignment.all_regions()
    for path in sorted({r.path for r in regions if r.question in RESTORED}):
        in_file = [r for r in regions if r.path == path]
        (sub / path).write_text(assignment.student_source((assignment.ROOT / path).read_text(), in_file, titles,
                                                          keep=RESTORED))
    (crashed,) = {r.path for r in regions if r.question == CRASHED}
    stub = (sub / crashed).read_text()
    (sub / crashed).write_text(stub.replace(f'raise NotImplementedError("{CRASHED}:', f'import os; os._exit(3); '
                                            f'raise NotImplementedError("{CRASHED}:'))


def fill_syntax_error(sub: Path, student: Path) -> None:
    """The reference's question files alone by name at the top (dragged in one by one), BROKEN not parsing."""
    for path in question_files():
        shutil.copy(assignment.ROOT / path, sub / Path(path).name)
    broken = sub / Path(BROKEN).name
    broken.write_text(broken.read_text().replace("def split_heads(", "def split_heads(:", 1))


CASES = {"reference": fill_reference, "stub": fill_stub, "restored": fill_restored, "syntax_error": fill_syntax_error}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("release")
    info, names = assignment.build_gradescope(out / "student", out / "autograder.zip", "after_published", None)
    return out / "student", out / "autograder.zip", info, names


@pytest.fixture(scope="module")
def graded(built, tmp_path_factory):
    """Each case's results.json from run_autograder, the seconds it took, and `assignment grade` on the restored
    copy (all graded here once: about 12 s each on 2 cores)."""
    student, zip_path, _, _ = built
    work = tmp_path_factory.mktemp("gradescope")
    env = {**os.environ, "PATH": f"{setup_sh_venv(work / 'venv')}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    results, seconds = {}, {}
    for case, fill in CASES.items():
        root = work / case
        unpack(zip_path, root)
        fill(root / "submission", student)
        start = time.monotonic()
        proc = subprocess.run([str(root / "run_autograder")], env={**env, "AUTOGRADER_ROOT": str(root)},
                              capture_output=True, text=True, timeout=900, check=False)
        seconds[case] = time.monotonic() - start
        assert proc.returncode == 0, proc.stdout + proc.stderr
        results[case] = json.loads((root / "results" / "results.json").read_text())
    report = assignment.grade(work / "restored" / "submission", work / "report.json", jobs=2)
    print("run_autograder seconds:", {case: round(s, 1) for case, s in seconds.items()})
    return results, seconds, report


def by_question(result: dict) -> dict[str, int]:
    points: dict[str, int] = {}
    for t in result["tests"]:
        qid = t["name"].split()[0]
        points[qid] = points.get(qid, 0) + t["score"]
    return points


def test_zip_has_the_scripts_at_the_top_the_grader_and_no_solution(built, tmp_path):
    student, zip_path, info, names = built
    with zipfile.ZipFile(zip_path) as archive:
        modes = {i.filename: i.external_attr >> 16 & 0o777 for i in archive.infolist()}
        texts = {n: archive.read(n) for n in names}
    assert sorted(modes) == names and modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert set(assignment.GRADER_FILES) | {"assignment/manifest.json"} <= set(names)
    assert not any(n.startswith(("course_lib/lab/", "tests/test_", "data/", "notebooks/")) for n in names)
    assert json.loads(texts["assignment/manifest.json"]) == info
    for path in question_files():  # every question file as students get it: stubs only
        assert texts[path] == (student / path).read_bytes() and b"### BEGIN SOLUTION" not in texts[path]
    assert zip_path.stat().st_size < 400_000
    again = tmp_path / "again.zip"
    scripts = {n: texts[n].decode() for n in ("setup.sh", "run_autograder")}
    gradescope.write_zip(again, student, assignment.ROOT, assignment.GRADER_FILES, scripts)
    assert again.read_bytes() == zip_path.read_bytes()


def test_setup_sh_is_bash_and_installs_requirements_pins(built, tmp_path):
    _, zip_path, _, _ = built
    with zipfile.ZipFile(zip_path) as archive:
        setup = archive.read("setup.sh").decode()
    (tmp_path / "setup.sh").write_text(setup)
    assert subprocess.run(["bash", "-n", str(tmp_path / "setup.sh")], capture_output=True).returncode == 0
    requirements = {line.split("==")[0].lower(): line for line in
                    (assignment.ROOT / "requirements.txt").read_text().splitlines() if "==" in line}
    installed = re.findall(r"\b([A-Za-z0-9_.-]+==[0-9][^\s]*)", setup)
    assert sorted(installed) == sorted(requirements[name] for name in gradescope.GRADING_PACKAGES)
    with_index = gradescope.scripts(assignment.ROOT / "requirements.txt", "hidden", "https://index.invalid/cpu")
    assert "install -q --extra-index-url https://index.invalid/cpu torch==2.13.0+cpu\n" in with_index["setup.sh"]
    assert "--hidden-visibility hidden " in with_index["run_autograder"]


def test_results_json_has_gradescopes_keys_and_types_and_hides_hidden_checks(graded):
    results, _, _ = graded
    checks = [(q["id"], c) for q in assignment.manifest()["questions"] for c in q["checks"]]
    for case, result in results.items():
        assert set(result) <= set(TOP_KEYS) and all(isinstance(result[k], TOP_KEYS[k]) for k in result), case
        assert result["stdout_visibility"] == "hidden"
        assert [t["name"] for t in result["tests"]] == [f"{qid} {c['name']}" for qid, c in checks]
        for t, (_, c) in zip(result["tests"], checks):
            assert set(t) <= set(TEST_KEYS) and all(isinstance(t[k], TEST_KEYS[k]) for k in t), t
            assert t["visibility"] in VISIBILITIES and t["status"] in ("passed", "failed")
            assert t["visibility"] == ("after_published" if c["hidden"] else "visible")
            assert t["max_score"] == c["points"] and t["score"] == (c["points"] if t["status"] == "passed" else 0)
            assert t["output"] and "\n" not in t["output"]
        assert result["score"] == sum(t["score"] for t in result["tests"])
        assert sum(t["max_score"] for t in result["tests"]) == 64


def test_the_references_files_earn_every_point(graded):
    result = graded[0]["reference"]
    assert result["score"] == 64 and all(t["status"] == "passed" for t in result["tests"])
    assert result["output"].splitlines() == [f"{path}: graded" for path in question_files()]


def test_the_stub_copy_earns_nothing(graded):
    result = graded[0]["stub"]
    assert result["score"] == 0
    for t in result["tests"]:
        assert t["status"] == "failed" and t["output"].startswith(f"NotImplementedError: {t['name'].split()[0]}: ")
    assert result["output"].splitlines() == [f"{path}: graded (your student/{path})" for path in question_files()]


def test_restored_answers_earn_their_points_only_and_grade_agrees(graded):
    """The restored copy: RESTORED full, CRASHED's crash costing it alone, every other question failing on its own
    stub; `assignment grade` on the same folder gives every check the same result."""
    results, _, report = graded
    result = results["restored"]
    manifest = {q["id"]: q["points"] for q in assignment.manifest()["questions"]}
    assert by_question(result) == {qid: points if qid in RESTORED else 0 for qid, points in manifest.items()}
    for t in result["tests"]:
        qid = t["name"].split()[0]
        if qid == CRASHED:
            assert t["output"].startswith("the checks crashed (exit code 3)")
        elif qid not in RESTORED:
            assert t["output"].startswith(f"NotImplementedError: {qid}: "), t
    graded_here = [(f"{q['id']} {c['name']}", c["passed"], c["error"] or "passed")
                   for q in report["questions"] for c in q["checks"]]
    assert graded_here == [(t["name"], t["status"] == "passed", t["output"]) for t in result["tests"]]
    assert report["points"] == result["score"] == sum(manifest[q] for q in RESTORED)


def test_a_syntax_error_costs_its_files_questions_only(graded):
    result = graded[0]["syntax_error"]
    broken = {"q1b", "q1c", "q1d"}
    manifest = {q["id"]: q["points"] for q in assignment.manifest()["questions"]}
    assert by_question(result) == {qid: 0 if qid in broken else points for qid, points in manifest.items()}
    reason = f"{BROKEN}: SyntaxError at line "
    for t in result["tests"]:
        assert (t["output"].startswith(reason) and t["output"].endswith("; q1b, q1c, q1d not graded")) == (
            t["name"].split()[0] in broken)
    assert result["output"].splitlines()[1].startswith(reason)


def test_a_question_that_runs_too_long_fails_alone(built):
    student, _, _, _ = built
    error, ran = assignment.run_checks(student, "q1a", timeout=0.05)
    assert (error, ran) == ("timed out after 0.05 s", {})


def test_where_a_submission_keeps_its_files(tmp_path):
    path = "course_lib/model/bert.py"
    (tmp_path / "a" / "course_lib" / "model").mkdir(parents=True)
    (tmp_path / "a" / path).write_text("x = 1\n")
    assert submission.read_answer(tmp_path, path) == ("x = 1\n", f"a/{path}")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert submission.read_answer(tmp_path, path) == (None, f"found 2 copies (a/{path}, b/{path}): upload one")
    (tmp_path / "bert.py").write_bytes(b"\xff\n")
    shutil.rmtree(tmp_path / "a")
    shutil.rmtree(tmp_path / "b")
    assert submission.read_answer(tmp_path, path) == (None, "not UTF-8 text (byte 0)")
    assert submission.read_answer(tmp_path / "none", path) == (
        None, f"not in the submission (upload it as {path}, or as bert.py alone)")


def test_bad_options_are_one_line_errors_before_any_work(tmp_path, capsys):
    out = tmp_path / "student"
    cases = {("--gradescope", str(tmp_path / "ag.tar")): "must name a .zip file",
             ("--gradescope", str(out / "ag.zip")): "is inside OUT_DIR",
             ("--gradescope", str(tmp_path / "ag.zip"), "--hidden-visibility", "later"):
                 "unknown hidden_visibility 'later' (valid: after_published, after_due_date, hidden)",
             ("--gradescope", str(tmp_path / "ag.zip"), "--torch-index", "cpu"): "must be the URL of a pip index",
             ("--torch-index", "https://index.invalid/cpu"): "give --gradescope FILE.zip"}
    for args, message in cases.items():
        assert assignment.main(["build", str(out), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert assignment.main(["autograde", str(tmp_path)]) == 2
    assert "has no submission/ folder" in capsys.readouterr().err
