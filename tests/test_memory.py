"""The memory model: each term against hand-computed values, verdicts, suggestions, the CLI."""

from __future__ import annotations

import json
import math

import pytest

from pipeline import memory
from pipeline.config import TrainConfig
from pipeline.errors import ConfigError, ModelLoadError
from pipeline.host.free_heap import heap_can_follow_live_tensors
from pipeline.memory import (
    GIB,
    EstimateOptions,
    LengthStats,
    estimate_memory,
    model_shape,
    part_params,
    verdict,
)

# A small Gemma 3n config whose every term is computed by hand below.
# h=8, 2 layers (layer 1 reuses layer 0's K/V), 2 query heads / 1 KV head of dim 4 (q=8, kv=4),
# MLP 16, per-layer input p=2 over a 50-row table, AltUp n=2, LAuReL rank 2, layer 0 sparse.
SMALL = {
    "model_type": "gemma3n",
    "tie_word_embeddings": True,
    "text_config": {
        "vocab_size": 100, "hidden_size": 8, "intermediate_size": [16, 16], "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "num_kv_shared_layers": 1,
        "vocab_size_per_layer_input": 50, "hidden_size_per_layer_input": 2, "altup_num_inputs": 2,
        "laurel_rank": 2, "activation_sparsity_pattern": [0.95, 0.0],
    },
    "audio_config": {"hidden_size": 4, "conf_num_hidden_layers": 1, "conf_num_attention_heads": 2,
                     "conf_conv_kernel_size": 3, "sscp_conv_channel_size": [2, 2], "input_feat_size": 8,
                     "vocab_size": 3, "conf_reduction_factor": 4},
    "vision_config": {"hidden_size": 4, "vocab_size": 3, "architecture": "hand_counted_arch"},
}


pytestmark = pytest.mark.usefixtures("glibc_heap")  # the retained-heap terms here are glibc's


@pytest.fixture(autouse=True)
def _bf16_terms(request, monkeypatch):
    """The hand-computed terms here are written for bf16 (c = 2 bytes), whatever this machine computes
    in (`pipeline.calibration.precision`); tests that load the tiny model run what this machine picks."""
    if "tiny_model_dir" not in request.fixturenames:
        monkeypatch.setenv("TUTOR_COMPUTE_DTYPE", "bfloat16")


@pytest.fixture(autouse=True)
def _vision_table(monkeypatch):
    monkeypatch.setitem(memory.VISION_TOWER_PARAMS, "hand_counted_arch", 100)


def cfg(**kw) -> TrainConfig:
    base = dict(model="x", device="cpu", quantization="none", lora_rank=2, lora_alpha=4, lora_dropout=0.0,
                batch_size=1, max_length=256, gradient_checkpointing=False, optimizer="adamw")
    base.update(kw)
    return TrainConfig(**base)


def test_part_params_by_hand():
    p = part_params(model_shape(SMALL))
    # layer 0: MLP 3*8*16=384, attention q,o 2*8*8=128 + k,v 2*8*4=64, LAuReL 2*8*2=32, PLE gate/proj 2*8*2=32
    # layer 1 (KV shared): no k/v -> 384+128+32+32
    assert p["text_decoder"].linear == (384 + 192 + 32 + 32) + (384 + 128 + 32 + 32)
    # AltUp kept unquantized per layer: n^2 + n^3 + h n = 4 + 8 + 16 = 28; norms 8h + q_norm (+ k_norm) = 64+4(+4)
    assert p["text_decoder"].other == 2 * 28 + (64 + 8) + (64 + 4)
    assert p["text_decoder"].linear_count == 11 + 9
    assert p["token_embedding"].total == 100 * 8
    assert p["per_layer_embedding"].total == 50 * 2 * 2
    # AltUp in/out 2*(n-1)*h*h = 128, per-layer model projection 8*2*2 = 32, embed_audio/vision projections 4*8 each
    assert p["projections"].linear == 128 + 32 + 32 + 32
    # final norm h + p, embedder tables 3*4 + 2 norms of 4, twice
    assert p["projections"].other == 10 + (12 + 8) + (12 + 8)
    # conformer: 24 h_a^2 = 384; subsample projection c1 * (feat/4) * h_a = 2*2*4 = 16
    assert p["audio_encoder"].linear == 384 + 16
    # 9 norms + depthwise conv h_a*k + per_dim_scale h_a/heads; convs 9*1*2 + 2 + 9*2*2 + 2
    assert p["audio_encoder"].other == (36 + 12 + 2) + (18 + 2 + 36 + 2)
    assert p["vision_tower"].total == 100


def test_part_params_match_a_real_build_of_e2b():
    torch = pytest.importorskip("torch")
    from transformers import Gemma3nConfig, Gemma3nForConditionalGeneration

    data = memory.load_model_config("google/gemma-3n-E2B-it")
    with torch.device("meta"):
        model = Gemma3nForConditionalGeneration(Gemma3nConfig.from_dict(data))
    real = sum(p.numel() for p in model.parameters())
    assert real == 5_418_464_192
    assert sum(pp.total for pp in part_params(model_shape(data)).values()) == real


def test_shipped_configs_are_e2b_and_e4b():
    e2b = model_shape(memory.load_model_config("google/gemma-3n-E2B-it"))
    e4b = model_shape(memory.load_model_config("google/gemma-3n-E4B-it"))
    assert (e2b.num_layers, e2b.hidden_size, e2b.intermediate_sizes[0], e2b.num_kv_shared_layers) == (30, 2048, 8192, 10)
    assert (e4b.num_layers, e4b.hidden_size, e4b.intermediate_sizes[0], e4b.num_kv_shared_layers) == (35, 2048, 16384, 15)
    for s in (e2b, e4b):
        assert (s.vocab_size, s.vocab_size_per_layer_input, s.hidden_size_per_layer_input) == (262400, 262144, 256)
        assert (s.audio_layers, s.audio_hidden, s.vision_architecture) == (12, 1536, "mobilenetv5_300m_enc")


