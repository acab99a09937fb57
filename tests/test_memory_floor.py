"""Issue 10, estimate side: the consumer floor (8 GiB CUDA, 16 GB Mac), a load phase that counts only what
exists while loading, full fine-tuning per component, `plan`, the audio encoder in NF4, per-device defaults."""

from __future__ import annotations

import json

import pytest

from pipeline import memory
from pipeline.__main__ import main as dispatch
from pipeline.config import TrainConfig, default_quantization
from pipeline.errors import ConfigError
from pipeline.memory import GIB, LengthStats, estimate_memory, model_shape, part_params, verdict
from pipeline.memory.plan import PLAN_MODELS, PLAN_ROWS, plan_for_workspace
from pipeline.memory.terms import full_trainable_params

E2B = "google/gemma-3n-E2B-it"
AUDIO_POSITIONS = 192  # <start_of_audio> + 188 soft tokens + <end_of_audio> + the newline around them


@pytest.fixture(autouse=True)
def _bf16_terms(request, monkeypatch):
    """The hand-computed terms here are written for bf16 (c = 2 bytes), whatever this machine computes
    in (`pipeline.calibration.precision`); tests that load the tiny model run what this machine picks."""
    if "tiny_model_dir" not in request.fixturenames:
        monkeypatch.setenv("TUTOR_COMPUTE_DTYPE", "bfloat16")


@pytest.fixture()
def clip30_workspace(tmp_path):
    """A workspace whose built dataset's longest row is a 30 s clip with 256 text tokens (all answer)."""
    report = tmp_path / "dataset" / "build_report.json"
    report.parent.mkdir()
    longest = 256 + AUDIO_POSITIONS
    report.write_text(json.dumps({"model": E2B, "length_stats": {
        "max": longest, "row_tokens": [longest, 300, 280], "answer_tokens": [256, 60, 50], "max_clip_s": 30.0}}))
    return tmp_path


