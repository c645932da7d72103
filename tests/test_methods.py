"""The method registry: a method defined and registered outside course_lib fine-tunes like a built-in one, and the
training code asks the registry instead of testing method names."""
import re
from pathlib import Path

import pytest
import torch

from course_lib.methods import registry as methods
from course_lib.methods.registry import METHODS, Method, every_method, get_method, register
from course_lib.model.weights import load_pretrained
from course_lib.runtime.errors import UsageError
from course_lib.tasks.registry import every_family
from course_lib.tasks.sentence import plain_head
from course_lib.training.config import FinetuneConfig
from course_lib.training.finetune import finetune
from course_lib.training.task_model import load_finetuned

ROOT = Path(__file__).resolve().parent.parent


def frozen_embeddings(cfg, encoder, task, tokenizer):
    """A toy method: plain fine-tuning with the embedding layer frozen."""
    for parameter in encoder.embeddings.parameters():
        parameter.requires_grad_(False)
    return plain_head(cfg, encoder, task, tokenizer)


def halve_the_training_set(cfg, features, context):
    """A toy per-epoch hook: every other example, a different half each epoch."""
    kept = features[context.epoch % 2::2]
    return kept, {"kept": len(kept)}


@pytest.fixture
def toy_method():
    method = register(Method("frozen-embeddings", "a toy: fine-tuning with frozen embeddings",
                             build_model=frozen_embeddings, epoch_data=halve_the_training_set))
    yield method
    METHODS.pop(method.name)


def test_a_method_registered_outside_course_lib_fine_tunes(toy_method, tiny_model_dir, keyword_glue, tmp_path):
    cfg = FinetuneConfig(task="sst2", model=str(tiny_model_dir), glue_dir=str(keyword_glue), method=toy_method.name,
                         epochs=2, max_len=32, batch_size=16, lr=1e-3, output_dir=str(tmp_path))
    result = finetune(cfg)
    assert result["status"] == "complete" and result["config"]["method"] == "frozen-embeddings"
    assert [entry["kept"] for entry in result["history"]] == [96, 96]  # its epoch hook ran, cached, each epoch
    assert all(torch.isfinite(torch.tensor(entry["train_loss"])) for entry in result["history"])
    trained, _ = load_finetuned(tmp_path)  # rebuilt through the registry from metrics.json
    pretrained, _ = load_pretrained(tiny_model_dir)
    assert torch.equal(trained.encoder.embeddings.word.weight, pretrained.embeddings.word.weight)  # frozen
    assert not torch.equal(trained.encoder.layers[0].ffn.up.weight, pretrained.layers[0].ffn.up.weight)  # trained


def test_an_unknown_method_is_one_line_before_anything_is_written(tiny_model_dir, keyword_glue, tmp_path):
    with pytest.raises(UsageError, match=r"unknown method 'magic' \(valid: asa, bernoulli-mask, bert-mask"):
        FinetuneConfig(task="sst2", model=str(tiny_model_dir), glue_dir=str(keyword_glue), method="magic",
                       output_dir=str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_method_for_another_task_family_is_refused(tiny_model_dir, keyword_glue, tmp_path):
    register(Method("tagging-only", "a toy that applies to tagging", families=("tagging",)))
    try:
        cfg = FinetuneConfig(task="sst2", model=str(tiny_model_dir), glue_dir=str(keyword_glue),
                             method="tagging-only", output_dir=str(tmp_path / "run"))
        with pytest.raises(UsageError, match="method 'tagging-only' does not apply to sentence tasks "
                                             r"\(it applies to: tagging\)"):
            finetune(cfg)
    finally:
        METHODS.pop("tagging-only")


def test_a_second_method_of_the_same_name_is_refused():
    with pytest.raises(ValueError, match="registered already"):
        register(Method("ssaf", "another ssaf"))
    assert register(get_method("ssaf")) is get_method("ssaf")  # the same one again is harmless


def test_every_methods_options_are_its_own_and_mean_one_thing():
    """No option shadows a recipe field, and an option two methods read (ASA's divergences, SSA's sampler) has
    one type and one default in both, so a flat key means the same whichever method reads it."""
    recipe = set(FinetuneConfig.model_fields)
    seen = {}
    for method in every_method().values():
        for name, f in method.options.model_fields.items():
            assert name not in recipe, (method.name, name)
            meaning = (f.annotation, f.default, f.description, repr(f.metadata))  # type and names, default, help, range
            assert seen.setdefault(name, meaning) == meaning, (method.name, name)
        assert method.families is None or method.families, method.name  # None: every family; never none of them
    for name in ("ssa-co", "ssa-hybrid", "bert-mask"):  # defined on sentence classification only
        assert get_method(name).families == ("sentence",), name
    for name in ("asa", "bernoulli-mask"):  # a model for every registered family, and they declare them all
        assert set(get_method(name).families) == set(every_family()), name


def test_no_training_code_tests_a_method_name():
    """The registry is the one place that knows which method does what: no `method == "ssaf"` elsewhere."""
    names = "|".join(re.escape(name) for name in every_method())
    branch = re.compile(rf"method\s*(==|!=|\bin\b|\bnot in\b)\s*[(\[]?\s*[\"']({names})[\"']")
    methods_dir = ROOT / "course_lib" / "methods"
    offenders = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "course_lib").rglob("*.py"))
                 if methods_dir not in path.parents
                 for number, line in enumerate(path.read_text().splitlines(), 1) if branch.search(line)]
    assert not offenders, offenders
    assert methods_dir in Path(methods.__file__).parents


def test_the_mean_pool_control_reads_the_mean_of_real_tokens_whatever_the_padding(tiny_model_dir):
    """mean-pool's head: linear(mean over the unpadded tokens' last hidden states); extra padding changes nothing."""
    from course_lib.tasks import glue, sentence

    encoder, tokenizer = load_pretrained(str(tiny_model_dir))
    sst2 = glue.get_task("sst2")
    model = get_method("mean-pool").build_model(FinetuneConfig(method="mean-pool"), encoder, sst2, tokenizer).eval()
    examples = [sentence.Example(("a fine film",), 1), sentence.Example(("dull, and far too long",), 0)]
    features = sentence.encode_examples(examples, tokenizer, 32)
    batch = sentence.collate(features, tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
        for i, f in enumerate(features):
            alone = torch.tensor([f["input_ids"]])
            states = encoder(alone).last_hidden_state[0]
            torch.testing.assert_close(logits[i], model.classifier(states.mean(0)), atol=1e-5, rtol=0)
    assert get_method("mean-pool").families == ("sentence",)
