"""Assignment mode (staff only, not in the student copy): the reference earns full marks, a fresh student copy
imports and earns nothing, one restored answer earns exactly its points, builds repeat byte for byte, and the
from-scratch AdamW equals torch's."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_lib.teaching import assignment
from course_lib.teaching import check
from course_lib.errors import UsageError
from course_lib.training.optim import AdamW

RESTORED = ("q1b", "q3c", "q4b")  # answers put back into one student copy (q4b: without q1 and q4a, which
#   its checks must not need)


def run_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(folder), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def tree(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mode) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def manifest():
    return assignment.manifest()


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "student"
    assignment.build(out)
    return out


def test_reference_passes_every_public_and_hidden_check(manifest):
    titles = check.load_checks(hidden=True)
    assert list(titles) == [q["id"] for q in manifest["questions"]]
    earned = 0
    for q in manifest["questions"]:
        results = check.run_question(q["id"], hidden=True)
        assert [r["name"] for r in results] == [c["name"] for c in q["checks"]]
        assert all(r["passed"] for r in results), [(r["name"], r["error"]) for r in results if not r["passed"]]
        assert any(r["hidden"] for r in results) and any(not r["hidden"] for r in results)
        earned += sum(r["points"] for r in results)
    assert earned == manifest["total_points"] > 0


def test_references_are_up_to_date(tmp_path):
    """make-references on the reference code gives the committed inputs, and outputs within each check's atol."""
    from safetensors.torch import load_file

    fresh = load_file(str(assignment.make_references(tmp_path / "references.safetensors")))
    committed = load_file(str(check.REFERENCES))
    assert sorted(fresh) == sorted(committed), "run: python -m course_lib.teaching.assignment make-references"
    atol = {(c.question, c.name): c.atol for c in check.CHECKS}
    for key, value in fresh.items():
        question, name, part, _ = key.split("/")
        tolerance = 0.0 if part == "in" else atol[question, name]
        check.compare(key, value, committed[key], tolerance)  # if not: make-references, after review
    assert check.REFERENCES.stat().st_size < 1_000_000


def test_student_copy_imports_and_every_public_check_raises_not_implemented(student, manifest):
    files = set(tree(student))
    assert not any(f.startswith(assignment.STAFF_ONLY) for f in files)
    assert {"assignment/manifest.json", "STRUCTURE.md",
            "course_lib/teaching/assignment_refs/references.safetensors"} <= files
    assert not any(assignment.BEGIN in (student / f).read_text() for f in files if f.endswith(".py"))
    for q in manifest["questions"]:
        for function in q["functions"]:
            path = function.split(":")[0]
            assert f'raise NotImplementedError("{q["id"]}: {q["title"]}")' in (student / path).read_text(), function
    imports = run_in(student, "-c", "import importlib, pkgutil, course_lib\n"
                     "for m in pkgutil.iter_modules(course_lib.__path__):\n"
                     "    if m.name != '__main__': importlib.import_module('course_lib.' + m.name)\n"
                     "print(course_lib.__file__)")
    assert imports.returncode == 0, imports.stderr
    assert Path(imports.stdout.strip()).resolve() == (student / "course_lib" / "__init__.py").resolve()
    public = run_in(student, "-m", "course_lib.check", "all")
    lines = [line for line in public.stdout.splitlines() if line.startswith("  ")]
    assert public.returncode == 1 and lines and all("FAIL" in line and "NotImplementedError: q" in line
                                                    for line in lines), public.stdout + public.stderr
    assert public.stdout.splitlines()[-1] == f"0/{len(lines)} checks pass"
    unknown = run_in(student, "-m", "course_lib.check", "q9z")
    assert unknown.returncode == 2 and unknown.stderr.strip().count("\n") == 0
    assert "unknown question 'q9z' (valid: all, q1a, q1b" in unknown.stderr


def test_restored_answers_earn_exactly_their_points_and_nothing_else(student, manifest, tmp_path):
    """Grading end to end (one process per question) on the student copy with two answers put back."""
    titles = {q["id"]: q["title"] for q in manifest["questions"]}
    regions = assignment.all_regions()
    for path in sorted({r.path for r in regions if r.question in RESTORED}):
        text = (assignment.ROOT / path).read_text()
        in_file = [r for r in regions if r.path == path]
        (student / path).write_text(assignment.student_source(text, in_file, titles, keep=RESTORED))
    report = assignment.grade(student, tmp_path / "report.json", jobs=2)
    assert (tmp_path / "report.json").is_file()
    points = {q["id"]: q["points"] for q in manifest["questions"]}
    assert report["points"] == sum(points[q] for q in RESTORED)
    assert report["max_points"] == manifest["total_points"]
    for q in report["questions"]:
        if q["id"] in RESTORED:
            assert q["points"] == q["max_points"] == points[q["id"]]
            assert all(c["passed"] for c in q["checks"])
        else:  # each check fails in its own question's stub, not in an import or another question
            assert q["points"] == 0 and q["error"] is None
            assert all(c["error"].startswith(f"NotImplementedError: {q['id']}: ") for c in q["checks"]), q


