"""Assignment mode (staff only, not in the student copy): the reference earns full marks, a fresh student copy
imports and fails every public check on its own stub, builds repeat byte for byte, the from-scratch AdamW equals
torch's, and every question's reference solution (and its stored outputs) agrees with an oracle that shares no code
with it: Hugging Face's BERT modules, torch.optim.AdamW, entmax, or the formula. Grading a copy with answers put back
(`grade` and the Gradescope autograder, one process per question) is tests/test_gradescope.py's."""
import math
import os
import subprocess
import sys
from pathlib import Path

import entmax
import pytest
import torch
import transformers
from transformers.models.bert.modeling_bert import eager_attention_forward

from course_lib.model.bert import BertModel
from course_lib.model.weights import ours_to_hf
from course_lib.runtime.errors import UsageError
from course_lib.teaching import assignment
from course_lib.teaching import check
from course_lib.teaching import public_checks
from course_lib.training.optim import AdamW

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


@pytest.mark.stored_numbers
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


INPUT_ROUNDING = 1e-12  # the stored inputs, regenerated on another CPU: drawn ones come out equal, but a computed
#   one (q3d's softmax) takes its float64 exp from the CPU's vector kernels, whose last bit differs between AVX-512,
#   AVX2 and plain kernels (1.1e-16 here); any real change to an input (drawn O(1) values) is far larger


@pytest.mark.stored_numbers
def test_references_are_up_to_date(tmp_path):
    """make-references on the reference code gives the committed inputs (to the CPU's rounding) and outputs within
    each check's atol: the stored file is the current solution's. Whether that solution is right is the oracle
    tests' job below. Every check reads the stored inputs, so every machine checks a solution on the same numbers."""
    from safetensors.torch import load_file

    fresh = load_file(str(assignment.make_references(tmp_path / "references.safetensors")))
    committed = load_file(str(check.REFERENCES))
    assert sorted(fresh) == sorted(committed), "run: python -m course_lib assignment make-references"
    atol = {(c.question, c.name): c.atol for c in check.CHECKS}
    for key, value in fresh.items():
        question, name, part, _ = key.split("/")
        tolerance = INPUT_ROUNDING if part == "in" else atol[question, name]
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
    public = run_in(student, "-m", "course_lib", "check", "all")
    lines = [line for line in public.stdout.splitlines() if line.startswith("  ")]
    assert public.returncode == 1 and lines and all("FAIL" in line and "NotImplementedError: q" in line
                                                    for line in lines), public.stdout + public.stderr
    assert public.stdout.splitlines()[-1] == f"0/{len(lines)} checks pass"
    unknown = run_in(student, "-m", "course_lib", "check", "q9z")
    assert unknown.returncode == 2 and unknown.stderr.strip().count("\n") == 0
    assert "unknown question 'q9z' (valid: all, q1a, q1b" in unknown.stderr


def test_pair_head_questions_ask_for_the_multitask_functions(manifest):
    """q4a-q4c (the CS224N project's pair heads) follow q3d, each with its function, public and hidden checks."""
    questions = {q["id"]: q for q in manifest["questions"]}
    ids = [q["id"] for q in manifest["questions"]]
    assert ids[ids.index("q3d"):ids.index("q3d") + 4] == ["q3d", "q4a", "q4b", "q4c"]
    assert {qid: questions[qid]["functions"] for qid in ("q4a", "q4b", "q4c")} == {
        "q4a": ["course_lib/model/pair_heads.py:combine_pair"],
        "q4b": ["course_lib/model/pair_heads.py:SeparatePairClassifier.pair_logits"],
        "q4c": ["course_lib/teaching/cs224n_project.py:CourseModel.predict_paraphrase"]}
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
    with pytest.raises(UsageError, match="STUDENT_DIR .* is not a folder"):
        assignment.grade(tmp_path / "missing", tmp_path / "report.json")


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