def test_nf4_and_int8_bytes_by_hand():
    # 32768 weights: 16384 bytes of codes, 512 blocks of 64 -> 512 int8 absmax + 2 fp32 second-level absmax
    assert memory.nf4_bytes(32768) == 16384 + 512 + 4 * 2
    assert memory.nf4_bytes(32768, double_quant=False) == 16384 + 4 * 512
    assert memory.int8_bytes(1000, 10) == 1000 + 40


def test_weights_by_hand():
    shape = model_shape(SMALL)
    opts = EstimateOptions(weights_mapped=False)  # every weight resident (a model built in memory, or a GPU)
    w = memory.weights(shape, cfg(), "cpu", opts)
    assert w["weights_text_decoder"] == 2 * (1216 + 196)
    assert w["weights_token_embedding"] == 2 * 800  # tied lm_head counted once
    assert w["weights_vision_tower"] == 200
    w4 = memory.weights(shape, cfg(quantization="4bit"), "cpu", opts)
    assert w4["weights_text_decoder"] == int(memory.nf4_bytes(1216) + 20 * memory.NF4_TABLE_BYTES + 2 * 196)
    assert w4["weights_audio_encoder"] == w["weights_audio_encoder"]  # skip list: audio tower stays bf16
    assert w4["weights_per_layer_embedding"] == w["weights_per_layer_embedding"]  # embeddings never quantized
    no_vision = memory.weights(shape, cfg(vision_tower=False), "cpu", opts)
    assert no_vision["weights_vision_tower"] == 0
    ple_cpu = memory.weights(shape, cfg(ple_on_cpu=True), "cuda", opts)
    assert ple_cpu["weights_per_layer_embedding"] == 0
    # CUDA only: on CPU and MPS the table stays with the model
    assert memory.weights(shape, cfg(ple_on_cpu=True), "mps", opts)["weights_per_layer_embedding"] == \
        w["weights_per_layer_embedding"] > 0
    # the trainer on CPU: views into the mapped checkpoint, resident once read; the vision tower never is,
    # the per-layer table only at the dataset's tokens (64 KiB fault-around each), in full when unknown
    mapped = memory.weights(shape, cfg(), "cpu", EstimateOptions())
    assert mapped["weights_vision_tower"] == 0 and mapped["weights_text_decoder"] == w["weights_text_decoder"]
    assert mapped["weights_per_layer_embedding"] == w["weights_per_layer_embedding"]
    e2b = model_shape(memory.load_model_config("google/gemma-3n-E2B-it"))
    seen = memory.weights(e2b, cfg(), "cpu", EstimateOptions(), distinct_tokens=1000)
    assert seen["weights_per_layer_embedding"] == 1000 * 64 * 1024
    assert memory.weights(e2b, cfg(), "cuda", EstimateOptions(), distinct_tokens=1000)["weights_per_layer_embedding"] \
        == 262_144 * 30 * 256 * 2


def test_e2b_weights_match_field_notes():
    data = memory.load_model_config("google/gemma-3n-E2B-it")
    w = memory.weights(model_shape(data), cfg(), "cpu", EstimateOptions(weights_mapped=False))
    assert 10.0 * GIB < sum(w.values()) < 10.2 * GIB  # FIELD_NOTES: bf16 ~10.1 GiB
    w4 = memory.weights(model_shape(data), cfg(quantization="4bit"), "cpu", EstimateOptions(weights_mapped=False))
    assert 7.3 * GIB < sum(w4.values()) < 7.7 * GIB  # ~7.5 GiB with the audio encoder kept bf16


def test_lora_and_optimizer_by_hand():
    shape = model_shape(SMALL)
    # wrapped (in, out): layer 0 q(8,8) o(8,8) gate(8,16) up(8,16) down(16,8) k(8,4) v(8,4); layer 1 without k, v
    p = 2 * ((8 + 8) * 2 + (8 + 16) * 2 + (16 + 8) + (8 + 4) * 2) + 2 * ((8 + 8) * 2 + (8 + 16) * 2 + (16 + 8))
    assert memory.lora_params(shape, cfg()) == p
    st = memory.trainable_state(shape, cfg(), EstimateOptions())
    assert st == {"lora_params": 4 * p, "lora_grads": 4 * p, "optimizer_states": 8 * p, "lora_master_fp32": 0}
    # 8-bit AdamW: every LoRA matrix here is below bitsandbytes' 4096-element minimum -> stays fp32
    assert memory.trainable_state(shape, cfg(optimizer="adamw_8bit"), EstimateOptions())["optimizer_states"] == 8 * p
    big = memory.trainable_state(model_shape(memory.load_model_config("google/gemma-3n-E2B-it")),
                                 cfg(lora_rank=16, optimizer="adamw_8bit"), EstimateOptions())
    assert big["optimizer_states"] < 0.26 * big["lora_params"] * 2  # ~2 bytes vs 8 per element
    # Adafactor: (rows + cols) * 4 per matrix; bf16 adapters need an fp32 master copy
    ada = memory.trainable_state(shape, cfg(optimizer="adafactor"), EstimateOptions(adapter_dtype="bfloat16"))
    assert ada["lora_master_fp32"] == 4 * p and ada["lora_params"] == 2 * p
    mats = [(2, 8), (8, 2), (2, 8), (8, 2), (2, 8), (16, 2), (2, 8), (16, 2), (2, 16), (8, 2), (2, 8), (4, 2), (2, 8), (4, 2)]
    mats += [(2, 8), (8, 2), (2, 8), (8, 2), (2, 8), (16, 2), (2, 8), (16, 2), (2, 16), (8, 2)]
    assert ada["optimizer_states"] == sum(4 * (a + b) for a, b in mats)


