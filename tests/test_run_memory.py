"""Memory of the whole run: per-phase peaks measured by the trainer, the estimate of every phase, the
worst-case batch (longest row, answer and clip together) and gradient checkpointing of the audio encoder."""

from __future__ import annotations


import numpy as np
import pytest

from pipeline import memory
from pipeline.calibration.store import device_defaults
from pipeline.config import TrainConfig
from pipeline.memory import GIB, MIB, LengthStats, estimate_memory
from pipeline.memory.run_compare import compare, comparison_text
from pipeline.memory.run_phases import RUN_PHASES
from pipeline.host.allocator import training_allocator
from tests.test_memory import SMALL, cfg

@pytest.fixture(autouse=True)
def _bf16_terms(request, monkeypatch):
    """The hand-computed terms here are written for bf16 (c = 2 bytes), whatever this machine computes
    in (`pipeline.calibration.precision`); tests that load the tiny model run what this machine picks."""
    if "tiny_model_dir" not in request.fixturenames:
        monkeypatch.setenv("TUTOR_COMPUTE_DTYPE", "bfloat16")


# --------------------------------------------------------------------------------------------------
# Measured: PhaseMemory


def test_each_phase_gets_its_own_peak_and_the_run_peak_names_its_phase():
    from pipeline.training.peak_memory import RUN_PHASES as TRAINER_PHASES
    from pipeline.training.peak_memory import PhaseMemory, rss_bytes

    assert TRAINER_PHASES == RUN_PHASES  # the trainer records what the estimate predicts, by name
    recorder = PhaseMemory("cpu")
    recorder.enter("load")
    start = rss_bytes()
    recorder.enter("step")
    big = np.ones(64 * MIB // 8)  # 64 MiB touched, then freed before the next phase
    del big
    with recorder.during("eval"):
        small = np.ones(8 * MIB // 8)
        del small
    recorder.enter("save")
    out = recorder.to_dict()
    assert list(out["phase_peak_bytes"]) == ["load", "step", "eval", "save"]
    peaks = out["phase_peak_bytes"]
    assert peaks["step"] >= start + 60 * MIB
    if out["method"].startswith("CPU resident set high-water mark"):  # VmHWM reset per phase (Linux)
        assert peaks["eval"] < peaks["step"] - 40 * MIB and peaks["save"] < peaks["step"] - 40 * MIB
        assert all(out["exact"].values())
    assert out["peak_phase"] == "step" and out["peak_bytes"] == peaks["step"]
    assert out["memory_kind"] == "cpu_max_rss"


def test_unknown_phase_is_refused():
    from pipeline.training.peak_memory import PhaseMemory

    with pytest.raises(ValueError, match="unknown run phase"):
        PhaseMemory("cpu").enter("warmup")


# --------------------------------------------------------------------------------------------------
# Estimated: the phases of the run


def test_the_estimate_covers_every_phase_and_its_total_is_the_largest():
    lengths = LengthStats(300, 10.0, [300, 280])
    est = estimate_memory(SMALL, cfg(eval_steps=10, max_length=512), lengths, "cpu")
    assert list(est.run_phases) == list(RUN_PHASES)
    assert est.total_bytes == max(est.run_phases.values()) == est.run_phases[est.run_peak_phase]
    runtime = est.components["runtime_overhead"]
    step_moments = ("audio", "loss", "layer_backward", "optimizer", "audio_backward")
    assert est.step_bytes == max(est.phases[m] for m in step_moments) + runtime  # one step, as --measure runs it
    # the run's steps meet two row lengths and two clips: oneDNN caches kernels for each new shape on CPU
    sizes = device_defaults()
    assert est.components["cpu_kernel_cache"] == sizes.cpu_kernel_cache_bytes_per_row_length + \
        sizes.cpu_kernel_cache_bytes_per_clip_length
    # and the run's largest micro-batch retains more heap than the median one that --measure's step prices
    assert est.components["cpu_heap_run_spread"] == int(est.components["allocator_retention"] * memory.run_spread_fraction(cfg(eval_steps=10, max_length=512)))
    assert est.run_phases["step"] == est.step_bytes + est.components["cpu_kernel_cache"] + est.components["cpu_heap_run_spread"]
    assert est.run_phases["load"] <= est.phases["load"] + runtime  # on CPU mapped weights are read after loading
    on_gpu = estimate_memory(SMALL, cfg(eval_steps=10, max_length=512), lengths, "cuda")
    assert on_gpu.run_phases["load"] == on_gpu.phases["load"] + on_gpu.components["runtime_overhead"]
    assert on_gpu.components["cpu_kernel_cache"] == on_gpu.components["cpu_heap_run_spread"] == 0
    # the preflight runs before the optimizer exists
    assert est.run_phases["preflight"] <= est.run_phases["step"] - est.components["optimizer_states"]
    # each phase's members add up to its bytes
    every = est.components
    for phase, names in est.run_members.items():
        assert sum(every[n] for n in names) == est.run_phases[phase], phase
    # the checkpoint: the adapter copied into host bytes on top of what is alive; the phase starts from
    # a handed-back heap (pipeline.host.free_heap), so no retained heap is counted
    static = sum(v for k, v in every.items() if k.startswith(memory.STATIC_PREFIXES))
    assert est.run_phases["save"] == static + every["lora_params"] + every["cpu_kernel_cache"] + runtime
    assert "allocator_retention" not in est.run_members["save"]


def test_evaluation_is_estimated_on_the_eval_splits_worst_case():
    train_only = LengthStats(300, 2.0, [300], answer_tokens=[40], longest_answer_tokens=40)
    longer_eval = LengthStats(300, 2.0, [300], answer_tokens=[40], longest_answer_tokens=40,
                              eval_row_tokens=[200, 2000], eval_answer_tokens=[30, 1500], eval_longest_clip_s=30.0)
    config = cfg(eval_steps=10, max_length=4096)
    base = estimate_memory(SMALL, config, train_only, "cpu")
    longer = estimate_memory(SMALL, config, longer_eval, "cpu")
    assert longer.run_phases["eval"] > base.run_phases["eval"]
    assert longer.components["eval_logits"] == 100 * (2 + 8) * 1 * 1500  # V x (c + 8) x batch x answer
    # a longer eval row can set the run's peak, and the estimate says so
    assert longer.run_peak_phase == "eval" and longer.total_bytes == longer.run_phases["eval"]
    # rows over max_length are excluded from evaluation as from training
    cut = estimate_memory(SMALL, cfg(eval_steps=10, max_length=512), longer_eval, "cpu")
    assert cut.components["eval_logits"] == 100 * 10 * 30
    # no evaluation, no eval phase
    assert estimate_memory(SMALL, cfg(eval_steps=0), longer_eval, "cpu").run_phases["eval"] == 0


def test_audio_lora_with_checkpointing_keeps_only_block_inputs():
    shape = memory.model_shape(memory.load_model_config("google/gemma-3n-E2B-it"))
    lengths = LengthStats(512, 30.0)
    kept = estimate_memory(memory.load_model_config("google/gemma-3n-E2B-it"),
                           TrainConfig(lora_targets="language+audio", gradient_checkpointing=False), lengths, "cuda")
    ckpt = estimate_memory(memory.load_model_config("google/gemma-3n-E2B-it"),
                           TrainConfig(lora_targets="language+audio", gradient_checkpointing=True), lengths, "cuda")
    frames = 750  # 30 s x 100 frames / 4
    assert ckpt.components["audio_encoder_saved"] == shape.audio_layers * frames * shape.audio_hidden * 2
    assert ckpt.components["audio_encoder_recompute"] * shape.audio_layers == kept.components["audio_encoder_saved"]
    assert kept.components["audio_encoder_saved"] > 2 * GIB > 10 * ckpt.components["audio_encoder_saved"]


# --------------------------------------------------------------------------------------------------
# Like with like


def test_comparison_puts_whole_run_against_whole_run_and_step_against_step():
    measured = {"phase_peak_bytes": {"load": 900 * MIB, "preflight": 950 * MIB, "step": 1000 * MIB, "eval": 990 * MIB},
                "peak_phase": "step", "peak_bytes": 1000 * MIB, "method": "CPU resident set high-water mark"}
    estimate = {"total_bytes": 1100 * MIB, "run_peak_phase": "eval", "step_bytes": 1050 * MIB,
                "run_phases": {"load": 900 * MIB, "step": 1050 * MIB, "eval": 1100 * MIB}}
    result = compare(measured, estimate)
    assert result["percent"] == pytest.approx(100 * 1000 / 1100, abs=0.1)
    assert result["step_percent"] == pytest.approx(100 * 1000 / 1050, abs=0.1)
    text = comparison_text(result)
    assert "set by step" in text and "peak in eval" in text and "1.07 GiB" in text and "9 % less" in text
    assert ("The training steps (the largest of the run): 0.98 GiB against 1.03 GiB estimated for them when the run "
            "started (5 % less)") in text


def test_a_measured_figure_against_its_estimate_never_reads_as_a_contradiction():
    """The new-user pass: "1.02 GiB against 1.02 GiB estimated (101 %)": two equal figures beside a ratio that
    says they differ. The words now agree with the figures shown (`pipeline.units.gib_difference`), on the
    Train tab's panel and in the run's printed summary alike."""
    from pipeline.units import gib_difference
    from ui.train_view import train_memory_markdown

    assert gib_difference(1.0190 * GIB, 1.0151 * GIB) == "the same to 0.01 GiB"
    assert gib_difference(1.02 * GIB, 1.00 * GIB) == "2 % more"
    assert gib_difference(10.04 * GIB, 10.0 * GIB) == "0.4 % more"
    assert gib_difference(0.98 * GIB, 1.03 * GIB) == "5 % less" and gib_difference(None, GIB) == ""
    measured = {"phase_peak_bytes": {"step": int(1.0190 * GIB)}, "peak_phase": "step", "peak_bytes": int(1.0190 * GIB)}
    estimate = {"total_bytes": int(1.0151 * GIB), "run_peak_phase": "step", "step_bytes": int(1.0151 * GIB),
                "run_phases": {"step": int(1.0151 * GIB)}}
    for text in (comparison_text(compare(measured, estimate)), train_memory_markdown(measured, estimate)):
        assert "1.02 GiB against 1.02 GiB estimated for them when the run started (the same to 0.01 GiB)" in text, text
        assert "100 %" not in text and "101 %" not in text and "% of" not in text, text


def test_the_runs_steps_are_compared_with_the_estimate_for_the_runs_steps_not_one_step():
    """The new-user pass: the Train tab said "One training step: 1.03 GiB against 1.06 GiB estimated", while the
    Memory tab gives 1.00 GiB for one step and 1.06 GiB for the whole run. The measured `step` phase is the
    largest of all the run's steps, so it is labelled so and set against the run's step phase; one step alone
    (the Memory tab's 1.00 GiB) is named as a different figure."""
    from ui.train_view import train_memory_markdown

    measured = {"phase_peak_bytes": {"step": int(1.03 * GIB)}, "peak_phase": "step", "peak_bytes": int(1.03 * GIB)}
    estimate = {"total_bytes": int(1.06 * GIB), "run_peak_phase": "step", "step_bytes": int(1.0 * GIB),
                "run_phases": {"step": int(1.06 * GIB)}}
    for text in (comparison_text(compare(measured, estimate)), train_memory_markdown(measured, estimate)):
        assert "One training step:" not in text, text
        assert "The training steps (the largest of the run):" in text and "1.06 GiB estimated for them" in text, text
        assert "One training step alone (the Memory tab's figure) is estimated at 1.00 GiB" in text, text


# --------------------------------------------------------------------------------------------------
# The worst-case batch


def _rows(processor):
    """Three rows whose maxima differ: `text` has the most tokens, `clip` the longest clip, `answer`
    the longest answer."""
    from datasets import Dataset

    from pipeline.conversation.messages import build_messages
    from pipeline.model.tokens import TokenCounter
    from pipeline.data.audio import wav_bytes

    def clip(seconds):
        t = np.arange(int(16000 * seconds)) / 16000
        return wav_bytes((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))

    rows = [
        {"id": "text", "target_text": "We call it bear " * 30, "feedback": "Scores (0-10): accuracy 6", "seconds": 1.0},
        {"id": "clip", "target_text": "Bear", "feedback": "Scores (0-10): accuracy 7", "seconds": 4.0},
        {"id": "answer", "target_text": "Bear", "feedback": "Advice: say the vowel longer. " * 12, "seconds": 0.5},
    ]
    counter = TokenCounter(processor)
    tokens = counter.count([build_messages(r["target_text"], r["feedback"]) for r in rows])
    return Dataset.from_dict({
        "id": [r["id"] for r in rows], "target_text": [r["target_text"] for r in rows],
        "feedback": [r["feedback"] for r in rows], "audio_wav": [clip(r["seconds"]) for r in rows],
        "num_tokens": tokens, "duration_s": [r["seconds"] for r in rows],
    })


def test_the_preflight_batch_holds_the_longest_clip_when_it_is_not_the_longest_row(tiny_model_dir):
    from pipeline.training.collate import ChatCollator
    from pipeline.model.loading import load_processor
    from pipeline.training.worst_case import answer_token_counts, worst_case, worst_case_batch

    processor = load_processor(str(tiny_model_dir))
    data = _rows(processor)
    tokens = dict(zip(data["id"], data["num_tokens"]))
    answers = dict(zip(data["id"], answer_token_counts(processor, list(data))))
    assert max(tokens, key=tokens.get) == "text" and max(answers, key=answers.get) == "answer"
    case = worst_case(data, 2, processor)
    assert (case.longest_row, case.longest_clip, case.longest_answer) == ("text", "clip", "answer")
    assert case.clip_s == 4.0 and case.tokens == tokens["text"] and case.answer_tokens == answers["answer"]
    batch = worst_case_batch(ChatCollator(processor, max_length=1024), case)
    # two rows of the longest row's tokens, each with the 4 s clip (100 mel frames per second)...
    assert batch["input_ids"].shape == (2, tokens["text"])
    assert batch["input_features_mask"].sum(dim=1).tolist() == [pytest.approx(400, abs=3)] * 2
    # ...each supervising as many positions as the longest answer
    assert (batch["labels"] != -100).sum(dim=1).tolist() == [answers["answer"]] * 2
    # the longest row alone, as the preflight used to pick it, has a shorter clip and answer
    alone = ChatCollator(processor, max_length=1024)([data[0]])
    assert alone["input_features_mask"].sum() < 150 and (alone["labels"] != -100).sum() < answers["answer"]


# --------------------------------------------------------------------------------------------------
# Audio-encoder checkpointing


def test_audio_lora_blocks_are_checkpointed_with_gradient_checkpointing(tiny_model_dir):
    """With LoRA in the audio encoder and gradient checkpointing, the conformer's blocks keep only
    their inputs for backward: counted with torch's saved-tensor hooks over the encoder's forward."""
    import torch

    from pipeline.model.gemma3n import inner
    from pipeline.model.loading import attach_lora, load_model

    def saved_bytes(checkpointing: bool) -> tuple[int, torch.Tensor]:
        model, _ = load_model(str(tiny_model_dir), device="cpu", quantization="none")
        model, report = attach_lora(model, TrainConfig(model=str(tiny_model_dir), lora_targets="language+audio",
                                                       gradient_checkpointing=checkpointing, lora_dropout=0.0))
        assert report.modules_per_part["audio"] > 0
        model.train()
        tower = inner(model).audio_tower
        torch.manual_seed(0)
        mel = torch.randn(1, 800, tower.config.input_feat_size, dtype=torch.bfloat16)
        mask = torch.zeros(1, 800, dtype=torch.bool)
        total = 0

        def pack(t):
            nonlocal total
            total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = tower(mel, mask).last_hidden_state
        out.float().sum().backward()
        grads = [p.grad for n, p in model.named_parameters() if "audio_tower" in n and p.grad is not None]
        return total, torch.cat([g.flatten().float() for g in grads])

    plain_bytes, plain_grads = saved_bytes(False)
    ckpt_bytes, ckpt_grads = saved_bytes(True)
    assert ckpt_bytes < plain_bytes / 3
    assert torch.allclose(plain_grads, ckpt_grads, rtol=1e-2, atol=1e-3)  # same gradients, recomputed


# --------------------------------------------------------------------------------------------------
# The whole run, end to end


@pytest.mark.slow
def test_cli_run_on_the_sample_pack_reports_every_phase_against_its_estimate(tmp_path, tiny_model_dir):
    """A new user's run: the tiny model, the bundled sample pack, default settings, 4-bit, 6 steps with
    evaluation and a checkpoint at step 3, in its own process as the app starts it. The result records
    every phase's peak and the estimate of the same phases, and the summary names the phase that set
    each and says whether the estimate is calibrated. How close the two are is not asserted here: the
    tiny model's estimate is ~94 % what the device adds, so a tolerance would test this CPU, not the
    formulas (issue 19). The formulas are tested where they dominate
    (`test_the_model_terms_match_a_measured_difference_between_two_settings`) and the device's terms
    by calibration (`tests/test_calibration.py::test_after_calibrating_here_a_whole_run_is_within_5_percent`)."""
    from tests.training_data import train_sample_pack_run

    result, summary = train_sample_pack_run(tmp_path / "ws", tiny_model_dir)
    measured, estimate = result["memory"], result["memory_estimate"]
    assert measured["allocator"] == training_allocator()  # the run ran on what its estimate assumed
    assert set(measured["phase_peak_bytes"]) == {"load", "preflight", "step", "eval", "save"}
    assert set(measured["phase_peak_bytes"]) <= set(estimate["run_phases"]) <= set(estimate["device_parts"]) | {"resume"}
    assert result["peak_memory_bytes"] == measured["peak_bytes"] == max(measured["phase_peak_bytes"].values())
    assert estimate["calibration"] is None and estimate["calibration_text"].startswith("not calibrated")
    assert f"set by {measured['peak_phase']}" in summary and f"peak in {estimate['run_peak_phase']}" in summary
    assert "The training steps (the largest of the run):" in summary and "not calibrated: the device's share is assumed" in summary


@pytest.mark.slow
def test_the_model_terms_match_a_measured_difference_between_two_settings(tiny_model_dir, monkeypatch, glibc_heap):
    """The model-dependent terms where they dominate: the tiny model without gradient checkpointing at
    512 and 2,048 tokens (eager attention's (heads, seq, seq) probabilities and every layer's saved
    tensors grow by ~0.45 GiB), measured by the probe on glibc's malloc with its mmap threshold fixed,
    so that RSS follows live tensors (`EstimateOptions.cpu_heap_retention` False). `glibc_heap`: on a
    host with TCMalloc the probe would run on it, whose page heap keeps what the first step freed (the
    threshold does not apply there): measured 2026-12-07 on an AMX Xeon with TCMalloc in bf16, 412 MiB
    (the first step's 410 MiB kept) where glibc gives 292 and the estimate 308. The difference of the two
    measured peaks cancels what the device adds (runtime, libraries); the estimate's difference must
    be within 15 % of it, in whichever precision this machine computes. Measured 2026-12-01 on an AVX2
    CPU in fp32: 269 MiB; the estimate said 422 MiB (+57 %) while it priced eager attention's fp32
    softmax with a second copy that fp32 does not make, 302 MiB (+12 %) since (`eager_prob_bytes`;
    the rest is tensors the fp32 forward shares that the bf16-checked layer formula counts apart); on the
    AMX Xeon in bf16, 292 MiB (estimate +5 %), in fp32 268 MiB (+13 %)."""
    from pipeline.memory.inputs import EstimateOptions
    from pipeline.memory.measure import measure_peak

    model = str(tiny_model_dir)
    config = TrainConfig(model=model, device="cpu", quantization="none", gradient_checkpointing=False, max_length=4096,
                         lora_dropout=0.0)
    options = EstimateOptions(cpu_heap_retention=False)
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")  # the probe's child inherits it
    peaks, estimates = {}, {}
    for seq in (512, 2048):
        lengths = LengthStats(seq, 0.0, longest_answer_tokens=64)
        peaks[seq] = measure_peak(model, config, lengths, "cpu", options)["peak_bytes"]
        estimates[seq] = estimate_memory(memory.load_model_config(model), config, lengths, "cpu", options).step_bytes
    measured, estimated = peaks[2048] - peaks[512], estimates[2048] - estimates[512]
    assert estimated > 300 * MIB  # the model's terms, not the device's, make this difference
    assert abs(estimated - measured) <= 0.15 * measured, (peaks, estimates)
