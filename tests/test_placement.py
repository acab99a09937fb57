"""The load-time placements (issue 10): the per-layer table and an unused vision tower go straight to host
RAM through the device map, and the audio encoder can be quantized too.

No GPU here: the device map is checked on models built on the meta device, the accelerate dispatch a
mixed map causes is reproduced on CPU with "meta" standing in for the GPU, and `load_kwargs` is asked
for a CUDA load without loading. What the real CUDA load does is still to be run on a GPU
(benchmarks/gpu_memory.py).
"""

from __future__ import annotations

import pytest
import torch

import pipeline.model.loading as gm
from pipeline.config import TrainConfig
from pipeline.model import placement
from pipeline.model.gemma3n import PLE_MODULE, VISION_MODULE


def _names(model) -> list[str]:
    return [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]  # incl. non-persistent


def _placed(device_map: dict, names: list[str]) -> dict:
    from transformers.integrations.accelerate import expand_device_map

    return expand_device_map(device_map, names)  # how transformers places each tensor at load


@pytest.fixture(scope="module")
def meta_tiny(tiny_model_dir):
    return placement.empty_model(str(tiny_model_dir))


def test_host_modules_per_device():
    assert placement.host_modules("cuda", ple_on_cpu=True, vision_tower=False) == [PLE_MODULE, VISION_MODULE]
    assert placement.host_modules("cuda", ple_on_cpu=False, vision_tower=True) == []
    assert placement.host_modules("mps", ple_on_cpu=True, vision_tower=False) == [VISION_MODULE]  # PLE: CUDA only
    assert placement.host_modules("cpu", ple_on_cpu=True, vision_tower=False) == []  # all host RAM already


@pytest.mark.parametrize("host", [[PLE_MODULE], [VISION_MODULE], [PLE_MODULE, VISION_MODULE]])
def test_device_map_places_every_tensor(meta_tiny, host):
    device_map = placement.placement_device_map(meta_tiny, "cuda", host)
    assert "" not in device_map  # a root entry would pull the host modules onto the GPU while dispatching
    placed = _placed(device_map, _names(meta_tiny))
    for name, device in placed.items():
        assert device == ("cpu" if name.startswith(tuple(h + "." for h in host)) else "cuda"), name
    with pytest.raises(ValueError, match="no module"):
        placement.placement_device_map(meta_tiny, "cuda", ["model.no_such_module"])
    assert placement.placement_device_map(meta_tiny, "cuda", []) == {"": "cuda"}


def test_e2b_device_map_places_every_tensor():
    """The real E2B architecture (from assets/, on the meta device): no tensor falls back to "cpu"."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from pipeline.model.catalog import load_model_config

    data = load_model_config("google/gemma-3n-E2B-it")
    config = AutoConfig.for_model(data["model_type"], **{k: v for k, v in data.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    host = placement.host_modules("cuda", ple_on_cpu=True, vision_tower=False)
    placed = _placed(placement.placement_device_map(model, "cuda", host), _names(model))
    on_host = {n for n, d in placed.items() if d == "cpu"}
    assert on_host == {n for n in placed if n.startswith((PLE_MODULE + ".", VISION_MODULE + "."))}
    table = model.get_submodule(PLE_MODULE).weight
    assert tuple(table.shape) == (262_144, 30 * 256)


def test_load_kwargs_for_cuda_keep_the_table_and_the_tower_off_the_gpu(tiny_model_dir):
    kwargs = gm.load_kwargs(str(tiny_model_dir), device="cuda", dtype=torch.bfloat16, quantization="4bit",
                            vision_tower=False, ple_on_cpu=True, quantize_audio_encoder=True)
    device_map = kwargs["device_map"]
    assert device_map[PLE_MODULE] == device_map[VISION_MODULE] == "cpu"
    assert set(device_map.values()) == {"cpu", "cuda"}
    qconfig = kwargs["quantization_config"]
    assert qconfig.llm_int8_enable_fp32_cpu_offload  # transformers refuses a map with "cpu" under bnb otherwise
    assert "model.audio_tower" not in qconfig.llm_int8_skip_modules and "lm_head" in qconfig.llm_int8_skip_modules
    plain = gm.load_kwargs(str(tiny_model_dir), device="cuda", dtype=torch.bfloat16, quantization="4bit")
    assert plain["device_map"] == {"": "cuda"} and not plain["quantization_config"].llm_int8_enable_fp32_cpu_offload
    assert "model.audio_tower" in plain["quantization_config"].llm_int8_skip_modules
    assert gm.load_kwargs(str(tiny_model_dir), device="cpu", dtype=torch.bfloat16, quantization="none",
                          vision_tower=False, ple_on_cpu=True)["device_map"] == {"": "cpu"}


def test_dispatched_host_modules_come_back_as_plain_host_tensors(tiny_model_dir):
    """What transformers does with a mixed map (accelerate `dispatch_model`: the host modules become
    CPU-offloaded, weights on `meta`, copied to the accelerator at every forward) and what
    `settle_placements` undoes, with "meta" standing in for the GPU."""
    import warnings

    from accelerate import dispatch_model

    warnings.filterwarnings("ignore", message=".*device_map keys do not match any submodules.*")
    model, _ = gm.load_model(str(tiny_model_dir), device="cpu", quantization="none")
    table = model.get_submodule(PLE_MODULE).weight.detach().clone()
    tower = {n: p.detach().clone() for n, p in model.get_submodule(VISION_MODULE).named_parameters()}
    device_map = placement.placement_device_map(model, "meta", [PLE_MODULE, VISION_MODULE])
    dispatch_model(model, device_map=device_map)
    assert model.get_submodule(PLE_MODULE).weight.device.type == "meta" and "to" in model.__dict__
    assert placement.settle_placements(model) > 0
    assert not any(hasattr(module, "_hf_hook") for module in model.modules())
    assert "to" not in model.__dict__ and not hasattr(model, "hf_device_map")
    restored = model.get_submodule(PLE_MODULE).weight
    assert restored.device.type == "cpu" and torch.equal(restored, table)
    for name, value in model.get_submodule(VISION_MODULE).named_parameters():
        assert value.device.type == "cpu" and torch.equal(value, tower[name])
    assert model.model.language_model.layers[0].mlp.up_proj.weight.device.type == "meta"  # the "GPU" part


@pytest.mark.slow
def test_quantized_audio_encoder_trains_with_language_lora(tiny_model_dir):
    import bitsandbytes as bnb

    from pipeline.training.probe import synthetic_batch

    model, report = gm.load_model(str(tiny_model_dir), device="cpu", quantization="4bit", quantize_audio_encoder=True)
    audio = [n for n, m in model.named_modules() if n.startswith("model.audio_tower") and isinstance(m, torch.nn.Linear)]
    assert audio and all(isinstance(model.get_submodule(n), bnb.nn.Linear4bit) for n in audio)
    assert set(audio) <= set(report.quantized_modules) and "model.audio_tower" not in report.skip_patterns
    assert not any(n.startswith("model.embed_audio") for n in report.quantized_modules)  # the embedder stays bf16
    config = TrainConfig(model=str(tiny_model_dir), quantization="4bit", quantize_audio_encoder=True, lora_rank=4,
                         lora_alpha=8)
    lora_model, lora_report = gm.attach_lora(model, config)
    assert lora_report.modules_per_part["audio"] == 0
    lora_model.train()
    batch = synthetic_batch(model.config, 2, 300, 3.0, answer_tokens=16)
    loss = lora_model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for n, p in lora_model.named_parameters() if p.requires_grad)