# ----------------------------------------------------------------------------------------------
# The reference solution against independent oracles. references.safetensors is made by the reference solution
# and made again after each change to it, so it cannot catch a bug there. Here each question's functions, on
# the public checks' own inputs, and the stored outputs alike, are held to code that shares nothing with them:
# Hugging Face's BERT modules on the same weights (`ours_to_hf`), torch.optim.AdamW, entmax, or the formula
# written out. Everything is float64; ORACLE_ATOL is far below any wrong formula and far above the rounding of
# a different order of the same operations (at most 7e-15 here, AG's Frobenius sum).

ORACLE_ATOL = 1e-12


def public_case(question: str, name: str) -> tuple[dict, dict]:
    """The stored inputs and reference outputs of one public check."""
    (c,) = [c for c in check.CHECKS if (c.question, c.name, c.hidden) == (question, name, False)]
    return check.stored(c, "in"), check.stored(c, "out")


def held_to(oracle: torch.Tensor, atol: float = ORACLE_ATOL, **candidates: torch.Tensor) -> None:
    """Each candidate (the reference solution's output, the stored one) within atol of the oracle."""
    for what, got in candidates.items():
        check.compare(what, got, oracle, atol)


def twin_bert(state: dict[str, torch.Tensor] | None = None, num_layers: int = 1, seed: int = 0):
    """Our BertModel of the public checks' tiny shape (random weights, or `state` loaded over them) and Hugging
    Face's BertModel holding the same weights through `ours_to_hf`: float64, eager attention, eval mode."""
    cfg = public_checks.tiny_config().replace(num_hidden_layers=num_layers)
    torch.manual_seed(seed)
    ours = BertModel(cfg).double().eval()
    with torch.no_grad():
        for p in ours.parameters():  # not N(0, 0.02): every weight, LayerNorm's included, far from its init
            p.copy_(0.5 * torch.randn_like(p))
    assert not ours.load_state_dict(state or {}, strict=False).unexpected_keys
    theirs = transformers.BertModel(transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=cfg.num_attention_heads, intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.layer_norm_eps, pad_token_id=cfg.pad_token_id, hidden_act="gelu",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="eager"))
    theirs = theirs.double().eval()
    theirs.load_state_dict(ours_to_hf(ours.state_dict(), num_layers), strict=True)
    return ours, theirs


def test_q1a_attention_probs_against_hugging_faces_eager_attention():
    """Softmax: transformers' eager_attention_forward weights on the same q, k and padding bias. Identity
    normaliser: Q K^T / sqrt(d_h) (+ bias) written out."""
    from course_lib.model.attention import attention_probs

    x, stored = public_case("q1a", "softmax_with_padding_mask")
    _, want = eager_attention_forward(torch.nn.Module().eval(), x["q"], x["k"], torch.zeros_like(x["k"]),
                                      x["bias"])
    assert want[1, ..., 3:].abs().max() == 0  # the padding keys of example 1 get no weight
    held_to(want, solution=attention_probs(x["q"], x["k"], x["bias"]), stored=stored["probs"])

    x, stored = public_case("q1a", "scaled_scores")
    scores = torch.einsum("bhid,bhjd->bhij", x["q"], x["k"]) / math.sqrt(8)  # d_h = 8
    held_to(scores + x["bias"], solution=attention_probs(x["q"], x["k"], x["bias"], lambda s: s),
            stored=stored["with_bias"])
    held_to(scores, solution=attention_probs(x["q"], x["k"], None, lambda s: s), stored=stored["without_bias"])


def test_q1b_split_and_merge_against_the_index_layout():
    """Hugging Face's layout written as slices: q/k/v[:, h, :, j] = qkv[:, :, part·d + h·d_h + j]; merged
    columns head by head. A rearrangement, so exact (atol 0)."""
    from course_lib.model.bert import merge_heads, split_heads

    x, stored = public_case("q1b", "split_heads_layout")
    H, d = 2, x["qkv"].shape[-1] // 3
    d_h = d // H
    for part, (name, got) in enumerate(zip("qkv", split_heads(x["qkv"], H))):
        want = torch.stack([x["qkv"][:, :, part * d + h * d_h:part * d + (h + 1) * d_h] for h in range(H)], dim=1)
        held_to(want, 0.0, solution=got, stored=stored[name])

    x, stored = public_case("q1b", "merge_heads_layout")
    want = torch.cat([x["context"][:, h] for h in range(x["context"].shape[1])], dim=-1)
    held_to(want, 0.0, solution=merge_heads(x["context"]), stored=stored["merged"])


