"""Peak memory of the training process as each backend reports it, and what to do after running out.

Counters (FIELD_NOTES "Memory"): CUDA `torch.cuda.max_memory_allocated` (resettable), Apple MPS
`torch.mps.driver_allocated_memory` (current, not a peak), CPU the process's resident-set
high-water mark (`getrusage` ru_maxrss, not resettable).
"""

from __future__ import annotations

import sys

import torch

from pipeline.config import TrainConfig


def reset_peak_memory(device: str) -> None:
    """Reset the peak-memory counter where the backend allows it (CUDA; CPU's RSS high-water mark cannot be reset)."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_memory_bytes(device: str) -> int:
    """Peak memory in bytes: CUDA `max_memory_allocated`, MPS `driver_allocated_memory` (current),
    CPU the process's resident-set high-water mark (`getrusage` ru_maxrss; KiB on Linux, bytes on macOS).

    Source of the choice of counters: FIELD_NOTES "Memory".
    """
    if device == "cuda":
        return int(torch.cuda.max_memory_allocated())
    if device == "mps":
        return int(torch.mps.driver_allocated_memory())
    try:
        import resource
    except ImportError:  # Windows: the peak working set, when psutil is installed
        try:
            import psutil

            return int(getattr(psutil.Process().memory_info(), "peak_wset", 0))
        except ImportError:
            return 0
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(maxrss if sys.platform == "darwin" else maxrss * 1024)


def memory_kind(device: str) -> str:
    """Which counter `peak_memory_bytes` reads on `device`."""
    return {"cuda": "cuda_max_memory_allocated", "mps": "mps_driver_allocated_memory"}.get(device, "cpu_max_rss")


def is_out_of_memory(error: BaseException) -> bool:
    """True for CUDA/MPS/CPU allocation failures."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error).lower()
    return "out of memory" in text or "can't allocate memory" in text or "failed to allocate" in text


def oom_suggestions(config: TrainConfig) -> list[str]:
    """Settings to change after an out-of-memory error, most effective first."""
    tips = []
    if config.batch_size > 1:
        tips.append(f"--batch-size 1 --grad-accum {config.batch_size * config.grad_accum} (same effective batch, less memory)")
    if not config.gradient_checkpointing:
        tips.append("--gradient-checkpointing (about 13x less activation memory, ~30 % slower)")
    if config.quantization != "4bit":
        tips.append("--quantization 4bit (NF4 weights)")
    if config.lora_targets != "language":
        tips.append("--lora-targets language (LoRA in the audio encoder keeps ~2 GiB per 30 s clip)")
    tips.append("a lower --max-length, rebuilding the dataset so long rows are excluded")
    tips.append("`python -m pipeline estimate` to see what fits this device")
    return tips