def _estimate_json(capsys, workspace, *flags) -> dict:
    assert memory.estimate_main(["--workspace", str(workspace), "--model", E2B, *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_8_gib_cuda_defaults_or_the_first_suggestion_fit(clip30_workspace, capsys):
    out = _estimate_json(capsys, clip30_workspace, "--device", "cuda", "--memory-gb", "8")
    assert out["settings"]["quantization"] == "4bit"  # the CUDA default
    if out["verdict"] != "fits":
        first = out["suggestions"][0]
        assert first["verdict"] == "fits" and first["total_bytes"] <= memory.FIT_FRACTION * out["usable_bytes"]
        # applying it really fits, estimated again from scratch
        again = _estimate_json(capsys, clip30_workspace, "--device", "cuda", "--memory-gb", "8",
                               *[flag for k, v in first["changes"].items() for flag in _flags(k, v)])
        assert again["verdict"] == "fits" and again["total_bytes"] == first["total_bytes"]


def _flags(name: str, value) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if value is True:
        return [flag]
    if value is False:
        return ["--no-" + name.replace("_", "-")]
    return [flag, str(value)]


def test_4bit_with_host_placements_peaks_under_6_gib_load_included(clip30_workspace, capsys):
    out = _estimate_json(capsys, clip30_workspace, "--device", "cuda", "--memory-gb", "8", "--quantization", "4bit",
                         "--no-vision-tower", "--ple-on-cpu")
    assert out["seq_len"] == 256 + AUDIO_POSITIONS and out["answer_tokens"] == 256
    assert out["total_bytes"] <= 6.0 * GIB
    assert out["phases"]["load"] + out["components"]["runtime_overhead"] <= out["total_bytes"]
    assert out["components"]["weights_per_layer_embedding"] == out["components"]["weights_vision_tower"] == 0
    # the frozen audio encoder in NF4 too: ~0.9 GiB less
    smaller = _estimate_json(capsys, clip30_workspace, "--device", "cuda", "--memory-gb", "8", "--quantization", "4bit",
                             "--no-vision-tower", "--ple-on-cpu", "--quantize-audio-encoder")
    saved = out["components"]["weights_audio_encoder"] - smaller["components"]["weights_audio_encoder"]
    assert 0.8 * GIB < saved < 1.0 * GIB and smaller["total_bytes"] == out["total_bytes"] - saved


def test_load_phase_counts_only_what_exists_while_loading():
    data = memory.load_model_config(E2B)
    lengths = LengthStats(448, 30.0, [448], answer_tokens=[256])
    config = TrainConfig(model=E2B, device="cuda", quantization="4bit")
    est = estimate_memory(data, config, lengths, "cuda")
    weights = sum(v for k, v in est.components.items() if k.startswith("weights_"))
    shape = model_shape(data)
    largest = part_params(shape)["text_decoder"].largest_linear  # one bf16 matrix being quantized
    assert est.components["load_transient"] == 2 * largest
    assert est.phases["load"] == weights + 2 * largest
    # no LoRA weights, gradients or optimizer states while loading: rank and optimizer change nothing there
    for changes in ({"lora_rank": 4, "lora_alpha": 8}, {"lora_rank": 64, "lora_alpha": 128}, {"optimizer": "adafactor"}):
        other = estimate_memory(data, config.replace(**changes), lengths, "cuda")
        assert other.phases["load"] == est.phases["load"]
        assert other.phases["loss"] != est.phases["loss"]
    assert all(memory.alive_at_peak(k, "load") == (k.startswith("weights_") or k in ("load_transient", "load_checkpoint_pages", "runtime_overhead"))
               for k in est.components)
    # the per-layer table and a vision tower that is off never reach the GPU, so loading without them is smaller
    placed = estimate_memory(data, config.replace(ple_on_cpu=True, vision_tower=False), lengths, "cuda")
    table = part_params(shape)["per_layer_embedding"].total * 2
    tower = part_params(shape)["vision_tower"].total * 2
    assert est.phases["load"] - placed.phases["load"] == table + tower


def test_full_finetuning_per_component():
    data = memory.load_model_config(E2B)
    shape = model_shape(data)
    lengths = LengthStats(448, 30.0, [448], answer_tokens=[256])
    full = TrainConfig(model=E2B, device="mps", quantization="none", finetuning_type="full")
    est = estimate_memory(data, full, lengths, "mps")
    p = full_trainable_params(shape)
    parts = part_params(shape)
    assert p == sum(pp.total for name, pp in parts.items() if name != "vision_tower")  # the tower never runs
    comps = est.components
    # ZeRO's mixed-precision Adam: bf16 weights 2 + bf16 grads 2 + fp32 master 4 + two fp32 moments 8 = 16 B/param
    assert comps["full_grads"] == 2 * p and comps["full_master_fp32"] == 4 * p and comps["optimizer_states"] == 8 * p
    assert comps["lora_params"] == comps["lora_grads"] == 0
    assert sum(v for k, v in comps.items() if k.startswith("weights_")) == sum(pp.total * 2 for pp in parts.values())
    assert est.total_bytes > 16 * p
    # every Linear saves its distinct input in bf16 where LoRA saves an fp32 copy (+ dropout mask) per adapter,
    # and the audio encoder trains (keeps its saved tensors)
    lora_config = full.replace(finetuning_type="lora")
    lora = estimate_memory(data, lora_config, lengths, "mps")
    h, q, p_in, rl = shape.hidden_size, shape.q_dim, shape.hidden_size_per_layer_input, shape.laurel_rank
    inter, r, a, m = shape.intermediate_sizes[0], lora_config.lora_rank, 4, 1  # fp32 adapters, bool mask on MPS
    full_inputs = 2 * (3 * h + q + inter + rl + p_in)
    lora_inputs = sum((a + m) * i + a * r for i in [h, h, h, q, inter, h, h])  # layer 0 owns its K/V
    per_layer = [memory.layer_saved_bytes_per_token(shape, c, "mps", memory.EstimateOptions(), 0, 448)
                 for c in (full, lora_config)]
    assert per_layer[0] - per_layer[1] == full_inputs - lora_inputs
    assert comps["audio_encoder_saved"] > 0 == lora.components["audio_encoder_saved"]
    with pytest.raises(ConfigError, match="cannot be quantized"):
        TrainConfig(finetuning_type="full", quantization="4bit")


def test_full_finetune_cli_defaults_to_bf16_and_train_refuses_it(tmp_path, capsys):
    out = _estimate_json(capsys, tmp_path, "--device", "cuda", "--memory-gb", "80", "--finetuning-type", "full")
    assert out["settings"]["finetuning_type"] == "full" and out["settings"]["quantization"] == "none"
    assert out["components"]["full_grads"] > 0
    code = dispatch(["train", "--workspace", str(tmp_path), "--run", "r", "--finetuning-type", "full"])
    assert code == 1
    assert "LoRA adapters only" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ConfigError, match="LoRA adapters only"):  # the probe runs the (LoRA) training code
        memory.estimate_for_workspace(tmp_path, TrainConfig(model=E2B, device="cpu", quantization="none",
                                                            finetuning_type="full"), memory_gb=64, measure=True)


def test_plan_json_and_48_gib_mac(tmp_path, capsys):
    assert dispatch(["plan", "--workspace", str(tmp_path), "--device", "mps", "--memory-gb", "48", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["usable_bytes"] == 44 * GIB  # 48 GiB less 4 GiB left to macOS
    assert [(r["model"], r["finetuning_type"], r["quantization"]) for r in out["rows"]] == [
        (m, f, q) for m in PLAN_MODELS for f, q, _ in PLAN_ROWS]
    for row in out["rows"]:
        assert {"model", "finetuning_type", "quantization", "total_bytes", "verdict", "changes"} <= set(row)
        assert row["verdict"] == verdict(row["total_bytes"], out["usable_bytes"]).status
        for step in row["changes"]:
            assert step["what"] and step["cost"] and not {"finetuning_type", "quantization"} & set(step["changes"])
    e2b_full = next(r for r in out["rows"] if r["model"] == E2B and r["finetuning_type"] == "full")
    assert e2b_full["quantization"] == "none" and e2b_full["verdict"] == "does not fit"
    e2b_lora = next(r for r in out["rows"] if r["model"] == E2B and r["finetuning_type"] == "lora"
                    and r["quantization"] == "none")
    assert e2b_lora["verdict"] == "fits" and e2b_lora["changes"] == []
    text_code = dispatch(["plan", "--workspace", str(tmp_path), "--device", "cuda", "--memory-gb", "8"])
    text = capsys.readouterr().out
    assert text_code == 0 and "full fine-tune, bf16" in text and "QLoRA, NF4 weights" in text


def test_plan_for_a_16_gb_mac_finds_e2b_lora_in_bf16(clip30_workspace):
    """A 16 GB Mac (bf16, no bitsandbytes): E2B LoRA fits or fits tightly, with the changes it needs."""
    result = plan_for_workspace(clip30_workspace, device="mps", memory_gb=16)
    row = next(r for r in result["rows"] if r["model"] == E2B and r["finetuning_type"] == "lora"
               and r["quantization"] == "none")
    assert row["verdict"] == "fits" or (row["after_changes"] or {}).get("verdict") in ("fits", "tight")


def test_quantized_audio_encoder_only_with_a_frozen_encoder_and_quantized_weights():
    with pytest.raises(ConfigError, match="lora-targets language"):
        TrainConfig(quantization="4bit", quantize_audio_encoder=True, lora_targets="language+audio")
    with pytest.raises(ConfigError, match="needs `--quantization 4bit`"):
        TrainConfig(quantization="none", quantize_audio_encoder=True)
    data = memory.load_model_config(E2B)
    shape = model_shape(data)
    opts = memory.EstimateOptions()
    audio = part_params(shape)["audio_encoder"]
    nf4 = memory.weights(shape, TrainConfig(quantization="4bit", quantize_audio_encoder=True), "cuda", opts)
    assert nf4["weights_audio_encoder"] == int(memory.nf4_bytes(audio.linear) + audio.linear_count * memory.NF4_TABLE_BYTES
                                               + 2 * audio.other)
    int8 = memory.weights(shape, TrainConfig(quantization="8bit", quantize_audio_encoder=True), "cuda", opts)
    assert nf4["weights_audio_encoder"] < int8["weights_audio_encoder"] < 2 * audio.total


def test_defaults_lower_the_peak_on_their_device(tmp_path, capsys):
    """CPU: bf16 (faster steps; 4-bit is the first suggestion when bf16 does not fit); CUDA: NF4; MPS: bf16."""
    assert (default_quantization("cpu"), default_quantization("cuda"), default_quantization("mps")) == ("none", "4bit", "none")
    assert _estimate_json(capsys, tmp_path, "--device", "cpu", "--memory-gb", "64")["settings"]["quantization"] == "none"
    data = memory.load_model_config(E2B)
    lengths = LengthStats(448, 30.0)
    cuda = {q: estimate_memory(data, TrainConfig(device="cuda", quantization=q), lengths, "cuda").total_bytes
            for q in ("4bit", "none")}
    assert cuda["4bit"] < cuda["none"]