def test_layer_activations_by_hand():
    shape = model_shape(SMALL)
    opts = EstimateOptions(attn_implementation="eager")
    c = cfg(lora_dropout=0.05)  # CPU: dropout saves an fp32 noise tensor (4 bytes) per LoRA input element
    layer0 = memory.layer_saved_bytes_per_token(shape, c, "cpu", opts, 0, seq_len=10)
    norms = 8 * (4 * 8 + 8) + (4 * 8 + 8 * 2) + 2 * (4 * 4 + 8 * 1)
    altup = 2 * 2 * 8 * 2 + 8 * 2 + 2 * 2 * 2 + 2 * 2
    lora = sum((4 + 4) * i + 4 * 2 for i in (8, 8, 8, 8, 16, 8, 8))
    eager = 3 * 8 * 2 + 2 * 10 * (4 + 2)
    mlp = 3 * 16 * 2 + 16 * 2  # + the sparse layer's top-k copy
    assert layer0 == norms + altup + lora + eager + mlp + 2 * 2
    # on CUDA the dropout mask is a bool (1 byte); without dropout, no mask
    cuda0 = memory.layer_saved_bytes_per_token(shape, c, "cuda", opts, 0, seq_len=10)
    assert layer0 - cuda0 == 3 * sum((8, 8, 8, 8, 16, 8, 8))
    nodrop = memory.layer_saved_bytes_per_token(shape, cfg(), "cpu", opts, 0, seq_len=10)
    assert layer0 - nodrop == 4 * sum((8, 8, 8, 8, 16, 8, 8))
    # SDPA has no quadratic term; layer 1 reuses layer 0's K/V
    sdpa0 = memory.layer_saved_bytes_per_token(shape, c, "cpu", EstimateOptions(attn_implementation="sdpa"), 0, 10)
    assert layer0 - sdpa0 == eager - (2 * 8 * 2 + 2 * 4 * 2 + 4 * 2)
    sdpa_long = memory.layer_saved_bytes_per_token(shape, c, "cpu", EstimateOptions(attn_implementation="sdpa"), 0, 1000)
    assert sdpa_long == sdpa0


def test_activations_checkpointing_and_batch():
    shape = model_shape(SMALL)
    opts = EstimateOptions()
    per = [memory.layer_saved_bytes_per_token(shape, cfg(), "cpu", opts, i, 300) for i in range(2)]
    once = 2 * 2 * 2 + memory.FINAL_SAVED_H_ELEMS * 8 * 2 + 2 * 300 * 2 + 2 * 2 * 4 * 2
    full = memory.activations(shape, cfg(), "cpu", opts, 300)
    assert full["activations_decoder"] == (sum(per) + once) * 300
    assert full["activations_recompute"] == 0
    gc = memory.activations(shape, cfg(gradient_checkpointing=True, batch_size=3), "cpu", opts, 300)
    assert gc["activations_decoder"] == (2 * 2 * 8 * 2 + once + memory.INPUT_GRAD_SAVED_H_ELEMS * 8 * 2) * 900
    assert gc["activations_recompute"] == max(per) * 900
    assert gc["backward_workspace"] == ((3 * 16 + 2 * 2 * 8) * 2 + 2 * 300 * 3) * 900  # + eager grads at the peak


def test_logits_loss_counts_the_copies():
    shape = model_shape(SMALL)
    # tanh output (bf16) + log_softmax output (fp32) + two fp32 gradients = 2 + 4 + 4 + 4 per entry,
    # x vocab 100 x batch 2 x 300 supervised positions per row
    assert memory.logits_loss(shape, cfg(batch_size=2), "cpu", EstimateOptions(), 300) == 100 * 14 * 600
    kept = memory.logits_loss(shape, cfg(), "cpu", EstimateOptions(keep_logits=True), 300)
    assert kept == 100 * 16 * 300
    e2b = model_shape(memory.load_model_config("google/gemma-3n-E2B-it"))
    per_token = memory.logits_loss(e2b, cfg(), "cpu", EstimateOptions(), 1)
    assert 3.6e6 < per_token < 3.8e6  # FIELD_NOTES: 1.6 MB saved + 2.1 MB of fp32 gradient per token


