"""The notebooks' Jupyter kernel, `attention-lab`, and the JupyterLab settings a course environment wants.

`python -m course_lib.kernel install` (what `make install` runs) writes into this environment (sys.prefix):
- the kernel spec `attention-lab`, which starts `python -m course_lib.kernel -f CONNECTION_FILE`: ipykernel,
  started after `import course_lib` has chosen how torch's OpenMP threads wait (`course_lib.runtime.openmp`), which must
  happen before any cell imports torch;
- `share/jupyter/lab/settings/overrides.json`: JupyterLab's defaults for this environment, with the news feed
  and the update check off, so a student is not asked about Jupyter news on every start (and the offline course
  machines make no request for it). A student's own settings still win over these defaults.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import course_lib  # noqa: F401  (course_lib.runtime.openmp's setting, before the kernel's cells import torch)

KERNEL_NAME = "attention-lab"
LAB_OVERRIDES = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def install(prefix: str = sys.prefix) -> list[Path]:
    """Install the kernel spec and JupyterLab's overrides under `prefix`; return the files written."""
    import tempfile

    from ipykernel.kernelspec import make_ipkernel_cmd, write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory() as tmp:
        spec = write_kernel_spec(Path(tmp) / KERNEL_NAME, overrides={
            "argv": make_ipkernel_cmd(mod="course_lib.kernel", python_arguments=["-Xfrozen_modules=off"]),
            "display_name": KERNEL_NAME})
        folder = Path(KernelSpecManager().install_kernel_spec(spec, KERNEL_NAME, prefix=prefix))
    settings = Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    current = json.loads(settings.read_text()) if settings.is_file() else {}
    settings.write_text(json.dumps({**current, **LAB_OVERRIDES}, indent=2) + "\n")
    return [folder / "kernel.json", settings]


def main(argv: list[str]) -> None:
    if argv[:1] == ["install"]:
        for path in install():
            print(f"wrote {path}")
        return
    from ipykernel import kernelapp

    kernelapp.launch_new_instance(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
