"""Measured peak memory of one real training step (the torch side of `pipeline.memory`).

Run as a child process by `pipeline.memory.measure.measure_peak` and by `benchmarks/memory_accuracy.py`:
`python -m pipeline.training.probe '<request JSON>'` prints one JSON line, and announces its phases on
stderr as it goes (`pipeline.jobs.say_phase`: `load`, `batch` (the first step on the longest batch),
`step` (the measured step), `shapes` (batches of new shapes)), which the Memory tab shows. A fresh process per
measurement keeps one configuration's allocator state and peak out of the next.

Two modes, both with the training code's own loading, quantization, LoRA, Trainer optimizer and
`training_step` (pipeline.model.loading / pipeline.training.train):
  * `workspace` given and a dataset built: `pipeline.training.train.run_probe_step` on the dataset's
    longest rows (the real worst-case batch, real processor);
  * otherwise: a synthetic worst-case micro-batch of `batch_size` rows of `seq_len` tokens with one
    `clip_s` clip each (the chat layout: audio soft tokens, then text; the last `answer_tokens`
    supervised, default `DEFAULT_PROBE_ANSWER_TOKENS`, as the collator labels an answer), with the
    training code's `AnswerLossTrainer` (logits only where the next token is supervised), run twice so the second step is the steady state (optimizer states exist and the previous
    micro-batch's LoRA gradients are alive, as under gradient accumulation); the peak is taken over
    the second step only.

The child is a training process in all but the run folder: it imports what the trainer imports
(datasets included), loads the model's processor when the model folder has one, and loads the
weights with the trainer's `load_model` (on CPU: views into the memory-mapped checkpoint, its pages
read while quantizing released afterwards, `pipeline.model.loading.release_checkpoint_pages`).
Synthetic rows draw their text tokens from `PROBE_VOCAB` ids spread over the vocabulary, about as
many distinct tokens as a real dataset has (only those rows of the per-layer embedding table are read).

Counters (`pipeline.training.peak_memory`): CPU: the process's resident-set high-water mark (VmHWM
from /proc/self/status, reset by writing 5 to /proc/self/clear_refs right before the measured step,
after handing the C heap's free memory back as the trainer does before every micro-batch,
`pipeline.host.free_heap`;
`ru_maxrss` where that is not available); CUDA: `max_memory_allocated` and `max_memory_reserved`;
MPS: `driver_allocated_memory`. `baseline_rss_bytes` is the RSS after importing
torch/transformers/peft/bitsandbytes/datasets, before the model exists.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from pipeline.host.process_check import process_started_at
from pipeline.jobs import say_phase

DEFAULT_PROBE_ANSWER_TOKENS = 64
"""Supervised tokens per synthetic row when the request gives none: a typical tutor answer of
`pipeline.conversation.feedback`'s three-line template (~40-80 tokens with `<end_of_turn>`)."""


PROBE_VOCAB = 1024
"""Distinct text tokens of a synthetic row set (a dataset of a few hundred tutor answers has about this many)."""


def rss_bytes() -> int:
    from pipeline.training.peak_memory import rss_bytes as current  # noqa: PLC0415 - torch is imported by now

    return current()


def _reset(device: str) -> None:
    import torch

    from pipeline.training.peak_memory import reset_peak_memory  # noqa: PLC0415

    if device == "cuda":
        torch.cuda.synchronize()
    reset_peak_memory(device)  # on CPU after handing the free heap back, as the trainer's micro-batches start