def test_audio_encoder_by_hand():
    shape = model_shape(SMALL)
    frames = math.ceil(30 * 100 / 4)  # 750 frames after 4x subsampling; clips are cut at 30 s
    frozen = memory.audio_encoder_bytes(shape, cfg(), "cpu", EstimateOptions(), 45.0)
    assert frozen == {"audio_encoder_transient": 248 * 4 * frames + 19 * 1024**2, "audio_encoder_saved": 0,
                      "audio_encoder_recompute": 0}
    lora = memory.audio_encoder_bytes(shape, cfg(lora_targets="language+audio", lora_dropout=0.1), "cpu",
                                      EstimateOptions(), 30.0)
    # 1 block x 750 frames x h_a 4 x (86 frozen + 16 LoRA inputs x (4 fp32 copy + 4 CPU dropout mask)) + 12 r x 4
    assert lora["audio_encoder_saved"] == (4 * (86 + 16 * 8) + 12 * 4 * 2) * 750
    assert memory.audio_encoder_bytes(shape, cfg(), "cpu", EstimateOptions(), 0.0)["audio_encoder_transient"] == 0
    # E2B, 30 s clip: ~0.3 GB frozen (FIELD_NOTES), ~2.8 GiB kept with LoRA r=16 (measured here)
    e2b = model_shape(memory.load_model_config("google/gemma-3n-E2B-it"))
    big = memory.audio_encoder_bytes(e2b, cfg(lora_targets="language+audio", lora_rank=16, lora_dropout=0.05),
                                     "cpu", EstimateOptions(), 30.0)
    assert 0.27 * GIB < memory.audio_encoder_bytes(e2b, cfg(), "cpu", EstimateOptions(), 30.0)[
        "audio_encoder_transient"] < 0.31 * GIB
    assert 2.6 * GIB < big["audio_encoder_saved"] < 2.9 * GIB


def test_logits_cover_only_the_answer_positions():
    """answer_loss keeps a position when its NEXT token is supervised: one logit row per supervised
    token, so the logits scale with batch x the longest answer, not with the padded row."""
    rows, answers = [300, 280, 900], [70, 90, 400]
    est = estimate_memory(SMALL, cfg(max_length=512, batch_size=2), LengthStats(900, 10.0, rows, answer_tokens=answers), "cpu")
    assert est.seq_len == 300 and est.answer_tokens == 90  # the 400-token answer's row is excluded
    assert est.components["logits_loss"] == 100 * 14 * 2 * 90
    # only the maximum known (older reports / the benchmark): capped by the kept row
    assert LengthStats(900, longest_answer_tokens=64).kept_longest_answer(512) == 64
    assert LengthStats(40, longest_answer_tokens=64).kept_longest_answer(512) == 40
    # unknown: the documented conservative assumption min(row, 256), said in the notes
    unknown = estimate_memory(SMALL, cfg(max_length=512), LengthStats(900), "cpu")
    assert unknown.answer_tokens == memory.DEFAULT_ANSWER_TOKENS == 256
    assert any("answer length unknown" in n for n in unknown.notes)
    assert LengthStats(100).kept_longest_answer(512) == 100
    known = estimate_memory(SMALL, cfg(max_length=512), LengthStats(900, 10.0, rows, answer_tokens=answers), "cpu")
    assert not any("answer length unknown" in n for n in known.notes)
    # E2B at 512 tokens with a 64-token answer: ~1.6 GiB less than logits at every position
    e2b_config = memory.load_model_config("google/gemma-3n-E2B-it")
    every = memory.logits_loss(model_shape(e2b_config), cfg(), "cpu", EstimateOptions(), 512)
    answer = estimate_memory(e2b_config, cfg(max_length=512), LengthStats(512, 30.0, [512], answer_tokens=[64]), "cpu")
    assert every - answer.components["logits_loss"] == 262_400 * 14 * (512 - 64)


def test_workspace_report_answer_lengths(tmp_path):
    report = tmp_path / "dataset" / "build_report.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"length_stats": {"max": 400, "row_tokens": [300, 400], "answer_tokens": [50, 80],
                                                   "max_clip_s": 4.0}}))
    stats = memory.length_stats_from_workspace(tmp_path, 512)
    assert stats.answer_tokens == [50, 80] and stats.kept_longest_answer(512) == 80 and stats.kept_longest_answer(350) == 50
    # a report built before answer lengths were recorded still loads; the estimate assumes the default
    report.write_text(json.dumps({"length_stats": {"max": 400, "row_tokens": [300, 400], "max_clip_s": 4.0}}))
    old = memory.length_stats_from_workspace(tmp_path, 512)
    assert old.answer_tokens == [] and not old.answers_known() and old.kept_longest_answer(512) == 256


def test_estimate_total_is_static_plus_peak_phase():
    # with glibc's retained heap counted (a CPU host whose trainer cannot pin the mmap threshold)
    est = estimate_memory(SMALL, cfg(max_length=512), LengthStats(900, 10.0, [300, 280, 900]), "cpu",
                          EstimateOptions(cpu_heap_retention=True))
    assert est.seq_len == 300  # the 900-token row is excluded by max_length 512, never truncated
    static = sum(v for k, v in est.components.items() if k.startswith(memory.STATIC_PREFIXES))
    comps = est.components
    assert est.phases["loss"] == static + comps["activations_decoder"] + comps["logits_loss"] + comps["allocator_retention"]
    assert est.phases["layer_backward"] == static + sum(comps[k] for k in (
        "activations_decoder", "activations_recompute", "backward_workspace", "dequant_workspace",
        "allocator_retention"))
    assert est.phases["optimizer"] == static + comps["optimizer_step"]
    assert est.step_bytes == est.phases[est.peak_phase] + comps["runtime_overhead"]
    # the run's steps meet two row lengths: the CPU kernel cache grows by one shape (pipeline.memory.run_phases),
    # and the run's largest micro-batch retains more heap than the median one the step prices
    assert comps["cpu_heap_run_spread"] == int(comps["allocator_retention"] * memory.run_spread_fraction(cfg(max_length=512))) > 0
    assert est.total_bytes == est.run_phases["step"] == est.step_bytes + comps["cpu_kernel_cache"] + comps["cpu_heap_run_spread"]


