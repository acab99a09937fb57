"""How many CPU threads the trainer and the app's inference use, so that together they never ask
for more threads than there are cores.

PyTorch sizes its intra-op pool (OpenMP) to every core by default. A trainer and an app answering a
Try click in the same machine then run 2 x cores busy threads on `cores` cores; OpenMP threads spin
and wait for each other at every parallel region, so a step that took 1 s took 55-65 s when one
other process kept one of two cores busy, and one answer took 9 minutes instead of 92 s
(FIELD_NOTES "Learned from the product"; measured by `benchmarks/cpu_threads.py`).

The rule (cores = the CPUs this process may run on, `os.sched_getaffinity`):
- the training process uses `cores - 1` threads (at least 1): one core stays free for the app, the
  browser and inference (`trainer_threads`; `python -m pipeline train` applies it at start, and
  `pipeline.training.runs.start_run` also sets `OMP_NUM_THREADS` for the process it starts);
- inference uses 1 thread while a run trains in its workspace, and `cores - 1` otherwise
  (`inference_threads`; `pipeline.tutor.infer` applies it before each answer): the app's own
  server, the browser and the rest of the machine keep a core, because a thread pool that asks for
  every core stalls as soon as anything else runs (measured on 2 cores under load: an answer took
  30 s with 2 threads and 4 s with 1);
- so trainer + inference = cores at most. `TUTOR_TRAIN_THREADS` / `TUTOR_INFER_THREADS` override
  the two numbers (e.g. on a machine where nothing else runs beside the trainer).

Torch is imported only by `apply_threads`.
"""

from __future__ import annotations

import os

from pipeline.host.env_settings import whole_number

TRAIN_THREADS_ENV = "TUTOR_TRAIN_THREADS"
INFER_THREADS_ENV = "TUTOR_INFER_THREADS"
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Set for a training process started by the app, before it imports torch or NumPy."""


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask, else `os.cpu_count()`), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS has no sched_getaffinity
        return max(1, os.cpu_count() or 1)


def _override(name: str) -> int | None:
    """`name` (`TUTOR_TRAIN_THREADS`, `TUTOR_INFER_THREADS`) as a number of threads, or None (the rule).

    Raises ConfigError when it is set and not a whole number >= 1."""
    return whole_number(name, unit="threads", unset="unset it to use the rule")


def trainer_threads(cores: int | None = None) -> int:
    """Threads of a training process: `TUTOR_TRAIN_THREADS`, else `cores - 1` (at least 1)."""
    override = _override(TRAIN_THREADS_ENV)
    if override is not None:
        return override
    cores = available_cores() if cores is None else cores
    return max(1, cores - 1)


def inference_threads(training_active: bool, cores: int | None = None) -> int:
    """Threads of one answer: `TUTOR_INFER_THREADS`, else 1 while a run trains beside it (the trainer
    has the other cores), else `cores - 1` (at least 1)."""
    override = _override(INFER_THREADS_ENV)
    if override is not None:
        return override
    cores = available_cores() if cores is None else cores
    return max(1, cores - trainer_threads(cores)) if training_active else max(1, cores - 1)


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that size the OpenMP/BLAS pools of a process started with them."""
    return {name: str(threads) for name in THREAD_ENV_VARS}


def apply_threads(threads: int) -> int:
    """Set torch's intra-op threads of this process to `threads` (and its inter-op pool to 1 when it
    has not started yet); returns the number set."""
    import torch

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    try:
        if torch.get_num_interop_threads() != 1:
            torch.set_num_interop_threads(1)
    except RuntimeError:  # the inter-op pool already ran work: it can no longer be resized
        pass
    return threads
