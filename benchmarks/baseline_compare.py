"""Side by side with what a user would otherwise write: this product's trainer against a plain
`transformers.Trainer` + `peft` script on the same model, data and LoRA settings.

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/baseline_compare.py [--model mid|tiny|PATH] [--device cpu|cuda]
        [--steps 6] [--repeat 2] [--quantization none|4bit] [--json OUT]

Both sides train the same LoRA (rank 16 on the text decoder's attention and MLP projections, alpha
32, dropout 0.05), with gradient checkpointing (use_reentrant=False), AdamW, the same learning-rate
schedule and seed, batch 1 x 2 accumulation, for `--steps` optimizer steps, on the same batches: the
sample pack (sample_data/, 8 real clips) built with the model's tokenizer, collated by the product's
`ChatCollator` (labels supervise only the tutor's answer), with one checkpoint saved at the end.
The difference is what each computes:
  * ours: `pipeline.training.train.train` (the preflight on the longest batch, the answer-only loss
    `answer_loss`: logits only where the next token is supervised, normalised over the
    accumulation window; progress files, STOP checks);
  * baseline: a plain script: `from_pretrained`, `get_peft_model`, `Trainer` with its standard loss
    (the model's own `loss`: logits for every position over the 262,400-entry vocabulary on the real
    model, the mean over each micro-batch's supervised tokens).
Both sides compute in the precision this machine runs fast (`pipeline.calibration.precision`: bf16
where the CPU has native bf16 and the calibration's timed check confirms it, else fp32), printed
first; the child's JSON says which dtype each side ran (`dtype` for the baseline). Ours runs on the C
allocator the product's training process runs on (`pipeline.host.allocator`: TCMalloc where it is
installed), the baseline on the system's malloc, as a plain script does; each child's JSON says which
(`allocator`).
Each run is a fresh child process (`--child ours|baseline`), the two alternating, `--repeat` times
each. Printed per run: the process's peak memory (CPU: the resident-set high-water mark VmHWM of the
whole process, loading included; CUDA: max_memory_allocated and reserved), seconds per optimizer
step (median over the steps after the first, wall clock and process CPU time) and the first
losses; then the ratios ours / baseline of the medians.

Models: `mid` is a mid-size random Gemma 3n with the dimensions of benchmarks/memory_accuracy.py's
(~0.2 B parameters, 65,792-entry vocabulary; `mid_chat_model_dir`, built once into
$MEMORY_BENCH_CACHE with a processor whose token ids are the model's), `tiny` the offline test model.
Random weights: the losses are ~ln(vocabulary) and only compare the two sides.

Result (2026-11-30, 2-core CPU, `--model mid --steps 6 --repeat 2`): peak RSS 1.97 / 1.97 GiB (ours)
against 2.28 / 2.26 GiB (baseline), 0.87x; seconds per step 2.94 / 3.01 against 3.53 / 3.59 wall,
0.84x (0.83x CPU time), throughput 1.20x; first losses 11.2878 and 11.2875.

Result (2026-12-01, another 2-core CPU: AMD EPYC, AVX2, so fp32 on both sides; `--model mid --steps 6
--repeat 1`, the cores shared with other jobs): peak RSS 1.31 GiB (ours) against 2.03 GiB, 0.64x;
45.47 against 47.04 s per step wall, 0.97x (28.82 against 34.32 s CPU time, 0.84x); first losses
11.2815 and 11.2814. (In bf16 on that CPU, issue 19 measured 111.7 s per step for ours.)

Result (2026-12-02, the same AMD EPYC, ours on TCMalloc and the baseline on glibc's malloc, fp32 on
both sides, `--model mid --steps 6 --repeat 2`, nothing else running): peak RSS 1.46 / 1.47 GiB
against 2.02 / 2.06 GiB, 0.72x; 4.72 / 5.03 against 6.72 / 7.13 s per step wall, 0.70x (0.71x CPU
time), throughput 1.42x; first losses 11.2815 and 11.2814. An earlier `--repeat 1` the same day:
1.47 against 2.10 GiB, 5.23 against 6.98 s per step (0.75x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pipeline.fileio import last_json_line  # noqa: E402
from pipeline.units import format_bytes  # noqa: E402

CACHE = Path(os.environ.get("MEMORY_BENCH_CACHE", "/tmp/memory-bench"))
PACK = REPO / "sample_data" / "speechocean762-pack"
LORA = {"lora_rank": 16, "lora_alpha": 32, "lora_dropout": 0.05, "lora_targets": "language"}


def mid_chat_model_dir() -> Path:
    """A mid-size random Gemma 3n with a working processor: the dimensions of benchmarks/memory_accuracy.py's
    "mid" model (hidden 512, 8 layers, MLP 2,048, 65,792-entry vocabulary, 2-block audio encoder of
    hidden 256) written by the tiny Gemma 3n's builder (`TINY_GEMMA3N`) with its text block widened to 65,536 ids, so the
    processor's special-token ids (audio soft tokens, turn markers) are the model's and real rows
    from the sample pack train on it."""
    out = CACHE / "mid-chat"
    if (out / "config.json").exists():
        return out
    from dataclasses import replace

    from transformers import Gemma3nConfig

    from pipeline.model.tiny_gemma3n import TINY_GEMMA3N
    from pipeline.model.tiny_model import build_stand_in

    layers = 8

    def mid_config(ids, spec):
        data = TINY_GEMMA3N.config(ids, spec).to_dict()
        data["text_config"].update(
            hidden_size=512, intermediate_size=[2048] * layers, num_hidden_layers=layers, num_attention_heads=4,
            num_key_value_heads=2, head_dim=128, hidden_size_per_layer_input=256, laurel_rank=32,
            num_kv_shared_layers=2, sliding_window=512, max_position_embeddings=8192,
            layer_types=["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(layers)],
            activation_sparsity_pattern=[0.95] * 2 + [0.0] * (layers - 2))
        data["audio_config"].update(hidden_size=256, conf_num_attention_heads=4, conf_num_hidden_layers=2,
                                    sscp_conv_channel_size=[64, 16])
        return Gemma3nConfig.from_dict(data)

    build_stand_in(out, replace(TINY_GEMMA3N, text_vocab=65536, multimodal_vocab=128, config=mid_config))
    return out


def model_dir(name: str) -> Path:
    """The model folder for `name` (mid / tiny, built on first use) or a path."""
    if name == "mid":
        return mid_chat_model_dir()
    if name == "tiny":
        from memory_accuracy import tiny_model_dir

        return tiny_model_dir()
    return Path(name)


def workspace_for(model: Path) -> Path:
    """A workspace with the sample pack imported and built with `model`'s tokenizer (eval split empty)."""
    ws = CACHE / f"baseline-ws-{model.name}"
    if (ws / "dataset" / "build_report.json").exists():
        return ws
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder

    import_folder(ws, PACK)
    build_dataset(ws, str(model), eval_fraction=0.0, seed=42, max_length=1024)
    return ws