def test_allocator_retention_by_hand():
    shape = model_shape(SMALL)  # widest MLP I = 16, L = 2 layers, h = 8
    assert (max(shape.intermediate_sizes), shape.num_layers, shape.hidden_size) == (16, 2, 8)
    # batch 2 x 300 tokens x (a I + b L h) + audio seconds of the row x c; no checkpointing (0, 138, 0),
    # checkpointing (102, 42, 2.35 MB per second)
    assert memory.allocator_retention(shape, cfg(batch_size=2), "cpu", 300) == 2 * 300 * (0 * 16 + 138 * 2 * 8)
    assert memory.allocator_retention(shape, cfg(batch_size=2, gradient_checkpointing=True), "cpu", 300) == \
        2 * 300 * (102 * 16 + 42 * 2 * 8)
    assert memory.allocator_retention(shape, cfg(batch_size=2, gradient_checkpointing=True), "cpu", 300, None, 30.0) == \
        2 * 300 * (102 * 16 + 42 * 2 * 8) + 30 * 2_350_000
    assert memory.allocator_retention(shape, cfg(batch_size=2), "cpu", 300, None, 10.0) == 2 * 300 * 138 * 2 * 8
    assert memory.allocator_retention(shape, cfg(batch_size=2), "cuda", 300) == 0
    assert memory.allocator_retention(shape, cfg(batch_size=2), "mps", 300) == 0
    # measured in bf16; in fp32 the freed temporaries change as the activations do (not simply 2x: norms and
    # softmax are fp32 in both, and fp32 has no bf16 copy of the attention probabilities)
    fp32, bf16 = EstimateOptions(compute_dtype="float32"), EstimateOptions(compute_dtype="bfloat16")
    for config in (cfg(batch_size=2), cfg(batch_size=2, gradient_checkpointing=True)):
        ratio = (sum(memory.activations(shape, config, "cpu", fp32, 300).values())
                 / sum(memory.activations(shape, config, "cpu", bf16, 300).values()))
        assert 0.5 < ratio < 2.0 and ratio != 1.0
        assert memory.allocator_retention(shape, config, "cpu", 300, fp32) == int(
            memory.allocator_retention(shape, config, "cpu", 300, bf16) * ratio)
    # a process whose RSS follows its live tensors (MALLOC_MMAP_THRESHOLD_ fixed) retains nothing
    live_only = EstimateOptions(cpu_heap_retention=False)
    assert memory.allocator_retention(shape, cfg(batch_size=2), "cpu", 300, live_only) == 0
    with_heap = estimate_memory(SMALL, cfg(), LengthStats(256, 0.0), "cpu", EstimateOptions(cpu_heap_retention=True))
    without = estimate_memory(SMALL, cfg(), LengthStats(256, 0.0), "cpu", live_only)
    assert with_heap.step_bytes - without.step_bytes == with_heap.components["allocator_retention"] > 0
    assert with_heap.total_bytes - without.total_bytes == (
        with_heap.components["allocator_retention"] + with_heap.components["cpu_heap_run_spread"])
    assert without.components["cpu_heap_run_spread"] == 0


def test_longest_kept_row_and_exclusions():
    stats = LengthStats(900, 10.0, [300, 280, 900, 512])
    assert stats.kept_longest(512) == 512 and stats.excluded(512) == 1
    assert stats.kept_longest(256) == 0 and stats.excluded(256) == 4
    assert LengthStats(900).kept_longest(512) == 512  # no per-row lengths: assume max_length


def test_unknown_device_and_config_raise():
    with pytest.raises(ConfigError, match="cpu, cuda or mps"):
        estimate_memory(SMALL, cfg(), LengthStats(300), "tpu")
    with pytest.raises(ModelLoadError, match="not a Gemma 3n config"):
        model_shape({"text_config": {"hidden_size": 8}})
    with pytest.raises(ModelLoadError, match="neither"):
        memory.load_model_config("/nonexistent/model")


@pytest.mark.parametrize(
    ("total", "usable", "status"),
    [(80, 100, "fits"), (90, 100, "fits"), (91, 100, "tight"), (100, 100, "tight"), (101, 100, "does not fit")],
)
def test_verdict_thresholds(total, usable, status):
    v = verdict(total, usable)
    assert v.status == status
    assert v.margin_bytes == usable - total
    assert v.margin_percent == pytest.approx(100.0 * (usable - total) / usable, abs=0.05)


def test_device_memory_budget():
    d = memory.device_memory("cpu", memory_gb=48)  # a "48 GB" laptop: the OS reports 48 GiB
    assert d.total_bytes == 48 * 1024**3
    assert d.usable_bytes == 48 * GIB - int(0.1 * 48 * GIB)  # 10 % left to the OS
    small = memory.device_memory("cpu", memory_gb=8)
    assert small.usable_bytes == 8 * GIB - 2 * GIB  # at least 2 GiB left
    real = memory.device_memory("cpu")
    assert 0 < real.usable_bytes < real.total_bytes
    cuda = memory.usable_budget("cuda", 80 * GIB, 70 * GIB)[0]
    assert cuda == 70 * GIB - 256 * memory.MIB
    assert memory.device_memory("cpu", memory_gb=0).source == real.source  # 0: what the device reports
    with pytest.raises(ConfigError):
        memory.device_memory("cpu", memory_gb=-1)


E2B = "google/gemma-3n-E2B-it"


