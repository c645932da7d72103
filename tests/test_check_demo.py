"""ci/check_demo.py, CI's verdict on `make demo`: it passes a sweep that learnt and names each run that did not."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_demo", ROOT / "ci" / "check_demo.py")
check_demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_demo)


def fake_sweep(root: Path, vanilla_accuracy: float, pearson: float, warnings: list[str]) -> Path:
    """One run per paper notebook in the sweep's layout: metrics.json files and the collected results.csv."""
    runs = {"notebook=01_kou/task=sst2,method=vanilla,seed=0": {
                "kind": "finetune", "status": "complete", "task": "sst2", "config": {"method": "vanilla"},
                "dev": {"accuracy": vanilla_accuracy}, "warnings": warnings},
            "notebook=02_multitask/seed=0": {
                "kind": "multitask", "status": "complete", "config": {"max_eval_samples": 200, "seed": 0},
                "dev": {"sst2": {"dev": {"accuracy": 0.74}}, "stsb": {"dev": {"pearson": pearson}}}, "warnings": []}}
    runs["notebook=02_multitask/ssa=all,seed=0"] = {  # a method's run may lose to the baseline: not checked
        "kind": "multitask", "status": "complete", "config": {"max_eval_samples": 200, "seed": 0, "ssa": "all"},
        "dev": {"sst2": {"dev": {"accuracy": 0.4}}, "stsb": {"dev": {"pearson": 0.1}}}, "warnings": []}
    runs |= {f"notebook={n}_x/method=vanilla,seed=0": {"kind": "pretrain", "status": "complete"}
             for n in ("00", "03", "04", "05")}
    for name, result in runs.items():
        (root / name).mkdir(parents=True)
        (root / name / "metrics.json").write_text(json.dumps(result))
    (root / "results.csv").write_text("run,kind\n" + "".join(f'"{name}",x\n' for name in runs))
    return root


def test_a_sweep_that_learnt_passes(tmp_path, capsys):
    assert check_demo.main(fake_sweep(tmp_path, 0.79, 0.66, [])) == 0
    assert "7 complete runs, every check passed" in capsys.readouterr().out


def test_each_failed_check_is_one_line_naming_the_run(tmp_path, capsys):
    sweep = fake_sweep(tmp_path, 0.74, 0.49, ["sst2 dev: all 400 predictions are class 1: a constant guess"])
    (sweep / "results.csv").write_text("run,kind\n" + "".join(
        line + "\n" for line in (sweep / "results.csv").read_text().splitlines()[1:] if "=05_" not in line))
    assert check_demo.main(sweep) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["notebook=01_kou/task=sst2,method=vanilla,seed=0: sst2 dev: all 400 predictions are class 1: "
                     "a constant guess",
                     "notebook=01_kou/task=sst2,method=vanilla,seed=0: vanilla SST-2 dev accuracy 0.7400 < 0.75",
                     "notebook=02_multitask/seed=0: multitask STS-B Pearson 0.4900 < 0.5",
                     f"no row from notebook 05_* in {sweep / 'results.csv'}"]
