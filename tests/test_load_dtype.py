"""A bf16 checkpoint on a CPU that computes in fp32: loaded as stored, then cast (`pipeline.training.load_dtype`)."""

from __future__ import annotations

import json

import torch

from pipeline.training.load_dtype import cast_floating_weights, checkpoint_torch_dtype


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