@pytest.mark.parametrize(
    ("device", "settings", "budget_gb"),
    [
        ("cpu", dict(quantization="none", gradient_checkpointing=False, batch_size=4, grad_accum=2), 16),
        ("cuda", dict(quantization="none", gradient_checkpointing=False, batch_size=2, max_length=1024), 18),
        ("mps", dict(quantization="none", lora_rank=64, lora_alpha=128, max_length=2048), 18),
    ],
)
def test_every_suggestion_fits(device, settings, budget_gb):
    data = memory.load_model_config(E2B)
    config = TrainConfig(model=E2B, device=device, **settings)
    rows = [300, 400, 600, 700, 900, 1000, 1024, 2000][: 8 if config.max_length >= 2000 else 7]
    lengths = LengthStats(max(rows), 30.0, rows)
    usable = memory.usable_budget(device, budget_gb * GIB, budget_gb * GIB)[0]
    before = estimate_memory(data, config, lengths, device)
    assert verdict(before.total_bytes, usable).status != "fits"
    suggestions = memory.suggest_fits(data, config, lengths, device, usable)
    assert suggestions, "some setting must fit"
    for s in suggestions:
        assert set(s.changes) <= set(TrainConfig.__dataclass_fields__)  # the app applies them as settings
        again = estimate_memory(data, config.replace(**s.changes), lengths, device)
        assert again.total_bytes == s.total_bytes
        assert again.total_bytes <= usable
        assert s.verdict == verdict(again.total_bytes, usable).status
        assert s.cost
        if "batch_size" in s.changes:  # same effective batch
            assert s.changes["batch_size"] * s.changes["grad_accum"] == config.effective_batch_size
    scores = [s.score for s in suggestions]
    assert scores == sorted(scores)
    for i, later in enumerate(suggestions):  # none costs as much as an earlier one and saves no more memory
        assert all(earlier.total_bytes > later.total_bytes for earlier in suggestions[:i]), [
            (s.total_bytes, s.score) for s in suggestions]


def test_no_suggestion_is_worse_than_an_earlier_one():
    """The new-user pass: E2B without quantization on an NVIDIA 8 GB offered, after two changes that
    fit, a tight four-change one (more to change, less memory saved)."""
    data = memory.load_model_config(E2B)
    config = TrainConfig(model=E2B, device="cuda", quantization="none")
    usable = memory.usable_budget("cuda", 8 * GIB, 8 * GIB)[0]
    suggestions = memory.suggest_fits(data, config, LengthStats(512, 30.0), "cuda", usable, limit=4)
    assert suggestions and all(s.verdict == "fits" for s in suggestions), [s.cost for s in suggestions]
    assert {s.changes.get("quantization") for s in suggestions} == {"8bit", "4bit"}  # quality or memory: both kept


def test_single_tight_change_is_offered_issue4_case(tmp_path):
    """Issue 4: E2B, no quantization, on a machine where 4-bit alone brings the estimate under the
    usable budget but only just (tight): the search required `fits` and offered nothing. It must be
    offered, labelled tight, and something that fits comfortably must be offered too."""
    result = memory.estimate_for_workspace(tmp_path, TrainConfig(model=E2B, device="cpu", quantization="none"),
                                           memory_gb=14.5)
    assert result["usable_bytes"] == 12.5 * GIB and result["verdict"] == "does not fit"
    by_change = {tuple(sorted(s["changes"].items())): s for s in result["suggestions"]}
    four_bit = by_change.get((("quantization", "4bit"),))
    assert four_bit is not None, result["suggestions"]
    alone = estimate_memory(memory.load_model_config(E2B), TrainConfig(model=E2B, device="cpu", quantization="4bit"),
                            LengthStats(512, 30.0), "cpu", EstimateOptions(**result["options"]))
    assert four_bit["total_bytes"] == alone.total_bytes <= result["usable_bytes"]
    assert four_bit["verdict"] == verdict(alone.total_bytes, result["usable_bytes"]).status == "tight"
    # the verdict says "tight"; the cost is the change's own, once (issue 10: no extra "tight" cost)
    assert [step["changes"] for step in four_bit["steps"]] == [{"quantization": "4bit"}]
    assert four_bit["cost"] == f"{four_bit['steps'][0]['what']}: {four_bit['steps'][0]['cost']}"
    assert any(s["verdict"] == "fits" for s in result["suggestions"])
    for s in result["suggestions"]:
        assert s["total_bytes"] <= result["usable_bytes"]
        assert (s["verdict"] == "fits") == (s["total_bytes"] <= memory.FIT_FRACTION * result["usable_bytes"])


def test_tight_run_is_offered_only_changes_that_fit():
    data = memory.load_model_config(E2B)
    config = TrainConfig(model=E2B, device="cpu", quantization="4bit")
    lengths = LengthStats(512, 30.0)
    total = estimate_memory(data, config, lengths, "cpu").total_bytes
    usable = int(total / 0.95)  # the run itself is tight
    assert verdict(total, usable).status == "tight"
    for s in memory.suggest_fits(data, config, lengths, "cpu", usable, accept_tight=False, limit=10):
        assert s.verdict == "fits" and s.total_bytes <= memory.FIT_FRACTION * usable


