"""A bf16 checkpoint on a CPU that computes in fp32: loaded as stored, then cast (`pipeline.model.load_dtype`)."""

from __future__ import annotations

import json

import torch

from pipeline.model.load_dtype import cast_floating_weights, checkpoint_torch_dtype


def test_every_floating_weight_is_cast_and_integer_weights_are_left_alone():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)).to(torch.bfloat16)
    model[0].register_buffer("scale", torch.ones(3, dtype=torch.bfloat16))
    model[1].register_parameter("codes", torch.nn.Parameter(torch.zeros(6, dtype=torch.uint8), requires_grad=False))
    tied = model[0].weight
    before = model[0].weight.detach().float().clone()
    assert cast_floating_weights(model, torch.float32) == 5  # weight, bias, scale, LayerNorm weight and bias
    assert model[0].weight is tied and model[0].weight.dtype == torch.float32  # the same Parameter: ties hold
    assert torch.equal(model[0].weight.detach(), before)
    assert model[0].scale.dtype == torch.float32 and model[1].codes.dtype == torch.uint8
    assert cast_floating_weights(model, torch.float32) == 0


def test_the_checkpoint_dtype_is_read_from_its_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3n", "text_config": {"dtype": "bfloat16"}}))
    assert checkpoint_torch_dtype(str(tmp_path)) == torch.bfloat16
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3n", "torch_dtype": "float32"}))
    assert checkpoint_torch_dtype(str(tmp_path)) == torch.float32
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3n"}))
    assert checkpoint_torch_dtype(str(tmp_path)) is None
    assert checkpoint_torch_dtype(str(tmp_path / "missing")) is None


def test_a_bf16_checkpoint_loads_in_fp32_on_a_cpu_that_computes_in_fp32(tiny_model_dir, tmp_path, monkeypatch):
    import shutil

    from transformers import Gemma3nForConditionalGeneration

    from pipeline.model.loading import load_model

    stored = tmp_path / "bf16"
    shutil.copytree(tiny_model_dir, stored)
    Gemma3nForConditionalGeneration.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).save_pretrained(stored)
    assert checkpoint_torch_dtype(str(stored)) == torch.bfloat16
    monkeypatch.setenv("TUTOR_COMPUTE_DTYPE", "float32")
    for quantization in ("none", "4bit"):
        model, _ = load_model(str(stored), device="cpu", quantization=quantization)
        dtypes = {p.dtype for p in model.parameters()}
        assert torch.float32 in dtypes and torch.bfloat16 not in dtypes, (quantization, dtypes)
        ids = torch.tensor([[2, 10, 11, 12]])
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