def test_q1c_embeddings_against_hugging_faces_bert_embeddings():
    x, stored = public_case("q1c", "embeddings_eval_mode")
    state = {f"embeddings.{k.removeprefix('state.')}": v for k, v in x.items() if k.startswith("state.")}
    ours, theirs = twin_bert(state)
    with torch.no_grad():
        want = theirs.embeddings(input_ids=x["input_ids"], token_type_ids=x["token_type_ids"])
        held_to(want, solution=ours.embeddings(x["input_ids"], x["token_type_ids"]), stored=stored["embeddings"])


def test_q1d_add_and_norm_and_feed_forward_against_hugging_faces_output_layers():
    """add & norm: BertSelfOutput (its dense layer the identity) with the check's LayerNorm; the feed-forward
    sub-layer: BertIntermediate then BertOutput with the check's weights."""
    from course_lib.model.bert import add_and_norm

    x, stored = public_case("q1d", "add_and_norm_eval_mode")
    identity = {"layers.0.attention.out.weight": torch.eye(8, dtype=torch.float64),
                "layers.0.attention.out.bias": torch.zeros(8, dtype=torch.float64)}
    ours, theirs = twin_bert({**identity, "layers.0.attention.norm.weight": x["state.weight"],
                              "layers.0.attention.norm.bias": x["state.bias"]})
    with torch.no_grad():
        want = theirs.encoder.layer[0].attention.output(x["sublayer_out"], x["x"])  # LN(dense(sublayer) + x)
        got = add_and_norm(x["x"], x["sublayer_out"], torch.nn.Identity(), ours.layers[0].attention.norm)
    held_to(want, solution=got, stored=stored["out"])

    x, stored = public_case("q1d", "feed_forward_eval_mode")
    ours, theirs = twin_bert({f"layers.0.ffn.{k.removeprefix('state.')}": v for k, v in x.items()
                              if k.startswith("state.")})
    layer = theirs.encoder.layer[0]
    with torch.no_grad():
        held_to(layer.output(layer.intermediate(x["x"]), x["x"]), solution=ours.layers[0].ffn(x["x"]),
                stored=stored["out"])


def test_q1_whole_encoder_against_hugging_faces_bert_model():
    """q1a-q1d together: two layers, a padded batch, both token types; every attention map, every real
    token's output and the pooled output."""
    ours, theirs = twin_bert(num_layers=2, seed=1)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 20, (3, 7), generator=g)
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
    types = torch.tensor([[0] * 4 + [1] * 3, [0] * 3 + [1] * 4, [0] * 2 + [1] * 5])
    with torch.no_grad():
        got = ours(ids, mask, types, output_attentions=True)
        want = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types, output_attentions=True)
    real = mask.bool()
    held_to(want.last_hidden_state[real], solution=got.last_hidden_state[real])
    held_to(want.pooler_output, solution=got.pooler_output)
    for i, (mine, hf) in enumerate(zip(got.attentions, want.attentions, strict=True)):
        held_to(hf, **{f"attention map of layer {i}": mine})


def test_q2a_adamw_update_against_torch_adamw():
    """The public check's four steps (lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.1) by
    torch.optim.AdamW, whose step is torch's own code: the parameter after each step, then m and v."""
    from course_lib.training.optim import adamw_update

    x, stored = public_case("q2a", "adamw_update_four_steps")
    hyper = {"lr": 0.1, "eps": 1e-8, "weight_decay": 0.1}
    theirs = x["param"].clone().requires_grad_()
    optimizer = torch.optim.AdamW([theirs], betas=(0.9, 0.999), foreach=False, **hyper)
    param, m, v = x["param"].clone(), torch.zeros_like(x["param"]), torch.zeros_like(x["param"])
    for step, grad in enumerate(x["grads"], start=1):
        theirs.grad = grad.clone()
        optimizer.step()
        adamw_update(param, grad, m, v, step, beta1=0.9, beta2=0.999, **hyper)
        held_to(theirs.detach(), **{f"parameter after step {step}": param, "stored": stored["params"][step - 1]})
    held_to(optimizer.state[theirs]["exp_avg"], exp_avg=m, stored=stored["exp_avg"])
    held_to(optimizer.state[theirs]["exp_avg_sq"], exp_avg_sq=v, stored=stored["exp_avg_sq"])