def _config(args) -> "TrainConfig":
    from pipeline.config import TrainConfig

    return TrainConfig(model=str(args.model_path), device=args.device, quantization=args.quantization,
                       batch_size=1, grad_accum=2, max_steps=args.steps, eval_steps=0, save_steps=args.steps,
                       max_length=1024, gradient_checkpointing=True, seed=42, **LORA)


def _recorder():
    """A TrainerCallback recording each optimizer step's wall and CPU seconds and each logged loss."""
    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        def __init__(self):
            self.wall, self.cpu, self.losses = [], [], []

        def on_step_begin(self, args, state, control, **kwargs):
            self._t = (time.perf_counter(), time.process_time())

        def on_step_end(self, args, state, control, **kwargs):
            self.wall.append(time.perf_counter() - self._t[0])
            self.cpu.append(time.process_time() - self._t[1])

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    return Recorder()


def _peaks(device: str) -> dict:
    from pipeline.training.peak_memory import rss_peak_bytes

    out = {"peak_rss_bytes": rss_peak_bytes()}
    if device == "cuda":
        import torch

        out["max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
        out["max_memory_reserved"] = int(torch.cuda.max_memory_reserved())
    out["peak_bytes"] = out.get("max_memory_reserved", out["peak_rss_bytes"])
    return out


def child_ours(args) -> dict:
    """This product's trainer (`pipeline.training.train.train`) on the workspace."""
    import shutil

    from pipeline.training.train import train

    run = f"bench-{os.getpid()}"
    recorder = _recorder()
    started = time.perf_counter()
    result = train(_config(args), args.workspace, run, callbacks=[recorder])
    seconds = time.perf_counter() - started
    shutil.rmtree(Path(args.workspace) / "runs" / run, ignore_errors=True)
    if result.get("status") != "completed":
        return {"error": f"{result.get('status')}: {result.get('reason')}"}
    return {"wall": recorder.wall, "cpu": recorder.cpu, "losses": recorder.losses, "seconds": seconds}


def child_baseline(args) -> dict:
    """What a user would write: plain transformers + peft, the model's standard loss (full logits)."""
    import tempfile

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText, BitsAndBytesConfig, Trainer, TrainingArguments

    from pipeline.data.dataset import load_built_dataset
    from pipeline.training.collate import ChatCollator
    from pipeline.model.gemma import LANGUAGE_LORA_REGEX
    from pipeline.model.loading import load_processor

    from pipeline.model.loading import compute_dtype

    config = _config(args)
    started = time.perf_counter()
    dtype = compute_dtype(args.device)  # the precision this machine runs fast, as ours picks it
    kwargs = {"dtype": dtype, "attn_implementation": "eager", "device_map": {"": args.device}}
    if config.quantization == "4bit":
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
            llm_int8_skip_modules=["model.audio_tower", "model.vision_tower", "model.embed_audio", "model.embed_vision",
                                   "lm_head", r"model\.language_model\.layers\.\d+\.altup"])
    model = AutoModelForImageTextToText.from_pretrained(str(args.model_path), **kwargs)
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    torch.manual_seed(config.seed)
    model = get_peft_model(model, LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                                             lora_dropout=config.lora_dropout, target_modules=LANGUAGE_LORA_REGEX,
                                             task_type="CAUSAL_LM"))
    processor = load_processor(str(args.model_path))
    data = load_built_dataset(args.workspace)["train"]
    recorder = _recorder()
    with tempfile.TemporaryDirectory(prefix="baseline-") as out:
        training_args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=config.batch_size,
            gradient_accumulation_steps=config.grad_accum, learning_rate=config.learning_rate,
            lr_scheduler_type=config.lr_schedule, warmup_steps=config.warmup_ratio, max_steps=config.max_steps,
            weight_decay=config.weight_decay, max_grad_norm=config.max_grad_norm, optim="adamw_torch",
            logging_steps=1, logging_first_step=True, save_strategy="steps", save_steps=config.save_steps,
            seed=config.seed, data_seed=config.seed, remove_unused_columns=False, report_to=[], disable_tqdm=True,
            use_cpu=args.device == "cpu", bf16=False, fp16=False, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=training_args, train_dataset=data,
                          data_collator=ChatCollator(processor, max_length=config.max_length), callbacks=[recorder])
        trainer.train()
    return {"wall": recorder.wall, "cpu": recorder.cpu, "losses": recorder.losses,
            "seconds": time.perf_counter() - started, "dtype": str(dtype).replace("torch.", "")}