def test_ple_on_cpu_offered_on_cuda_only_and_counts_the_load():
    data = memory.load_model_config(E2B)
    config = TrainConfig(model=E2B, device="cuda", quantization="none", gradient_checkpointing=False, max_length=1024)
    lengths = LengthStats(1024, 30.0, [500, 1024])
    usable = memory.usable_budget("cuda", 12 * GIB, 12 * GIB)[0]
    offered = memory.suggest_fits(data, config, lengths, "cuda", usable, limit=10)
    assert any(s.changes.get("ple_on_cpu") for s in offered)
    for s in offered:
        assert s.total_bytes <= (memory.FIT_FRACTION if s.verdict == "fits" else 1.0) * usable
    on_cpu = memory.suggest_fits(data, config.replace(device="cpu"), lengths, "cpu", usable, limit=10)
    assert all("ple_on_cpu" not in s.changes for s in on_cpu)
    # the table (262,144 x 30 x 256 bf16 = 3.75 GiB) is placed in host RAM while loading: it never
    # reaches the GPU, in the load phase or after it (issue 10)
    base = estimate_memory(data, config, lengths, "cuda")
    ple = estimate_memory(data, config.replace(ple_on_cpu=True), lengths, "cuda")
    table = 262_144 * 30 * 256 * 2
    assert base.components["weights_per_layer_embedding"] == table and ple.components["weights_per_layer_embedding"] == 0
    assert ple.components["load_transient"] == base.components["load_transient"] == 0  # bf16: nothing to quantize
    weights = sum(v for k, v in ple.components.items() if k.startswith("weights_"))
    assert ple.phases["load"] == weights
    assert ple.total_bytes == max(ple.phases.values()) + ple.components["runtime_overhead"]
    assert base.total_bytes - ple.total_bytes == table


def test_no_suggestion_when_nothing_fits():
    data = memory.load_model_config(E2B)
    config = TrainConfig(model=E2B, device="cpu")
    assert memory.suggest_fits(data, config, LengthStats(512, 30.0), "cpu", 1 * GIB) == []


def test_lengths_from_build_report(tmp_path):
    (tmp_path / "dataset").mkdir()
    report = {"length_stats": {"max": 700, "row_tokens": [250, 300, 650], "max_clip_s": 12.5}}
    (tmp_path / "dataset" / "build_report.json").write_text(json.dumps(report))
    stats = memory.length_stats_from_workspace(tmp_path, 512)
    assert (stats.longest_tokens, stats.longest_clip_s, stats.row_tokens) == (650, 12.5, [250, 300, 650])
    empty = memory.length_stats_from_workspace(tmp_path / "none", 512)
    assert empty.longest_tokens == 512 and empty.longest_clip_s == 30.0 and "no dataset" in empty.source