def _peaks(device: str) -> dict:
    import torch

    from pipeline.training.peak_memory import rss_peak_bytes  # noqa: PLC0415

    out = {"peak_rss_bytes": rss_peak_bytes()}
    if device == "cuda":
        torch.cuda.synchronize()
        out["max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
        out["max_memory_reserved"] = int(torch.cuda.max_memory_reserved())
        out["peak_bytes"] = out["max_memory_reserved"]
        out["method"] = "CUDA max_memory_reserved (allocated shown too)"
    elif device == "mps":
        out["driver_allocated_memory"] = int(torch.mps.driver_allocated_memory())
        out["peak_bytes"] = out["driver_allocated_memory"]
        out["method"] = "MPS driver_allocated_memory after the step"
    else:
        out["peak_bytes"] = out["peak_rss_bytes"]
        out["method"] = "CPU peak RSS (VmHWM reset before the step)"
    return out


def synthetic_batch(model_config, batch_size: int, seq_len: int, clip_s: float, seed: int = 0,
                    answer_tokens: int = DEFAULT_PROBE_ANSWER_TOKENS, clips_per_row: int = 1) -> dict:
    """A worst-case micro-batch shaped like `pipeline.training.collate.ChatCollator`'s output.

    input_ids (B, T) int64: `<bos>`, text, the audio start token, the clip's audio soft tokens (Gemma
    3n: always 188; Gemma 4: by the clip's length, `ModelFamily.audio_tokens`), the audio end token, text; `labels` (B, T) are -100 except the last `answer_tokens` positions of
    each row (the answer and its `<end_of_turn>`, as `pipeline.training.collate.build_labels` supervises;
    clamped to 1..seq_len-1 so position 0 is never a target); input_features
    (B x clips_per_row, F, 128) float32 with F = 100 x clip_s frames (Gemma 4: its valid mel frames,
    `pipeline.model.gemma4.mel_frames`, which the encoder turns into exactly that many tokens), input_features_mask
    (B x clips_per_row, F) bool, each row holding `clips_per_row` audio spans one after the other (a
    tutoring dialogue's clips); without a clip (clip_s = 0) a text-only batch. Text ids come from
    `PROBE_VOCAB` ids spread evenly over the text vocabulary.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    text = model_config.text_config
    vocab_text = int(text.vocab_size_per_layer_input)
    spread = torch.linspace(8, vocab_text - 2, min(PROBE_VOCAB, vocab_text - 9)).long()  # `PROBE_VOCAB` distinct ids
    ids = spread[torch.randint(0, spread.numel(), (batch_size, seq_len), generator=g)]
    ids[:, 0] = int(text.bos_token_id if isinstance(text.bos_token_id, int) else 2)
    batch: dict = {}
    if clip_s > 0:
        from pipeline.model.catalog import family_of
        from pipeline.model.gemma4 import mel_frames

        family = family_of({"model_type": getattr(model_config, "model_type", None)})
        clip_s = min(clip_s, family.max_audio_s)
        n_audio = int(getattr(model_config, "audio_soft_tokens_per_image", 0) or family.audio_tokens(clip_s))
        eoa = getattr(model_config, "eoa_token_id", None) or getattr(model_config, "eoa_token_index")
        clips = max(1, int(clips_per_row))
        for k in range(clips):
            start = 8 + k * (n_audio + 4)
            ids[:, start] = int(model_config.boa_token_id)
            ids[:, start + 1 : start + 1 + n_audio] = int(model_config.audio_token_id)
            ids[:, start + 1 + n_audio] = int(eoa)
        frames = max(1, mel_frames(clip_s) if family.name == "gemma4" else int(round(clip_s * 100)))
        feat = int(getattr(model_config.audio_config, "input_feat_size", 128))
        batch["input_features"] = torch.randn(batch_size * clips, frames, feat, generator=g)
        batch["input_features_mask"] = torch.ones(batch_size * clips, frames, dtype=torch.bool)
    labels = torch.full_like(ids, -100)
    answer = max(1, min(int(answer_tokens), seq_len - 1))
    labels[:, -answer:] = ids[:, -answer:]
    batch.update(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels)
    return batch


def random_model(config_path: str, device: str, quantization: str):
    """A random-weight Gemma 3n or Gemma 4 built from a config.json on `device` in the training dtype, with
    the training's attention (`training_attention`), as `pipeline.model.loading.load_model` would load it
    (bf16 only: quantizing needs a checkpoint). For the full-size benchmark row, which has no checkpoint on disk."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    from pipeline.model.loading import compute_dtype, training_attention, weight_bytes

    if quantization != "none":
        raise ValueError("random_init supports --quantization none only (quantization needs a saved checkpoint)")
    path = Path(config_path)
    data = json.loads((path / "config.json" if path.is_dir() else path).read_text(encoding="utf-8"))
    # The Auto classes resolve `model_type` ("gemma3n", "gemma4") to the same config and model classes that
    # `load_model` uses (only pipeline.model.loading names them).
    cfg = AutoConfig.for_model(data["model_type"], **{k: v for k, v in data.items() if k != "model_type"})
    dtype = compute_dtype(device)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(cfg, dtype=dtype, attn_implementation=training_attention(type(cfg)))
    model.eval()
    return model, weight_bytes(model)


def probe_synthetic(request: dict) -> dict:
    """Two steps on a synthetic worst-case batch with the training code's settings (see module doc)."""
    import tempfile

    import torch

    from pipeline.config import TrainConfig
    from pipeline.model.loading import attach_lora, load_model
    from pipeline.training.session import training_arguments
    from pipeline.training.trainer_setup import answer_loss_trainer_class as _answer_loss_trainer_class

    config = TrainConfig.from_dict(request["config"])
    device = request["device"]
    out: dict = {"baseline_rss_bytes": rss_bytes()}
    say_phase("load")
    started = time.perf_counter()
    if request.get("random_init"):
        model, weight_bytes = random_model(request["model"], device, config.quantization)
    else:
        from pipeline.model.loading import load_processor  # noqa: PLC0415

        processor = load_processor(request["model"])  # noqa: F841 - held, as the trainer holds it
        model, qreport = load_model(request["model"], device=device, **config.load_options())
        weight_bytes = qreport.weight_bytes
    model, lreport = attach_lora(model, config)
    out["load_seconds"] = round(time.perf_counter() - started, 1)
    out["after_load_rss_bytes"] = rss_bytes()
    if device == "cuda":  # the load phase's own peak (benchmarks/gpu_memory.py compares it with the estimate's)
        out["load_max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
        out["load_max_memory_reserved"] = int(torch.cuda.max_memory_reserved())
    out["weight_bytes"] = int(weight_bytes)
    out["trainable_params"] = int(lreport.trainable_params)
    answer = int(request.get("answer_tokens") or DEFAULT_PROBE_ANSWER_TOKENS)
    batch = synthetic_batch(model.config, config.batch_size, int(request["seq_len"]), float(request["clip_s"]),
                            answer_tokens=answer, clips_per_row=int(request.get("clips_per_row") or 1))
    out["answer_tokens"] = int((batch["labels"][0] != -100).sum())
    out["distinct_tokens"] = int(batch["input_ids"].unique().numel())
    batch = {k: v.to(device) for k, v in batch.items()}
    with tempfile.TemporaryDirectory(prefix="memprobe-") as tmp:
        args = training_arguments(config, Path(tmp), device, has_eval=False)
        trainer = _answer_loss_trainer_class()(model=model, args=args)  # the training code's loss
        trainer.create_optimizer_and_scheduler(num_training_steps=2)
        # Set by Trainer's training loop before each accumulation window (transformers 5.x).
        trainer.current_gradient_accumulation_steps = config.grad_accum
        model.train()
        say_phase("batch")  # the first step on the longest batch: one-time work (kernels, allocator) included
        started = time.perf_counter()
        trainer.training_step(model, dict(batch))
        trainer.optimizer.step()  # optimizer states now exist; gradients kept (accumulation)
        out["first_step_seconds"] = round(time.perf_counter() - started, 2)
        out["startup_seconds"] = round(time.time() - process_started_at(), 1)
        out["before_step_rss_bytes"] = rss_bytes()
        if device == "cuda":  # loading + the first step (the counters run from the process start)
            out["first_step_max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
            out["first_step_max_memory_reserved"] = int(torch.cuda.max_memory_reserved())
        say_phase("step")
        _reset(device)
        started = time.perf_counter()
        loss = trainer.training_step(model, dict(batch))
        trainer.optimizer.step()
        out.update(_peaks(device))
        trainer.optimizer.zero_grad(set_to_none=True)
        out["step_seconds"] = round(time.perf_counter() - started, 2)  # the steady state, as a run's steps
        out["loss"] = float(loss.item())
        if int(request.get("new_shapes") or 0) > 0 and device == "cpu":
            say_phase("shapes")
            out.update(kernel_cache_growth(trainer, model, config, request, answer, int(request["new_shapes"])))
    out["mode"] = "synthetic worst-case batch, steady-state second step"
    return out


NEW_SHAPE_TOKEN_STEP = 16
"""Each new shape of `kernel_cache_growth` is this many tokens shorter (and 0.2 s of audio shorter) than the last."""


def kernel_cache_growth(trainer, model, config, request: dict, answer: int, shapes: int) -> dict:
    """CPU: what `shapes` batches of new shapes (each `NEW_SHAPE_TOKEN_STEP` tokens and 0.2 s of audio
    shorter than the last, the same answer) leave resident: the anonymous RSS after handing the free
    heap back (`pipeline.host.free_heap`) and dropping the gradients, after them against before
    them, i.e. the kernels oneDNN cached for the new shapes (`pipeline.memory.terms.cpu_kernel_cache`,
    one new row length and one new clip length each). Returns `{"new_shapes", "kernel_cache_growth_bytes"}`."""
    from pipeline.host.free_heap import release_free_heap
    from pipeline.training.peak_memory import _proc_status

    def anon() -> int:
        trainer.optimizer.zero_grad(set_to_none=True)
        release_free_heap()
        return _proc_status().get("RssAnon", 0)

    before = anon()
    seq, clip = int(request["seq_len"]), float(request["clip_s"])
    for k in range(1, shapes + 1):
        batch = synthetic_batch(model.config, config.batch_size, max(answer + 8, seq - NEW_SHAPE_TOKEN_STEP * k),
                                max(0.0, clip - 0.2 * k) if clip > 0 else 0.0, answer_tokens=answer, seed=k,
                                clips_per_row=int(request.get("clips_per_row") or 1))
        trainer.training_step(model, {key: v.to(request["device"]) for key, v in batch.items()})
    return {"new_shapes": shapes, "kernel_cache_growth_bytes": max(0, anon() - before)}


def probe_workspace(request: dict) -> dict:
    """`pipeline.training.train.run_probe_step` on the workspace's worst-case batch (its counters are
    reset right before the step, so loading does not count)."""
    from pipeline.config import TrainConfig
    from pipeline.training.train import run_probe_step

    config = TrainConfig.from_dict(request["config"])
    device = request["device"]
    out: dict = {"baseline_rss_bytes": rss_bytes()}
    result = run_probe_step(config, request["workspace"], phase=say_phase)
    out.update(_peaks(device))
    out["training_code_peak_bytes"] = result.get("peak_memory_bytes")
    out.update({k: result.get(k) for k in ("batch_rows", "worst_case", "batch_tokens", "loss", "seconds",
                                           "step_seconds", "startup_seconds", "out_of_memory")})
    out["step_error"] = result.get("error")
    out["mode"] = "pipeline.training.train.run_probe_step on the dataset's worst-case batch (one step)"
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    request = json.loads(argv[0])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # noqa: F401 - imported before the baseline, as in training
    import transformers  # noqa: F401
    import peft  # noqa: F401
    import datasets  # noqa: F401 - the trainer reads its rows with it

    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        pass
    try:
        if request.get("workspace"):
            result = probe_workspace(request)
        else:
            result = probe_synthetic(request)
    except Exception as error:  # noqa: BLE001 - reported to the parent as JSON
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    from pipeline.host.allocator import running_allocator

    print(json.dumps(dict(result, allocator=running_allocator())))
    return 0


if __name__ == "__main__":
    from pipeline.host.allocator import run_on_tcmalloc

    run_on_tcmalloc()  # the allocator a training process runs on (pipeline.host.allocator)
    sys.exit(main())