def test_q2a_adamw_update_without_bias_correction_against_the_formula():
    """correct_bias=False (torch has no such switch): the update of Loshchilov & Hutter's Algorithm 2 without
    the bias correction, written out element by element."""
    from course_lib.training.optim import adamw_update

    x, _ = public_case("q2a", "adamw_update_four_steps")
    lr, beta1, beta2, eps, decay = 0.1, 0.9, 0.999, 1e-8, 0.1
    param, m, v = x["param"].clone(), torch.zeros_like(x["param"]), torch.zeros_like(x["param"])
    want = x["param"].flatten().tolist()
    m_want, v_want = [0.0] * len(want), [0.0] * len(want)
    for step, grad in enumerate(x["grads"], start=1):
        adamw_update(param, grad, m, v, step, lr, beta1, beta2, eps, decay, correct_bias=False)
        for i, g in enumerate(grad.flatten().tolist()):
            m_want[i] = beta1 * m_want[i] + (1 - beta1) * g
            v_want[i] = beta2 * v_want[i] + (1 - beta2) * g * g
            want[i] = want[i] * (1 - lr * decay) - lr * m_want[i] / (math.sqrt(v_want[i]) + eps)
        held_to(torch.tensor(want, dtype=torch.float64).view(3, 4), **{f"parameter after step {step}": param})
    held_to(torch.tensor(m_want, dtype=torch.float64).view(3, 4), exp_avg=m)
    held_to(torch.tensor(v_want, dtype=torch.float64).view(3, 4), exp_avg_sq=v)


def test_q3a_sparsemax_forward_and_backward_against_entmax():
    """entmax.sparsemax on the checks' z along each axis; the backward check's p is sparsemax of the forward
    check's z (both drawn from seed 0), so its vector-Jacobian product is entmax's autograd there."""
    from course_lib.model.sparsemax import sparsemax_backward, sparsemax_forward

    for name, dim in (("sparsemax_forward_rows", -1), ("sparsemax_forward_along_dim0", 0)):
        x, stored = public_case("q3a", name)
        held_to(entmax.sparsemax(x["z"], dim=dim), **{f"{name} solution": sparsemax_forward(x["z"], dim)},
                stored=stored["p"])

    z = public_case("q3a", "sparsemax_forward_rows")[0]["z"].requires_grad_()
    x, stored = public_case("q3a", "sparsemax_backward_rows")
    p = entmax.sparsemax(z, dim=-1)
    held_to(p.detach(), **{"the backward check's p": x["p"]})
    assert 0 < (x["p"] > 0).sum() < x["p"].numel() and ((x["p"] > 0).sum(-1) == 1).any()  # rows of every kind
    (want,) = torch.autograd.grad(p, z, x["grad"])
    held_to(want, solution=sparsemax_backward(x["p"], x["grad"], -1), stored=stored["grad_z"])


def test_q3b_gradient_reversal_against_its_definition():
    """Forward the identity (a new tensor, equal to x); backward -λ·grad with λ = 1, alone and inside a graph
    whose other factors are known: d/dx sum(w · GRL(a · x)) = -a · w."""
    from course_lib.methods.asa import _GradReverse, grad_reverse

    g = torch.Generator().manual_seed(0)
    x, a, w = (public_checks.randn(g, 3, 4) for _ in range(3))  # the public checks' shape
    out = _GradReverse.forward(None, x)
    assert out is not x
    held_to(x, 0.0, forward=out)
    held_to(-w, 0.0, backward=_GradReverse.backward(None, w))
    x.requires_grad_()
    (grad,) = torch.autograd.grad((w * grad_reverse(a * x)).sum(), x)
    held_to(-a * w, 0.0, **{"gradient through the graph": grad})


