"""Measured, not estimated: launch the probe (`python -m pipeline.training.probe`, a child process that
runs one real optimizer step with the training code) and read back its peak. The torch work lives in
`pipeline/training/probe.py`; this module only starts it (`pipeline.jobs.run_child`: a blocking child,
killed after its timeout), so it stays torch-free.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Callable

from pipeline import jobs
from pipeline.config import TrainConfig
from pipeline.errors import TrainingError
from pipeline.memory.inputs import EstimateOptions, LengthStats
from pipeline.model.catalog import family_for

PROBE_RUN_NAME = "(memory probe)"
"""What the workspace's training lock names while a probe holds it (not a valid run name)."""


def _probe_lock(workspace):
    """Take the workspace's training lock for a probe (None without a workspace).

    Raises:
        TrainingError: a run trains in the workspace; a probe beside it would measure two processes
            on one device, and could make the run fail for lack of memory.
    """
    if workspace is None:
        return None
    from pipeline.host.workspace_lock import WorkspaceLock, lock_holder

    holder = lock_holder(workspace)
    if holder is not None:
        raise TrainingError(
            f"Not measured: run `{holder.get('run')}` (process {holder.get('pid')}) is training in this workspace, and a "
            "memory probe beside it would measure two processes sharing the device (and could make the run fail for lack "
            "of memory). Wait for the run to finish, or stop it, then measure."
        )
    return WorkspaceLock(workspace, PROBE_RUN_NAME).acquire()


def measure_peak(
    model: str,
    config: TrainConfig,
    lengths: LengthStats,
    device: str,
    options: EstimateOptions | None = None,
    *,
    workspace=None,
    timeout_s: float = 3600,
    new_shapes: int = 0,
    on_phase: Callable[[str], None] | None = None,
) -> dict:
    """Run one real optimizer step on the worst-case micro-batch in a child process and return
    its measured peaks (bytes): `peak_bytes` and `method`, plus CPU `peak_rss_bytes` (VmHWM after a
    reset, fallback ru_maxrss) and `baseline_rss_bytes`; CUDA `max_memory_allocated` /
    `max_memory_reserved`; MPS `driver_allocated_memory`.

    With a `workspace` whose dataset is built, the child runs the training code's own
    `pipeline.training.train.run_probe_step` on the dataset's longest rows; otherwise a synthetic batch of
    `batch_size` rows of the longest kept length with the longest clip, each supervising its last
    `kept_longest_answer` tokens (`pipeline.training.probe`).
    With a `workspace`, the probe holds the workspace's training lock while it runs: refused while a
    run trains there, and no run starts beside it. Before it starts, a Try/Judge tutor kept by this
    process on the GPU the probe will use is unloaded (`pipeline.tutor.infer.release_for`); the
    result's `released` says so (None: nothing was).
    `new_shapes` > 0 (synthetic batch, CPU): afterwards run that many batches of new shapes and report
    `kernel_cache_growth_bytes` (`pipeline.training.probe.kernel_cache_growth`; the calibration's kernel-cache evidence).
    `on_phase(name)` hears the probe's phases as they begin (`load`, `batch`, `step`, `shapes`;
    `pipeline.training.probe`), for a progress display.
    Raises `TrainingError` with the child's last output on failure, or when a run trains in `workspace`.
    """
    options = options or EstimateOptions()
    family = family_for(model) if model else None  # Gemma 4's worst case is longer with the longest clip
    seq_len, clip_s = lengths.kept_worst_case(config.max_length, family.audio_tokens if family else None)
    request = {
        "model": model,
        "config": config.to_dict(),
        "seq_len": seq_len,
        "answer_tokens": lengths.kept_longest_answer(config.max_length),
        "clip_s": clip_s,
        "clips_per_row": lengths.kept_max_clips(config.max_length),
        "device": device,
        "options": options.to_dict(),
        "workspace": str(workspace) if workspace is not None else None,
        "new_shapes": int(new_shapes),
    }
    cmd = [sys.executable, "-m", "pipeline.training.probe", json.dumps(request)]
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    lock = _probe_lock(workspace)  # no probe beside a run in the workspace, and no run starts during one
    try:
        from pipeline.tutor.infer import release_for

        released = release_for(config.device, what="the memory probe")  # the GPU a Try/Judge tutor holds
        proc = jobs.run_child(cmd, timeout_s=timeout_s, env=env, on_phase=on_phase)  # killed after timeout_s
    except jobs.ChildTimedOut:
        raise TrainingError(f"The memory probe took longer than {timeout_s:.0f} s; try a shorter --max-length.") from None
    finally:
        if lock is not None:
            lock.release()
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            if result.get("error"):
                raise TrainingError(f"The memory probe failed: {result['error']}")
            if result.get("out_of_memory"):
                raise TrainingError(
                    f"The measured step ran out of memory ({result.get('step_error')}): the run does not fit; "
                    "apply one of the suggestions and measure again.")
            result["released"] = released
            return result
    tail = (proc.stderr or proc.stdout)[-2000:]
    raise TrainingError(f"The memory probe exited with code {proc.returncode} without a result:\n{tail}")
