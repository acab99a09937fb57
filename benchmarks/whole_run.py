"""The whole-run column of `benchmarks/memory_accuracy.py`: a real training process per grid row.

For one grid row (model, tokens per row, batch, checkpointing, quantization, LoRA rank, clip) this
builds a workspace whose rows all have about that many tokens (the tutor's answer `answer_tokens`
long, the rest prompt) and a clip of that length (at least `MIN_CLIP_S`: every sample of this product
has audio), then runs `python -m pipeline train` in a fresh process, as the app starts it: 6
optimizer steps (`--grad-accum 1`), evaluation and a checkpoint at step 3 (and again at step 6),
then the final adapter. The trainer records the peak of every phase (`result.json` `memory`) and the
estimate for the same settings, dataset and device (`memory_estimate`); this module reads both.

The workspaces are cached under the benchmark's cache folder, one per (model, tokens, clip, batch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MIN_CLIP_S = 1.0
"""Grid rows without a clip (text-only synthetic steps) get a clip this long in the whole run."""
FILLER = "the cat sat on a mat and we call it bear"
"""Words the prompts and answers are made of (any text tokenizes; few distinct tokens, as in a real dataset)."""


def _text_of(counter, target: str, answer: str, clip_s: float = MIN_CLIP_S) -> tuple[int, int]:
    from pipeline.conversation.messages import build_messages
    from pipeline.model.tokens import ClipLength

    ids = counter.encode_texts([counter.render(build_messages(target, answer, ClipLength(clip_s)))])[0]
    return len(ids), counter.supervised_tokens(ids)


def texts_for(processor, seq_len: int, answer_tokens: int, clip_s: float = MIN_CLIP_S) -> tuple[str, str]:
    """(target_text, feedback) whose conversation, with a clip of `clip_s` seconds (Gemma 4's audio tokens
    grow with it), has about `seq_len` tokens with about `answer_tokens` of them supervised (the counts of
    `pipeline.model.tokens.TokenCounter`)."""
    from pipeline.model.tokens import TokenCounter

    counter = TokenCounter(processor)
    words = FILLER.split()
    answer = words[0]
    while _text_of(counter, "Bear", answer, clip_s)[1] < answer_tokens:
        answer += " " + words[len(answer.split()) % len(words)]
    target = "Bear"
    while _text_of(counter, target, answer, clip_s)[0] < seq_len:
        target += " " + words[len(target.split()) % len(words)]
    return target, answer


def workspace_for(cache: Path, model_path: str, row: dict, answer_tokens: int) -> Path:
    """A workspace with 6 samples (3 speakers: 4 train rows, 2 eval rows after the speaker split) of
    about `row["seq_len"]` tokens and a clip of max(`row["clip_s"]`, `MIN_CLIP_S`) seconds, built with
    `model_path`'s tokenizer; cached."""
    from pipeline.data.dataset import build_dataset
    from pipeline.data.samples import SampleLibrary
    from pipeline.model.loading import load_processor

    clip_s = max(row["clip_s"], MIN_CLIP_S)
    ws = cache / "whole-run" / f"{Path(model_path).name}-{row['seq_len']}t-{clip_s:g}s-{row['batch']}b"
    if (ws / "dataset" / "build_report.json").exists():
        return ws
    shutil.rmtree(ws, ignore_errors=True)
    target, answer = texts_for(load_processor(model_path), row["seq_len"], answer_tokens, clip_s)
    library = SampleLibrary(ws)
    rng = np.random.default_rng(0)
    t = np.arange(int(16000 * clip_s)) / 16000
    items = []
    for i in range(3 * max(2, row["batch"])):
        wave = 0.3 * np.sin(2 * np.pi * (180 + 20 * i) * t) + 0.02 * rng.standard_normal(t.size)
        items.append(dict(audio=(16000, (wave * 32767).astype(np.int16)), target_text=target, feedback=answer,
                          speaker=f"s{i % 3}", sample_id=f"row{i}"))
    added, skipped = library.add_many(items)
    if skipped:
        raise RuntimeError(f"benchmark samples refused: {skipped}")
    build_dataset(ws, model_path, eval_fraction=0.34, seed=0, max_length=max(512, row["seq_len"] + 64))
    return ws


def run_config(model_path: str, row: dict):
    """The `TrainConfig` that `run_whole` trains for grid row `row` (its command line, as settings)."""
    from pipeline.config import TrainConfig

    rank = row["rank"]
    return TrainConfig(model=model_path, device="cpu", quantization=row["quant"], lora_rank=rank, lora_alpha=2 * rank,
                       batch_size=row["batch"], grad_accum=1, gradient_checkpointing=row["gc"],
                       max_length=max(512, row["seq_len"] + 64), max_steps=6, eval_steps=3, save_steps=3,
                       low_memory_heap=bool(row.get("low_memory_heap", False)))


def run_whole(cache: Path, model_path: str, row: dict, answer_tokens: int, run: str = "bench",
              env: dict[str, str] | None = None) -> dict:
    """Train the row's settings for 6 steps with evaluation and checkpoints every 3 steps in a fresh
    `python -m pipeline train` process; returns result.json (its `memory` and `memory_estimate`),
    or `{"error": ...}`. `env`: variables added to the training process's environment."""
    ws = workspace_for(cache, model_path, row, answer_tokens)
    shutil.rmtree(ws / "runs" / run, ignore_errors=True)
    config = run_config(model_path, row)
    cmd = [sys.executable, "-m", "pipeline", "train", "--workspace", str(ws), "--run", run, "--model", model_path,
           "--device", config.device, "--quantization", config.quantization, "--lora-rank", str(config.lora_rank),
           "--lora-alpha", str(config.lora_alpha), "--batch-size", str(config.batch_size),
           "--grad-accum", str(config.grad_accum),
           "--gradient-checkpointing" if config.gradient_checkpointing else "--no-gradient-checkpointing",
           "--max-length", str(config.max_length), "--max-steps", str(config.max_steps),
           "--eval-steps", str(config.eval_steps), "--save-steps", str(config.save_steps), "--json"] + \
        (["--low-memory-heap"] if config.low_memory_heap else [])
    env = dict(os.environ, HF_HUB_OFFLINE="1", **(env or {}))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=str(REPO), env=env)
    path = ws / "runs" / run / "result.json"
    if not path.exists():
        return {"error": (proc.stderr or proc.stdout)[-1500:]}
    result = json.loads(path.read_text())
    if result.get("status") != "completed" or not result.get("memory") or not result.get("memory_estimate"):
        return {"error": f"run {result.get('status')}: {result.get('reason')} {(proc.stderr or '')[-800:]}"}
    return result