def ssa_pool_formula(hidden, pooled, scores, input_ids, attention_mask, special, threshold, beta):
    """docs/methods.md, section 1, row by row in plain floats: kept_i = real_i ∧ not special_i ∧ s_i ≥ threshold,
    a_i = exp(s_i - 10^4 · [not kept_i]) / Σ_j exp(s_j - 10^4 · [not kept_j]), pooled = β·P + (1 - β)·Σ_i a_i h_i,
    and P alone (β = 1) in a row with nothing kept."""
    rows = []
    for b in range(len(input_ids)):
        s = scores[b].tolist()
        kept = [(attention_mask is None or bool(attention_mask[b, i])) and int(input_ids[b, i]) not in special
                and s[i] >= threshold for i in range(len(s))]
        if not any(kept):
            rows.append(pooled[b])
            continue
        e = [math.exp(s[i] - (0.0 if kept[i] else 1e4)) for i in range(len(s))]
        context = sum(e[i] / sum(e) * hidden[b, i] for i in range(len(s)))
        rows.append(beta * pooled[b] + (1 - beta) * context)
    return torch.stack(rows)


def test_q3c_ssa_pool_against_the_documented_formula():
    model = public_checks._ssa_model()
    special = {public_checks.CLS, public_checks.SEP, public_checks.PAD}
    assert (set(model.special_ids.tolist()), model.threshold, model.cls_weight) == (special, 0.4, 0.3)
    for name in ("ssa_pool_with_padding", "ssa_pool_without_mask"):
        x, stored = public_case("q3c", name)
        mask = x["attention_mask"] if name == "ssa_pool_with_padding" else None
        args = (x["hidden"], x["pooled"], x["scores"], x["input_ids"], mask)
        held_to(ssa_pool_formula(*args, special, threshold=0.4, beta=0.3), **{f"{name} solution": model.pool(*args)},
                stored=stored["pooled"])
        kept = [sum(int(t) not in special and s >= 0.4 for t, s in zip(ids, row.tolist()))
                for ids, row in zip(x["input_ids"], x["scores"])]
        assert min(kept) == 0 < max(kept), kept  # rows that keep tokens, and one that keeps none


def ag_loss_definition(attentions, attention_mask, reduction):
    """L_AG of docs/methods.md, section 4, for heads "0,1,1,2" (head 0 [Next], head 1 [Prev], heads 2-3 [First])
    with uniform boundary rows, example by example over its n real tokens (padding on the right): the squared
    error summed over the real (query, key) entries; "mean" divides each group's sum by h · Σ_b n_b², "frobenius"
    by the batch size."""
    groups = {"next": [0], "prev": [1], "first": [2, 3]}
    lengths = [int(m.sum()) for m in attention_mask]
    assert all(m[:n].all() and not m[n:].any() for m, n in zip(attention_mask, lengths))

    def target(pattern, n, i, j):
        if pattern == "first":
            return float(j == 0)
        step, edge = (1, n - 1) if pattern == "next" else (-1, 0)
        return 1.0 / n if i == edge else float(j == i + step)

    total = 0.0
    for probs in attentions:
        for pattern, heads in groups.items():
            squared = sum((float(probs[b, h, i, j]) - target(pattern, n, i, j)) ** 2
                          for b, n in enumerate(lengths) for h in heads for i in range(n) for j in range(n))
            total += squared / (len(heads) * sum(n * n for n in lengths) if reduction == "mean" else len(lengths))
    return torch.tensor(total, dtype=torch.float64)


def test_q3d_ag_loss_against_its_definition():
    from course_lib.methods.ag import AttentionGuidance

    for reduction in ("mean", "frobenius"):
        x, stored = public_case("q3d", f"ag_loss_{reduction}")
        attentions = (x["layer0"], x["layer1"])
        got = AttentionGuidance(num_heads=4, ag_head_types="0,1,1,2", ag_reduction=reduction).loss(
            attentions, x["input_ids"], x["attention_mask"])
        held_to(ag_loss_definition(attentions, x["attention_mask"], reduction), **{f"{reduction} solution": got},
                stored=stored["loss"])


