"""Workspaces with a dataset built from the real speechocean762 subset, shared by the training tests.

`real_workspace(...)` imports the 60 real clips (Kaldi layout, expert-score feedback) and builds the
dataset with the tiny model's processor, once per test session per variant; tests only add runs
(`trained_run`: a short run trained once in such a workspace).
"""

from __future__ import annotations

import shutil
from pathlib import Path

_BUILT: dict[tuple, Path] = {}


def real_workspace(tmp_path_factory, speechocean_dir: Path, tiny_model_dir: Path, *, keep: int | None = None, eval_fraction: float = 0.34) -> Path:
    """A workspace whose dataset holds the real clips (the first `keep` sample ids, or all 60).

    Built once per session for each (`keep`, `eval_fraction`); do not modify its samples or dataset.
    """
    key = (str(tiny_model_dir), keep, eval_fraction)
    if key in _BUILT:
        return _BUILT[key]
    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder
    from pipeline.data.samples import SampleLibrary

    root = tmp_path_factory.mktemp(f"ws-real-{keep or 'all'}")
    report = import_folder(root, speechocean_dir, format="kaldi")
    assert len(report.imported) == 60, report.skipped
    if keep is not None:
        library = SampleLibrary(root)
        for sample in sorted(library.list(), key=lambda s: s.id)[keep:]:
            library.delete(sample.id)
    build_dataset(root, str(tiny_model_dir), eval_fraction=eval_fraction, seed=0, max_length=512)
    _BUILT[key] = root
    return root


def trained_run(ws: Path, tiny_model_dir: Path, run: str, **settings) -> Path:
    """`ws` with run `run` trained in this process, once (kept when its adapter exists): the tiny model on
    CPU, LoRA rank 8, 3 optimizer steps of one row, no evaluation, no checkpoints, no warm-up; `settings`
    override any `TrainConfig` field. Returns `ws`; asserts that the run completed."""
    from pipeline.config import TrainConfig
    from pipeline.training.train import train

    if not (ws / "runs" / run / "adapter").exists():
        config = TrainConfig(**{"model": str(tiny_model_dir), "device": "cpu", "lora_rank": 8, "batch_size": 1,
                                "grad_accum": 1, "max_steps": 3, "eval_steps": 0, "save_steps": 0, "warmup_ratio": 0.0,
                                **settings})
        assert train(config, ws, run)["status"] == "completed"
    return ws
def one_step_run(tmp_path_factory, speechocean_dir: Path, tiny_model_dir: Path) -> Path:
    """A copy of the shared 6-clip workspace with run `r1`: the tiny model on CPU unquantized, LoRA rank 4
    (alpha 8), one optimizer step of one row, seed 1, no evaluation, no checkpoints (an adapter that answers).
    Trained once per session for the tests that need a trained run to answer with (tests/test_inbox.py,
    tests/test_e2e_practice.py); take a `copy_workspace` of it before changing anything in it."""
    key = ("one-step-r1", str(tiny_model_dir))
    if key in _BUILT:
        return _BUILT[key]
    from pipeline.config import TrainConfig
    from pipeline.training.train import train

    ws = copy_workspace(real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34),
                        tmp_path_factory.mktemp("one-step") / "ws")
    config = TrainConfig(model=str(tiny_model_dir), device="cpu", quantization="none", lora_rank=4, lora_alpha=8,
                         batch_size=1, grad_accum=1, max_steps=1, eval_steps=0, save_steps=0, seed=1)
    assert train(config, ws, "r1")["status"] == "completed"
    _BUILT[key] = ws
    return ws


def copy_workspace(source: Path, dest: Path) -> Path:
    """A private copy (dataset + samples) a test may add runs to without touching the shared one."""
    shutil.copytree(source, dest)
    return dest


def train_sample_pack_run(ws: Path, tiny_model_dir: Path, run: str = "first", env: dict | None = None) -> tuple[dict, str]:
    """A new user's first run from the command line, in its own process as the app starts it: the
    bundled sample pack imported into `ws`, the dataset built, the tiny model trained in 4-bit for 6
    steps with evaluation and a checkpoint at step 3. Returns the run's result.json (dict) and what the
    command printed (its summary); asserts that the process exited with 0 (its stderr in the message)."""
    import json
    import subprocess
    import sys

    from pipeline.data.dataset import build_dataset
    from pipeline.data.importers import import_folder

    repo = Path(__file__).resolve().parents[1]
    import_folder(ws, repo / "sample_data" / "speechocean762-pack", format="kaldi")
    build_dataset(ws, str(tiny_model_dir))
    cmd = [sys.executable, "-m", "pipeline", "train", "--workspace", str(ws), "--run", run, "--model",
           str(tiny_model_dir), "--device", "cpu", "--quantization", "4bit", "--max-steps", "6", "--eval-steps", "3",
           "--save-steps", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, timeout=3000, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((ws / "runs" / run / "result.json").read_text()), proc.stdout