def test_cli_json_keys(tmp_path, capsys):
    code = memory.estimate_main(["--workspace", str(tmp_path), "--model", E2B, "--device", "cpu", "--memory-gb", "16",
                        "--quantization", "none", "--no-gradient-checkpointing", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("components", "total_bytes", "usable_bytes", "verdict", "suggestions"):
        assert key in out
    assert out["verdict"] == "does not fit"
    assert out["total_bytes"] == estimate_memory(
        memory.load_model_config(E2B), TrainConfig(model=E2B, device="cpu", quantization="none",
                                                   gradient_checkpointing=False),
        LengthStats(512, 30.0), "cpu").total_bytes
    assert out["suggestions"] and all({"changes", "total_bytes", "cost"} <= set(s) for s in out["suggestions"])
    assert all(s["total_bytes"] <= out["usable_bytes"] for s in out["suggestions"])
    assert out["device_memory"]["total_bytes"] == 16 * GIB  # --memory-gb is GiB
    config = TrainConfig(model=E2B, device="cpu", quantization="none", gradient_checkpointing=False)
    assert out == json.loads(json.dumps(memory.estimate_for_workspace(tmp_path, config, memory_gb=16)))


def test_cli_human_summary(tmp_path, capsys):
    assert memory.estimate_main(["--workspace", str(tmp_path), "--model", E2B, "--device", "cuda", "--memory-gb", "80"]) == 0
    text = capsys.readouterr().out
    assert "Verdict: fits" in text and "logits_loss" in text and "usable" in text


def test_cli_dispatch_reports_bad_model(tmp_path, capsys):
    from pipeline.__main__ import main as dispatch

    assert dispatch(["estimate", "--workspace", str(tmp_path), "--model", str(tmp_path / "missing"), "--json"]) == 1
    assert "config.json" in capsys.readouterr().out


@pytest.mark.slow
def test_measure_peak_runs_one_real_step_on_the_tiny_model(tiny_model_dir):
    """The probe (child process, training code's loading/LoRA/Trainer step) against the estimate."""
    config = TrainConfig(model=str(tiny_model_dir), device="cpu", quantization="none", lora_rank=8, lora_alpha=16,
                         batch_size=1, max_length=512, gradient_checkpointing=True)
    lengths = LengthStats(512, 5.0)
    measured = memory.measure_peak(str(tiny_model_dir), config, lengths, "cpu", EstimateOptions())
    assert measured["mode"].startswith("synthetic") and measured["method"].startswith("CPU peak RSS")
    assert measured["answer_tokens"] == memory.DEFAULT_ANSWER_TOKENS  # supervised span sent to the probe
    assert measured["peak_bytes"] >= measured["baseline_rss_bytes"] > 100 * memory.MIB
    assert measured["trainable_params"] == memory.lora_params(model_shape(memory.load_model_config(str(tiny_model_dir))), config)
    est = estimate_memory(memory.load_model_config(str(tiny_model_dir)), config, lengths, "cpu")
    assert abs(est.total_bytes - measured["peak_bytes"]) < 0.15 * measured["peak_bytes"]


def test_synthetic_probe_batch_supervises_the_answer_span_only(tiny_model_dir):
    """The probe's worst-case batch is labelled as the collator labels a row: only the last
    `answer_tokens` positions, so answer_loss computes logits at exactly that many positions."""
    import torch
    from transformers import AutoConfig

    from pipeline.model.tokens import IGNORE_INDEX
    from pipeline.training.probe import DEFAULT_PROBE_ANSWER_TOKENS, synthetic_batch

    model_config = AutoConfig.from_pretrained(tiny_model_dir)
    batch = synthetic_batch(model_config, 2, 300, 5.0, answer_tokens=40)
    labels = batch["labels"]
    assert labels.shape == (2, 300)
    assert ((labels != IGNORE_INDEX).sum(dim=1) == 40).all()
    assert (labels[:, -40:] == batch["input_ids"][:, -40:]).all() and (labels[:, :-40] == IGNORE_INDEX).all()
    keep = torch.zeros_like(labels, dtype=torch.bool)  # as pipeline.training.train.answer_loss builds logits_to_keep
    keep[:, :-1] = labels[:, 1:] != IGNORE_INDEX
    assert int(keep.sum()) == 2 * 40
    assert (synthetic_batch(model_config, 1, 100, 0.0)["labels"] != IGNORE_INDEX).sum() == DEFAULT_PROBE_ANSWER_TOKENS


def test_estimate_refuses_what_cannot_run_and_says_what_it_assumed(tmp_path):
    for bad in (float("nan"), float("inf"), -1.0, 1e6):
        with pytest.raises(ConfigError, match="memory-gb"):
            memory.device_memory("cpu", bad)
    report = tmp_path / "dataset" / "build_report.json"
    report.parent.mkdir()
    report.write_text(json.dumps({"model": "some/other-model", "length_stats": {
        "max": 400, "row_tokens": [300, 400], "answer_tokens": [50, 80], "max_clip_s": 4.0}}))
    with pytest.raises(ConfigError, match="excludes every row.*at least 300"):
        memory.estimate_for_workspace(tmp_path, TrainConfig(model=E2B, device="cpu", max_length=256), memory_gb=64)
    result = memory.estimate_for_workspace(tmp_path, TrainConfig(model=E2B, device="cpu", max_length=350), memory_gb=64)
    assert result["excluded_rows"] == 1 and result["settings"]["max_length"] == 350
    assert any("some/other-model's tokenizer" in note for note in result["notes"])
    text = memory.render(result)
    assert "1 row longer than --max-length 350 is excluded" in text and "Settings: quantization 4bit" in text
    tight = dict(result, verdict="tight", suggestions=[])
    assert "No combination" not in memory.render(tight) and "should fit" in memory.render(tight)


def test_checkpointed_runs_price_a_wider_heap_spread_and_the_preflight_counts_it():
    # uncalibrated, the run's largest micro-batch is priced at the top of what any CPU kept: with
    # checkpointing far more of the retained heap than without (pipeline.memory.cpu_heap)
    lengths = LengthStats(300, 10.0, [300, 280])
    options = EstimateOptions(cpu_heap_retention=True)
    plain = estimate_memory(SMALL, cfg(max_length=512), lengths, "cpu", options)
    checkpointed = estimate_memory(SMALL, cfg(max_length=512, gradient_checkpointing=True), lengths, "cpu", options)
    for est, spread in ((plain, 0.13), (checkpointed, 0.75)):
        retained = est.components["allocator_retention"]
        assert retained > 0 and est.components["cpu_heap_run_spread"] == int(retained * spread)
        assert "cpu_heap_run_spread" in est.run_members["preflight"]  # the preflight is a micro-batch too
        assert est.run_phases["preflight"] <= est.run_phases["step"] - est.components["optimizer_states"]
    assert memory.run_spread_fraction(cfg(gradient_checkpointing=True)) > memory.run_spread_fraction(cfg())


@pytest.mark.skipif(not heap_can_follow_live_tensors(), reason="the low-memory heap needs glibc's mallopt")
def test_the_low_memory_heap_counts_no_retained_heap_and_is_offered_when_a_cpu_run_does_not_fit():
    lengths = LengthStats(300, 10.0, [300, 280])
    options = EstimateOptions(cpu_heap_retention=True)
    config = cfg(max_length=512, gradient_checkpointing=True)
    default = estimate_memory(SMALL, config, lengths, "cpu", options)
    low = estimate_memory(SMALL, config.replace(low_memory_heap=True), lengths, "cpu", options)
    retained = default.components["allocator_retention"]
    assert retained > 0 and low.components["allocator_retention"] == low.components["cpu_heap_run_spread"] == 0
    assert low.total_bytes == default.total_bytes - retained - default.components["cpu_heap_run_spread"]
    assert any("low-memory mode" in note and "twice as long" in note for note in low.notes)
    on_gpu = estimate_memory(SMALL, config.replace(low_memory_heap=True), lengths, "cuda", options)
    assert on_gpu.total_bytes == estimate_memory(SMALL, config, lengths, "cuda", options).total_bytes
    assert any("applies to training on a CPU only" in note for note in on_gpu.notes)
    # a budget only the low-memory heap meets among cheap moves: it is offered, with what it costs
    usable = (low.total_bytes + default.total_bytes) // 2
    found = memory.suggest_fits(SMALL, config, lengths, "cpu", usable, options, limit=10)
    alone = [s for s in found if s.changes == {"low_memory_heap": True}]
    assert alone and alone[0].total_bytes == low.total_bytes, [s.changes for s in found]
    assert "twice as long" in alone[0].steps[0]["cost"]
    assert not any("low_memory_heap" in s.changes for s in memory.suggest_fits(
        SMALL, config, lengths, "cuda", usable, options, limit=10))
    assert not any("low_memory_heap" in s.changes for s in memory.suggest_fits(
        SMALL, config, lengths, "cpu", usable, EstimateOptions(cpu_heap_retention=False), limit=10))
