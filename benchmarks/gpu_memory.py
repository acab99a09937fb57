"""The memory estimate on CUDA, measured: full-size Gemma 3n E2B (random weights) in the configurations a
consumer GPU needs, estimate against `torch.cuda.max_memory_allocated` and `max_memory_reserved`.

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/gpu_memory.py [--only 0 3] [--json OUT]
    .venv/bin/python benchmarks/gpu_memory.py --dry-run     # the estimate column only: no GPU, no torch work

Rows (each a 30 s clip; "tokens" are text tokens, the row is that + the clip's ~192 audio positions,
the last min(tokens, 256) supervised; LoRA r=16, batch 1, gradient checkpointing, AdamW):
  4-bit and bf16, the per-layer embedding table on the GPU or in host RAM (`--ple-on-cpu`, with the
  vision tower off: both placed in host RAM by the load-time device map), 256 and 1024 tokens, one
  with LoRA in the audio encoder (`language+audio`) and one with the frozen audio encoder in NF4
  (`--quantize-audio-encoder`).

Each row runs in a fresh child process (`pipeline.training.probe`, the training code's loading,
quantization, placements, LoRA, Trainer optimizer and `training_step`, two steps on a synthetic
worst-case batch). The checkpoint is full-size E2B with random weights saved in bf16
(benchmarks/memory_accuracy.py `e2b_checkpoint_dir`, 10.8 GB in $MEMORY_BENCH_CACHE, written once),
so 4-bit loads quantize it as they would the real one. Columns: the estimate's peak and its phase,
the estimated load phase, the measured whole-process peaks (loading and both steps:
max_memory_allocated and max_memory_reserved since the process started), the error of the estimate
against reserved (what the process holds; the runtime constant includes the allocator's slack) and
against allocated, and the measured load-only peaks.

Status: not run yet. No CUDA machine was available when this was written; benchmarks/README.md says the CUDA
figures are still to be measured. Without a CUDA device the script exits with a message (code 2)
unless `--dry-run` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pipeline.config import TrainConfig  # noqa: E402
from pipeline.fileio import last_json_line  # noqa: E402
from pipeline.memory.inputs import EstimateOptions, LengthStats  # noqa: E402
from pipeline.memory.phases import estimate_memory  # noqa: E402
from pipeline.model.catalog import load_model_config  # noqa: E402
from pipeline.units import format_bytes  # noqa: E402

E2B = "google/gemma-3n-E2B-it"
CLIP_S = 30.0
AUDIO_POSITIONS = 192  # <start_of_audio> + 188 soft tokens + <end_of_audio>, with the turn's newline


def grid() -> list[dict]:
    """The configurations (at least 6): quantization, placements, text tokens, LoRA targets, audio NF4."""
    rows = []
    for quant in ("4bit", "none"):
        for host in (False, True):
            rows.append(dict(quant=quant, host=host, tokens=256, targets="language", audio_nf4=False))
    rows.append(dict(quant="4bit", host=True, tokens=1024, targets="language", audio_nf4=False))
    rows.append(dict(quant="none", host=True, tokens=1024, targets="language", audio_nf4=False))
    rows.append(dict(quant="4bit", host=True, tokens=256, targets="language+audio", audio_nf4=False))
    rows.append(dict(quant="4bit", host=True, tokens=256, targets="language", audio_nf4=True))
    return rows


def row_config(row: dict, model: str) -> tuple[TrainConfig, LengthStats]:
    """The `TrainConfig` and dataset lengths of a grid row (`model` is the checkpoint the probe loads)."""
    seq = row["tokens"] + AUDIO_POSITIONS
    config = TrainConfig(model=model, device="cuda", quantization=row["quant"], lora_rank=16, lora_alpha=32,
                         lora_targets=row["targets"], batch_size=1, grad_accum=4, gradient_checkpointing=True,
                         max_length=max(256, seq), ple_on_cpu=row["host"], vision_tower=not row["host"],
                         quantize_audio_encoder=row["audio_nf4"])
    answer = min(row["tokens"], 256)
    return config, LengthStats(seq, CLIP_S, [seq], answer_tokens=[answer])


def measure(model_path: str, config: TrainConfig, lengths: LengthStats) -> dict:
    """One probe run in a fresh child process on CUDA; its JSON line."""
    request = {"model": model_path, "config": config.to_dict(), "seq_len": lengths.longest_tokens,
               "clip_s": lengths.longest_clip_s, "device": "cuda", "answer_tokens": lengths.answer_tokens[0]}
    proc = subprocess.run([sys.executable, "-m", "pipeline.training.probe", json.dumps(request)],
                          capture_output=True, text=True, cwd=str(REPO))
    result = last_json_line(proc.stdout)
    return result if result is not None else {"error": (proc.stderr or proc.stdout)[-1500:]}


def _label(row: dict) -> str:
    return (f"{row['quant']:<5} {'host' if row['host'] else 'gpu':<4} {row['tokens']:>5} "
            f"{'lang+audio' if row['targets'] == 'language+audio' else 'language':<10} {'nf4' if row['audio_nf4'] else 'bf16':<4}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the estimate column only (no GPU needed)")
    parser.add_argument("--only", type=int, nargs="*", help="row indices to run")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("benchmarks/gpu_memory.py measures CUDA memory, but no CUDA device is visible here "
                  "(torch.cuda.is_available() is False). Run it on a machine with an NVIDIA GPU, or pass --dry-run "
                  "to print the estimate column alone.", file=sys.stderr)
            return 2
        from memory_accuracy import e2b_checkpoint_dir

        model_path = str(e2b_checkpoint_dir())
        print(f"GPU: {torch.cuda.get_device_name()}, checkpoint {model_path} (E2B, random weights, bf16)")
    else:
        model_path = E2B
    model_config = load_model_config(E2B)
    header = (f"{'#':>2} {'quant':<5} {'PLE':<4} {'tok':>5} {'LoRA on':<10} {'audio':<4} | {'estimate':>10} {'phase':>14} "
              f"{'est load':>10}" + ("" if args.dry_run else
                                     f" | {'allocated':>10} {'reserved':>10} {'err% res':>8} {'err% alloc':>10} | "
                                     f"{'load alloc':>10} {'load res':>10}"))
    print(header)
    print("-" * len(header))
    results = []
    for i, row in enumerate(grid()):
        if args.only is not None and i not in args.only:
            continue
        config, lengths = row_config(row, model_path)
        est = estimate_memory(model_config, config, lengths, "cuda", EstimateOptions())
        est_load = est.phases["load"] + est.components["runtime_overhead"]
        line = (f"{i:>2} {_label(row)} | {format_bytes(est.total_bytes):>10} {est.peak_phase:>14} "
                f"{format_bytes(est_load):>10}")
        rec = {**row, "estimate_bytes": est.total_bytes, "estimate_load_bytes": est_load, "peak_phase": est.peak_phase,
               "components": est.components}
        if not args.dry_run:
            m = measure(model_path, config, lengths)
            rec.update(m)
            if "error" in m:
                print(f"{line} | error: {m['error'][-300:]}", flush=True)
                results.append(rec)
                continue
            allocated = max(m.get("first_step_max_memory_allocated", 0), m["max_memory_allocated"])
            reserved = max(m.get("first_step_max_memory_reserved", 0), m["max_memory_reserved"])
            err_res = 100.0 * (est.total_bytes - reserved) / reserved
            err_alloc = 100.0 * (est.total_bytes - allocated) / allocated
            rec.update(whole_allocated=allocated, whole_reserved=reserved, error_reserved_percent=round(err_res, 2),
                       error_allocated_percent=round(err_alloc, 2))
            line += (f" | {format_bytes(allocated):>10} {format_bytes(reserved):>10} {err_res:>+8.1f} {err_alloc:>+10.1f} | "
                     f"{format_bytes(m.get('load_max_memory_allocated', 0)):>10} "
                     f"{format_bytes(m.get('load_max_memory_reserved', 0)):>10}")
        print(line, flush=True)
        results.append(rec)
    done = [r for r in results if "error_reserved_percent" in r]
    if done:
        within = sum(abs(r["error_reserved_percent"]) <= 10 for r in done)
        print(f"\nrows whose estimate is within 10 % of measured reserved memory: {within}/{len(done)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