def test_pair_head_questions_ask_for_the_multitask_functions(manifest):
    """q4a-q4c (the CS224N project's pair heads) follow q3d, each with its function, public and hidden checks."""
    questions = {q["id"]: q for q in manifest["questions"]}
    ids = [q["id"] for q in manifest["questions"]]
    assert ids[ids.index("q3d"):ids.index("q3d") + 4] == ["q3d", "q4a", "q4b", "q4c"]
    assert {qid: questions[qid]["functions"] for qid in ("q4a", "q4b", "q4c")} == {
        "q4a": ["course_lib/model/pair_heads.py:combine_pair"],
        "q4b": ["course_lib/model/pair_heads.py:SeparatePairClassifier.pair_logits"],
        "q4c": ["course_lib/training/cs224n_project.py:CourseModel.predict_paraphrase"]}
    for qid in ("q4a", "q4b", "q4c"):
        kinds = [c["hidden"] for c in questions[qid]["checks"]]
        assert kinds.count(False) >= 2 and kinds.count(True) >= 1, qid


def test_build_is_deterministic_and_refuses_a_used_folder(tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    assignment.build(first)
    assignment.build(second)
    assert tree(first) == tree(second)
    assert assignment.main(["build", str(first)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"OUT_DIR '{first}' exists and is not an empty folder" in err
    with pytest.raises(UsageError, match="STUDENT_DIR .* has no course_lib"):
        assignment.grade(tmp_path, tmp_path / "report.json")


def test_markers_are_checked():
    good = 'def f(x):\n    """[q1a] Title."""\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION\n'
    (region,) = assignment.find_regions("m.py", good)
    assert (region.function, region.question, region.begin, region.end) == ("f", "q1a", 2, 4)
    stub = assignment.student_source(good, [region], {"q1a": "the title"})
    assert stub.splitlines()[-1] == '    raise NotImplementedError("q1a: the title")'
    with pytest.raises(UsageError, match="m.py:3: .*without its partner"):
        assignment.find_regions("m.py", good.replace("    ### END SOLUTION\n", ""))
    with pytest.raises(UsageError, match="docstring of f must start with a question id"):
        assignment.find_regions("m.py", good.replace("[q1a] ", ""))
    with pytest.raises(UsageError, match="must sit in a function body"):
        assignment.find_regions("m.py", "### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n")


def test_adamw_matches_torch_over_several_steps_with_weight_decay():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    twin = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    twin.load_state_dict(model.state_dict())

    def groups(m):
        return [{"params": [p for p in m.parameters() if p.ndim == 2], "weight_decay": 0.05},
                {"params": [p for p in m.parameters() if p.ndim < 2], "weight_decay": 0.0}]

    ours = AdamW(groups(model), lr=1e-2, betas=(0.85, 0.995), eps=1e-7)
    theirs = torch.optim.AdamW(groups(twin), lr=1e-2, betas=(0.85, 0.995), eps=1e-7)
    # eps and weight_decay are given to both: their defaults differ (CS224N's 1e-6 and 0.0, torch's 1e-8 and 1e-2)
    assert {k: AdamW([torch.zeros(1)]).defaults[k] for k in ("lr", "betas")} == \
        {k: torch.optim.AdamW([torch.zeros(1)]).defaults[k] for k in ("lr", "betas")}
    for _ in range(8):
        x, y = torch.randn(16, 5), torch.randn(16, 2)
        for m, opt in ((model, ours), (twin, theirs)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            opt.step()
        for a, b in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    for key in ("exp_avg", "exp_avg_sq"):
        torch.testing.assert_close(ours.state[model[0].weight][key], theirs.state[twin[0].weight][key],
                                   atol=1e-6, rtol=0)


def test_structure_md_names_every_function_students_write(manifest):
    structure = (assignment.ROOT / "STRUCTURE.md").read_text()
    for q in manifest["questions"]:
        assert all(f"`{function}`" in structure for function in q["functions"]), q["id"]
