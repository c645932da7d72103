"""A notebook as a student meets it in a real JupyterLab: Run All, save, shut the kernel down, reload the page.

Counts what the page shows after Run All and again after the reload: "Error displaying widget" (a saved widget
view whose state is gone), "Show more outputs" (JupyterLab folds a cell past 50 outputs), and the outputs of each
code cell. Exits 1 when the reopened page shows either message. Not part of CI: it needs a browser, which the
project does not install. Here (Debian): `apt-get install chromium`, and Playwright from PyPI in any venv
(`pip install playwright`; no browser download, it drives the system's Chromium):

    python ci/browser_check.py notebooks/01_kou2020_ssa.ipynb --lab .venv/bin/jupyter-lab

The notebook is copied into a temporary folder and run there (its runs go beside that copy), with neither CI
nor TQDM_DISABLE set, so its progress bars show as they do for a student. Results: results/notebooks_in_browser.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

TOKEN = "attention-lab-check"
CELL_OUTPUTS = ("() => [...document.querySelectorAll('.jp-CodeCell')]"
                ".map(c => c.querySelectorAll('.jp-OutputArea-child').length)")
PROMPTS = "() => [...document.querySelectorAll('.jp-InputPrompt')].map(p => p.textContent)"


def page_report(page, when: str) -> dict:
    shown = {"when": when, "widget errors": page.locator("text=Error displaying widget").count(),
             "folded": page.locator("text=Show more outputs").count(),
             "outputs per code cell": page.evaluate(CELL_OUTPUTS)}
    print(json.dumps(shown), flush=True)
    return shown


def run_all(page, timeout: float) -> float:
    """Run > Run All Cells, then wait until no cell shows [*]; return the seconds it took."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    start = time.time()
    time.sleep(10)
    while time.time() - start < timeout and any("*" in p for p in page.evaluate(PROMPTS)):
        time.sleep(5)
    return time.time() - start


def check(url: str, name: str, chromium: str, timeout: float) -> list[dict]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/lab/tree/{name}?token={TOKEN}")
        page.wait_for_selector(".jp-Notebook", timeout=120_000)
        time.sleep(15)  # the kernel starts
        print(f"Run All: {run_all(page, timeout):.0f} s", flush=True)
        reports = [page_report(page, "after Run All")]
        page.keyboard.press("Control+s")
        time.sleep(5)
        for session in api(url, "/api/sessions"):  # the kernel shut down, as after a day away
            api(url, f"/api/sessions/{session['id']}", "DELETE")
        page.reload()
        page.wait_for_selector(".jp-Notebook", timeout=120_000)
        time.sleep(15)
        reports.append(page_report(page, "reopened, kernel shut down"))
        browser.close()
    return reports


def api(url: str, path: str, method: str = "GET"):
    with urllib.request.urlopen(urllib.request.Request(f"{url}{path}?token={TOKEN}", method=method)) as answer:
        body = answer.read()
    return json.loads(body) if body else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--lab", default="jupyter-lab", help="the jupyter-lab of the project's venv")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--port", type=int, default=8899)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds Run All may take")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="browser_check_"))
    shutil.copy(args.notebook, folder / args.notebook.name)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TQDM_DISABLE")}
    server = subprocess.Popen([args.lab, "--no-browser", f"--port={args.port}", f"--ServerApp.token={TOKEN}",
                               f"--ServerApp.root_dir={folder}", "--allow-root"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(8)
        reopened = check(f"http://127.0.0.1:{args.port}", args.notebook.name, args.chromium, args.timeout)[-1]
    finally:
        server.terminate()
    return 1 if reopened["widget errors"] or reopened["folded"] else 0


if __name__ == "__main__":
    sys.exit(main())
