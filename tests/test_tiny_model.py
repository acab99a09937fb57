"""The offline stand-in loads like the real checkpoint and keeps Gemma 3n's token layout."""

from __future__ import annotations

import json

import numpy as np
import pytest


def _clip(seconds: float = 1.5, sr: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    rng = np.random.default_rng(0)
    return (0.2 * np.sin(2 * np.pi * 440 * t) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def _messages(audio, answer=None):
    msgs = [
        {"role": "system", "content": [{"type": "text", "text": "You are a pronunciation tutor."}]},
        {"role": "user", "content": [{"type": "audio", "audio": audio}, {"type": "text", "text": "Read: We call it bear."}]},
    ]
    if answer is not None:
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": answer}]})
    return msgs


@pytest.fixture(scope="module")
def processor(tiny_model_dir):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_model_dir)


def test_config_token_ids_match_tokenizer(tiny_model_dir, processor):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model_dir)
    tok = processor.tokenizer
    ids = tok.convert_tokens_to_ids
    assert config.audio_token_id == ids("<audio_soft_token>") == tok.audio_token_id
    assert config.boa_token_id == ids("<start_of_audio>")
    assert config.eoa_token_id == ids("<end_of_audio>")
    assert config.image_token_id == ids("<image_soft_token>") == tok.image_token_id
    assert config.boi_token_id == ids("<start_of_image>")
    assert config.eoi_token_id == ids("<end_of_image>")
    text = config.text_config
    assert (text.pad_token_id, text.bos_token_id) == (tok.pad_token_id, tok.bos_token_id) == (0, 2)
    assert ids("<end_of_turn>") in text.eos_token_id and tok.eos_token_id in text.eos_token_id
    # Gemma 3n layout: text ids, then the vision block, then the audio block.
    assert text.vocab_size_per_layer_input == config.vision_config.vocab_offset == config.eoi_token_id
    assert config.audio_config.vocab_offset == config.eoa_token_id
    assert text.vocab_size == config.audio_config.vocab_offset + config.audio_config.vocab_size == len(tok)
    assert max(ids(t) for t in ("<start_of_turn>", "<end_of_turn>", "<start_of_audio>", "<bos>")) < text.vocab_size_per_layer_input
    assert processor.audio_seq_length == 188
    assert type(processor.feature_extractor).__name__ == "Gemma3nAudioFeatureExtractor"
    assert json.loads((tiny_model_dir / "tiny_model.json").read_text())["tiny_random_model"] is True


def test_any_english_text_tokenizes_without_unk(processor):
    tok = processor.tokenizer
    text = 'Words to work on: "GREY" (accuracy 3/10) - café, naïve, 你好!'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def test_chat_template_renders_like_gemma3n(processor):
    tok = processor.tokenizer
    batch = processor.apply_chat_template(
        _messages(_clip(), "Good. Accuracy 8/10."), tokenize=True, return_dict=True, return_tensors="pt"
    )
    ids = batch["input_ids"][0].tolist()
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert ids.count(tok.audio_token_id) == 188
    assert ids.count(tok.convert_tokens_to_ids("<start_of_audio>")) == 1
    assert ids.count(tok.convert_tokens_to_ids("<end_of_audio>")) == 1
    text = tok.decode(ids)
    assert text.startswith("<bos><start_of_turn>user\nYou are a pronunciation tutor.\n\n")
    assert text.endswith("Read: We call it bear.<end_of_turn>\n<start_of_turn>model\nGood. Accuracy 8/10.<end_of_turn>\n")
    assert "system" not in text
    assert batch["input_features"].shape[-1] == 128


def test_model_forward_and_generate(tiny_model_dir, processor):
    import torch
    from transformers import Gemma3nForConditionalGeneration

    model = Gemma3nForConditionalGeneration.from_pretrained(tiny_model_dir).eval()
    batch = processor.apply_chat_template(
        _messages(_clip(), "Good."), tokenize=True, return_dict=True, return_tensors="pt"
    )
    with torch.no_grad():
        out = model(**batch)
    assert out.logits.shape == (1, batch["input_ids"].shape[1], len(processor.tokenizer))
    assert torch.isfinite(out.logits).all()
    prompt = processor.apply_chat_template(
        _messages(_clip()), tokenize=True, return_dict=True, return_tensors="pt", add_generation_prompt=True
    )
    with torch.no_grad():
        generated = model.generate(**prompt, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]


def test_cli_writes_folder(tmp_path, capsys):
    from pipeline.model.cli import make_tiny_model_main as main
    from pipeline.model.tiny_model import is_tiny_random_model

    assert main([str(tmp_path / "m"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tiny_random_model"] is True and result["parameters"] > 0
    assert is_tiny_random_model(tmp_path / "m")
    assert not is_tiny_random_model(tmp_path)