def test_q4a_combine_pair_against_the_four_blocks():
    """Column by column: u, then v, then |u - v|, then u * v (exact, atol 0)."""
    from course_lib.model.pair_heads import combine_pair

    x, stored = public_case("q4a", "combine_pair_values")
    u, v = x["u"], x["v"]
    d = u.shape[1]
    want = torch.empty(u.shape[0], 4 * d, dtype=u.dtype)
    for i in range(d):
        want[:, i], want[:, d + i] = u[:, i], v[:, i]
        want[:, 2 * d + i], want[:, 3 * d + i] = (u[:, i] - v[:, i]).abs(), u[:, i] * v[:, i]
    held_to(want, 0.0, solution=combine_pair(u, v), stored=stored["features"])


def pair_logits_one_by_one(encode, classifier, ids1, mask1, ids2, mask2):
    """The bi-encoder head with every sentence encoded alone, cut to its real tokens (no padding, no batch):
    W (u, v, |u - v|, u * v) + b, row by row."""
    rows = []
    for b in range(len(ids1)):
        u, v = (encode(ids[b:b + 1, :int(mask[b].sum())])[0] for ids, mask in ((ids1, mask1), (ids2, mask2)))
        rows.append(classifier.weight @ torch.cat([u, v, (u - v).abs(), u * v]) + classifier.bias)
    return torch.stack(rows)


def test_q4b_pair_logits_against_each_sentence_encoded_alone():
    """The check's stand-in encoder and head, then our tiny BERT under the same head against Hugging Face's
    BertModel encoding each sentence alone."""
    from course_lib.model.pair_heads import SeparatePairClassifier

    x, stored = public_case("q4b", "pair_logits_values")
    sides = (x["ids1"], x["mask1"], x["ids2"], x["mask2"])
    model = public_checks.with_state(public_checks._pair_model(), x)
    with torch.no_grad():
        want = pair_logits_one_by_one(lambda ids: model.encoder(ids).pooler_output, model.classifier, *sides)
        held_to(want, **{"stand-in encoder solution": model.pair_logits(*sides)}, stored=stored["logits"])

    ours, theirs = twin_bert(num_layers=2, seed=3)
    head = SeparatePairClassifier(ours, 3, 0.1, public_checks.PAD).double().eval()
    with torch.no_grad():
        for p in head.classifier.parameters():
            p.copy_(0.5 * torch.randn_like(p))
    with torch.no_grad():
        want = pair_logits_one_by_one(lambda ids: theirs(input_ids=ids).pooler_output, head.classifier, *sides)
        held_to(want, **{"BERT encoder solution": head.pair_logits(*sides)})


def test_q4c_paraphrase_logit_against_the_log_odds():
    """log(p_1 / p_0), p the softmax of the paraphrase head's two logits, in plain floats, on the public
    check's model and pairs."""
    g = torch.Generator().manual_seed(7)
    course = public_checks._course_model(g)
    lengths1, lengths2 = (4, 6, 3, 5, 2, 6), (5, 3, 6, 2, 4, 4)
    sides = (*public_checks.pair_side(g, lengths1, 6), *public_checks.pair_side(g, lengths2, 6))
    with torch.no_grad():
        logits = course.model.heads["cs224n_para"].pair_logits(*sides)
        got = course.predict_paraphrase(*sides)
    log_odds = []
    for l0, l1 in logits.tolist():
        p0, p1 = math.exp(l0) / (math.exp(l0) + math.exp(l1)), math.exp(l1) / (math.exp(l0) + math.exp(l1))
        log_odds.append(math.log(p1 / p0))
    assert 0 < sum(x > 0 for x in log_odds) < len(log_odds)  # both answers occur
    held_to(torch.tensor(log_odds, dtype=torch.float64), solution=got)
