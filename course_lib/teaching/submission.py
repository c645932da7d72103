"""What a student hands in, made into a copy that can be graded (staff only, not in the student copy).

A submission is the student copy's files that hold questions (the manifest's `functions`), in any of the layouts an
upload takes: the whole copy, the whole copy inside one top folder (a zipped folder), or only those files, at their
paths or alone by their names (files dragged into Gradescope one by one land at the top; the names are distinct).
Every other file comes from the grader's stub copy, so a submission can change its answers and nothing else. A
question file that is missing, found twice or does not parse keeps its stub: the questions in it score 0 with a
one-line reason, and the other files' questions are graded as usual.
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path


def question_files(questions: list[dict]) -> dict[str, list[str]]:
    """Each file that holds answers, with the ids of the questions answered in it, in the manifest's order."""
    files: dict[str, list[str]] = {}
    for q in questions:
        for function in q["functions"]:
            ids = files.setdefault(function.split(":")[0], [])
            if q["id"] not in ids:
                ids.append(q["id"])
    return files


def locate(submission: Path, path: str) -> Path:
    """The submission's own copy of `path`: at that path, else at it inside one top folder, else by its name at the
    top. Raises FileNotFoundError with the reason when there is none or more than one."""
    folders = sorted(d for d in submission.iterdir() if d.is_dir()) if submission.is_dir() else []
    for options in ([submission / path], [d / path for d in folders], [submission / Path(path).name]):
        found = [p for p in options if p.is_file()]
        if len(found) > 1:
            where = ", ".join(str(p.relative_to(submission)) for p in found)
            raise FileNotFoundError(f"found {len(found)} copies ({where}): upload one")
        if found:
            return found[0]
    raise FileNotFoundError(f"not in the submission (upload it as {path}, or as {Path(path).name} alone)")


def read_answer(submission: Path, path: str) -> tuple[str | None, str]:
    """(the file's text, where it was) when the submission has it and it parses; (None, why not) otherwise."""
    try:
        found = locate(submission, path)
        text = found.read_bytes().decode("utf-8")
        ast.parse(text, filename=path)
    except FileNotFoundError as err:
        return None, str(err)
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 text (byte {err.start})"
    except SyntaxError as err:
        return None, f"{type(err).__name__} at line {err.lineno}: {err.msg}"
    except ValueError as err:  # ast.parse refuses null bytes this way
        return None, f"does not parse: {err}"
    return text, str(found.relative_to(submission))


def assemble(submission: Path, stub_copy: Path, out: Path, questions: list[dict],
             leave_out: tuple[str, ...] = ()) -> dict[str, dict]:
    """Write the copy to grade into `out`: the stub copy's course_lib/ (minus `leave_out`), each question file
    replaced by the submission's own where it has one that parses. Returns, per question file, where it came from
    (`source`) or why its stub was kept (`error`, one line that names the file and its questions)."""
    shutil.copytree(stub_copy / "course_lib", out / "course_lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in leave_out:
        (out / path).unlink(missing_ok=True)
    files = {}
    for path, ids in question_files(questions).items():
        text, where = read_answer(submission, path)
        if text is None:
            files[path] = {"source": None, "error": f"{path}: {where}; {', '.join(ids)} not graded"}
        else:
            (out / path).write_text(text, encoding="utf-8")
            files[path] = {"source": where, "error": None}
    return files


def question_errors(files: dict[str, dict], questions: list[dict]) -> dict[str, str]:
    """Each question with a file that was not graded, with that file's one-line reason."""
    errors: dict[str, str] = {}
    for path, ids in question_files(questions).items():
        for qid in ids:
            if files[path]["error"]:
                errors.setdefault(qid, files[path]["error"])
    return errors