def run_child(side: str, args, model_path: Path, workspace: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", side, "--model", str(model_path), "--workspace", str(workspace),
           "--device", args.device, "--steps", str(args.steps), "--quantization", args.quantization]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(REPO))
    result = last_json_line(proc.stdout)
    return result if result is not None else {"error": (proc.stderr or proc.stdout)[-1500:]}


def _step_seconds(values: list[float]) -> float:
    later = values[1:] or values
    return statistics.median(later) if later else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mid", help="mid (default), tiny, or a model folder")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--quantization", default="none", choices=("none", "4bit"))
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per run (batch 1 x 2 accumulation)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per side, alternating ours / baseline")
    parser.add_argument("--json", type=Path, help="also write every run as JSON here")
    parser.add_argument("--child", choices=("ours", "baseline"), help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.model_path = Path(args.model)
        try:
            result = child_ours(args) if args.child == "ours" else child_baseline(args)
        except Exception as error:  # noqa: BLE001 - reported to the parent as JSON
            result = {"error": f"{type(error).__name__}: {error}"}
        result.update(_peaks(args.device))
        from pipeline.host.allocator import running_allocator

        print(json.dumps(dict(result, allocator=running_allocator())))
        return 0
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("benchmarks/baseline_compare.py --device cuda needs a CUDA GPU; none is visible here.", file=sys.stderr)
            return 2
    model_path = model_dir(args.model)
    workspace = workspace_for(model_path)
    from pipeline.calibration.precision import choose_compute_dtype

    dtype, why = choose_compute_dtype(args.device)
    print(f"model {model_path} ({args.model}), data: the sample pack built in {workspace}; {args.device}, "
          f"quantization {args.quantization}, LoRA r=16 language, batch 1 x 2, {args.steps} steps, gradient checkpointing on")
    print(f"precision on both sides: {dtype} ({why}; TUTOR_COMPUTE_DTYPE overrides)")
    runs: dict[str, list[dict]] = {"ours": [], "baseline": []}
    header = f"{'run':<10} {'peak':>10} {'s/step wall':>12} {'s/step CPU':>11}  first losses"
    print(header)
    print("-" * len(header))
    for i in range(args.repeat):
        for side in ("ours", "baseline"):
            result = run_child(side, args, model_path, workspace)
            runs[side].append(result)
            if "error" in result:
                print(f"{side}-{i + 1:<5} error: {result['error'][-400:]}")
                continue
            losses = ", ".join(f"{x:.4f}" for x in result["losses"][:3])
            print(f"{side + '-' + str(i + 1):<10} {format_bytes(result['peak_bytes']):>10} "
                  f"{_step_seconds(result['wall']):>12.2f} {_step_seconds(result['cpu']):>11.2f}  {losses}"
                  f"  ({result.get('allocator', '?')})", flush=True)
    good = {side: [r for r in rs if "error" not in r] for side, rs in runs.items()}
    if all(good.values()):
        med = {side: {"peak": statistics.median(r["peak_bytes"] for r in rs),
                      "wall": statistics.median(_step_seconds(r["wall"]) for r in rs),
                      "cpu": statistics.median(_step_seconds(r["cpu"]) for r in rs)}
               for side, rs in good.items()}
        ratio = {k: med["ours"][k] / med["baseline"][k] for k in ("peak", "wall", "cpu")}
        first = {side: rs[0]["losses"][0] if rs[0]["losses"] else float("nan") for side, rs in good.items()}
        print(f"\nours / baseline (medians): peak {ratio['peak']:.2f}x, seconds per step {ratio['wall']:.2f}x wall, "
              f"{ratio['cpu']:.2f}x CPU time; throughput {1 / ratio['wall']:.2f}x")
        print(f"first loss: ours {first['ours']:.4f}, baseline {first['baseline']:.4f}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    if sys.argv[1:3] == ["--child", "ours"]:  # the allocator the product's training process runs on
        from pipeline.host.allocator import run_on_tcmalloc

        run_on_tcmalloc()
    sys.exit(main())
