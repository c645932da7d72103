"""What the scripts in this folder share: the repository and tests/ on sys.path, a test file loaded as a module
(its inputs and the names of what it stores), and the `--authors-checkout` option, checked to be at the commit
the numbers came from."""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT, ROOT / "tests"):  # the repository, and the tests' own helpers (portable_draws)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def load_test(name: str):
    """tests/<name>.py as a module, so a script builds exactly the inputs its test builds."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_commit(checkout: Path, commit: str) -> None:
    """A git checkout must be at `commit`; an extracted archive has no history to ask, so it is trusted."""
    if not (checkout / ".git").exists():
        print(f"# {checkout} is not a git checkout: taken to be commit {commit}", file=sys.stderr)
        return
    head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if head != commit:
        sys.exit(f"{checkout} is at {head}, not {commit}")


def authors_checkout(doc: str, repository: str, commit: str) -> Path:
    """The script's one option, `--authors-checkout PATH`, checked to be at `commit` before anything runs."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--authors-checkout", type=Path, required=True,
                        help=f"a checkout of github.com/{repository} at {commit}")
    checkout = parser.parse_args().authors_checkout
    check_commit(checkout, commit)
    return checkout
