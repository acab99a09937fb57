"""Feedback for one clip from the base model and from a trained run; the reloaded adapter is live."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.errors import ConfigError, ModelLoadError
from pipeline.tutor.infer import compare_feedback, load_tutor
from pipeline.tutor.cli import infer_main
from tests.training_data import real_workspace, trained_run

CLIP = "WAVE/SPEAKER0001/000010011.WAV"
TARGET = "WE CALL IT BEAR"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """A workspace with run `tuned`: 3 steps at a high learning rate, so the adapter is far from zero."""
    ws = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    return trained_run(ws, tiny_model_dir, "tuned", quantization="4bit", lora_alpha=16, learning_rate=1e-2, seed=1)


@pytest.mark.slow
def test_reloaded_adapter_changes_the_logits(tuned, tiny_model_dir, speechocean_dir):
    from pipeline.data.audio import load_audio
    from pipeline.conversation.messages import build_messages
    from pipeline.model.loading import load_adapter, load_model, load_processor

    processor = load_processor(str(tiny_model_dir))
    clip = load_audio(speechocean_dir / CLIP)
    inputs = processor.apply_chat_template(
        build_messages(TARGET, None, clip.samples), add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    base, _ = load_model(str(tiny_model_dir), device="cpu", quantization="4bit")
    with torch.no_grad():
        base_logits = base(**inputs).logits[0, -1].float()
    model = load_adapter(base, tuned / "runs" / "tuned" / "adapter")
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().max() > 0 for p in lora_b)  # trained weights were loaded, not the zero init
    with torch.no_grad():
        tuned_logits = model(**inputs).logits[0, -1].float()
        with model.disable_adapter():
            again = model(**inputs).logits[0, -1].float()
    assert (tuned_logits - base_logits).abs().max() > 1e-2
    assert torch.allclose(again, base_logits, atol=1e-5)


@pytest.mark.slow
def test_base_and_tuned_feedback_and_cli(tuned, tiny_model_dir, speechocean_dir, capsys):
    base = load_tutor(str(tiny_model_dir), device="cpu", quantization="4bit", use_cache=False)
    answer = base.feedback(speechocean_dir / CLIP, TARGET, max_new_tokens=8)
    assert isinstance(answer.text, str) and answer.new_tokens >= 1 and answer.run is None
    assert answer.tiny_random_model and "random" in answer.note
    assert "<" not in answer.text or "<start_of_turn>" not in answer.text  # no special tokens

    code = infer_main(
        ["--workspace", str(tuned), "--run", "tuned", "--audio", str(speechocean_dir / CLIP), "--text", TARGET,
         "--max-new-tokens", "8", "--json"]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["run"] == "tuned" and result["model"] == str(tiny_model_dir)
    assert result["quantization"] == "4bit" and result["device"] == "cpu"  # the run's own settings
    assert isinstance(result["text"], str) and result["tiny_random_model"] is True
    assert result["adapter_dir"].endswith("adapter")


@pytest.mark.slow
def test_compare_loads_the_model_once_and_the_disabled_adapter_answers_as_the_base(
    tuned, tiny_model_dir, speechocean_dir, monkeypatch
):
    import pipeline.tutor.infer as infer
    import pipeline.model.loading as model_module

    loads = []
    real_load_model = model_module.load_model
    monkeypatch.setattr(model_module, "load_model", lambda *a, **k: loads.append(a) or real_load_model(*a, **k))
    monkeypatch.setattr(infer, "_CACHE", {})
    result = compare_feedback(speechocean_dir / CLIP, TARGET, run="tuned", workspace=tuned, max_new_tokens=8)
    assert len(loads) == 1, "one model load for both answers"
    assert result["tuned"]["run"] == "tuned" and result["tuned"]["adapter_dir"].endswith("adapter")
    assert result["base"]["run"] is None and result["base"]["adapter_dir"] is None
    assert result["tiny_random_model"] and "random" in result["note"]
    assert result["quantization"] == "4bit" and result["device"] == "cpu"  # the run's own settings
    monkeypatch.setattr(model_module, "load_model", real_load_model)

    # The greedy base answer equals that of the base model loaded without any adapter.
    base = load_tutor(str(tiny_model_dir), device="cpu", quantization="4bit", use_cache=False)
    expected_base = base.feedback(speechocean_dir / CLIP, TARGET, max_new_tokens=8)
    assert result["base"]["text"] == expected_base.text and result["base"]["new_tokens"] == expected_base.new_tokens
    with pytest.raises(ConfigError, match="needs a trained run"):
        compare_feedback(speechocean_dir / CLIP, TARGET, run="", workspace=tuned)


@pytest.mark.slow
def test_run_errors_name_the_fix(tuned, tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"does not exist.*Runs with a trained adapter: [^\n]*\btuned\b"):
        load_tutor(run="nope", workspace=tuned)
    with pytest.raises(ConfigError, match=r"no trained run yet.*python -m pipeline train"):
        load_tutor(run="nope", workspace=tmp_path)
    # another model is compared by its identity once loaded (issue 21 #8), not refused by its name:
    # here it cannot even be loaded (offline, not cached), and that is what is said
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache"):
        load_tutor("google/gemma-3n-E2B-it", run="tuned", workspace=tuned)
    half = tuned / "runs" / "half"
    half.mkdir(exist_ok=True)
    try:
        with pytest.raises(ModelLoadError, match="no adapter yet"):
            load_tutor(run="half", workspace=tuned)
    finally:  # the trained workspace is shared with other tests (test_serve lists its runs)
        half.rmdir()
    with pytest.raises(ConfigError, match="No model given"):
        load_tutor(None)


def test_cached_generation_sees_what_training_sees(tiny_model_dir, speechocean_dir):
    """KV-sharing layers: answer logits of one no-cache forward (training) equal cached step-by-step
    decoding (generation), past the sliding window (FIELD_NOTES "Known gaps")."""
    from transformers import Gemma3nForConditionalGeneration

    from pipeline.data.audio import load_audio
    from pipeline.conversation.messages import build_messages
    from pipeline.model.loading import load_processor

    processor = load_processor(str(tiny_model_dir))
    clip = load_audio(speechocean_dir / CLIP)
    full = processor.apply_chat_template(
        build_messages(TARGET, "Scores (0-10): accuracy 8, fluency 9", clip.samples), tokenize=True, return_dict=True, return_tensors="pt"
    )
    prompt = processor.apply_chat_template(
        build_messages(TARGET, None, clip.samples), add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    model = Gemma3nForConditionalGeneration.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    assert model.config.text_config.num_kv_shared_layers > 0
    n, total = prompt["input_ids"].shape[1], full["input_ids"].shape[1]
    assert n > model.config.text_config.sliding_window
    assert torch.equal(full["input_ids"][0, :n], prompt["input_ids"][0])
    with torch.no_grad():
        training = model(**full, use_cache=False).logits[0, n - 1 : total - 1]
        out = model(**prompt, use_cache=True)
        steps, mask = [out.logits[0, -1]], prompt["attention_mask"]
        for t in range(n, total - 1):
            mask = torch.cat([mask, torch.ones(1, 1, dtype=mask.dtype)], dim=1)
            out = model(input_ids=full["input_ids"][:, t : t + 1], attention_mask=mask, cache=out.cache, use_cache=True)
            steps.append(out.logits[0, -1])
    assert torch.allclose(torch.stack(steps), training, atol=1e-4)
