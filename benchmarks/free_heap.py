"""What handing the C heap's free memory back costs and saves: a CPU training run side by side with and
without it (`pipeline.host.free_heap`).

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/free_heap.py [--model mid|e2b] [--repeat 2]

Each run is `python -m pipeline train` in a fresh process (`benchmarks/whole_run.py`: 6 optimizer
steps, evaluation and a checkpoint at step 3) on the same workspace and settings, alternating
"release" (the default) and "keep" (`TUTOR_KEEP_FREE_HEAP=1`, glibc's free heap stays resident as
before), so both see the same machine load. Printed per run: the peak of the whole run and of the
load, preflight, step and eval phases (CPU resident-set high-water mark, `pipeline.training.peak_memory`),
and the median seconds per optimizer step over the steps that follow a step (not an evaluation);
then the ratios release / keep of the medians.

Settings: `--model mid` (the ~0.2 B random Gemma 3n of `benchmarks/memory_accuracy.py`, 1,024-token
rows, ~1 min a run) or `--model e2b` (full-size E2B with random weights, 512-token rows, ~5 min a
run, 11 GB of disk), both NF4, gradient checkpointing, LoRA rank 16, a 30 s clip per row.

Results (2026-11-30, this machine: 2 cores, 24 GiB, no GPU): see benchmarks/README.md ("Handing the free heap back")
and docs/memory.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_accuracy import CACHE, e2b_checkpoint_dir, give_tokenizer_the_models_ids, mid_model_dir  # noqa: E402
from whole_run import run_whole  # noqa: E402

from pipeline.units import GIB  # noqa: E402
from pipeline.host.free_heap import KEEP_FREE_HEAP_ENV  # noqa: E402

PHASES = ("load", "preflight", "step", "eval")


def seconds_per_step(progress: Path) -> float | None:
    """Median seconds between consecutive train lines of progress.jsonl (a step that followed an
    evaluation or a checkpoint save is left out)."""
    lines = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
    gaps = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(lines, lines[1:])
            if a["kind"] == "train" and b["kind"] == "train" and b["step"] == a["step"] + 1]
    return statistics.median(gaps) if gaps else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mid", "e2b"), default="mid")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each mode, alternating (default 2)")
    args = parser.parse_args(argv)
    folder = e2b_checkpoint_dir() if args.model == "e2b" else mid_model_dir()
    model_path = str(give_tokenizer_the_models_ids(folder))
    row = dict(seq_len=512 if args.model == "e2b" else 1024, batch=1, gc=True, quant="4bit", rank=16, clip_s=30.0)
    print(f"{args.model}: {row['seq_len']} tokens, a {row['clip_s']:g} s clip, NF4, gradient checkpointing, "
          f"LoRA r {row['rank']}; 6 steps, eval and save at step 3; CPU peak RSS per phase (GiB)\n")
    print(f"{'mode':8} {'run':>3} | {'whole run':>9} " + " ".join(f"{p:>9}" for p in PHASES) + f" | {'s/step':>7}")
    measured: dict[str, list[tuple[float, float | None]]] = {"release": [], "keep": []}
    for i in range(args.repeat):
        for mode in ("release", "keep"):
            env = {KEEP_FREE_HEAP_ENV: "1" if mode == "keep" else "0"}
            result = run_whole(CACHE, model_path, row, 64, run=f"heap-{mode}-{i}", env=env)
            if "error" in result:
                print(f"{mode:8} {i:>3} | error: {result['error'][-300:]}")
                return 1
            memory = result["memory"]
            phases = memory["phase_peak_bytes"]
            ws = Path(result["adapter_dir"]).parent
            per_step = seconds_per_step(ws / "progress.jsonl")
            measured[mode].append((memory["peak_bytes"] / GIB, per_step))
            print(f"{mode:8} {i:>3} | {memory['peak_bytes'] / GIB:>9.2f} "
                  + " ".join(f"{phases.get(p, 0) / GIB:>9.2f}" for p in PHASES)
                  + f" | {per_step if per_step is not None else float('nan'):>7.2f}", flush=True)
    peak = {m: statistics.median(p for p, _ in runs) for m, runs in measured.items()}
    step = {m: statistics.median(s for _, s in runs if s is not None) for m, runs in measured.items()}
    print(f"\nmedian whole-run peak: release {peak['release']:.2f} GiB, keep {peak['keep']:.2f} GiB "
          f"(release / keep {peak['release'] / peak['keep']:.2f}x)")
    print(f"median seconds per step: release {step['release']:.2f}, keep {step['keep']:.2f} "
          f"(release / keep {step['release'] / step['keep']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
