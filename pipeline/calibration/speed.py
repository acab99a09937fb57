"""The timed precision check of a calibration (torch; run in a child process by `pipeline.memory.calibrate.calibrate`).

`python -m pipeline.calibration.speed DEVICE` prints one JSON line: `matmul_speed(device)`. It uses
the trainer's thread count (`pipeline.host.cpu_threads.trainer_threads`), so it times what a run gets.
"""

from __future__ import annotations

import json
import sys
import time

MATMUL_SIZE = 512
"""A 512^3 matmul (0.27 GFLOP per call: under a second even where bf16 is emulated at 0.5 GFLOPS)."""
MATMUL_SECONDS = 0.3
"""Time spent per dtype and round, at least (two alternating rounds each)."""


def matmul_speed(device: str, size: int = MATMUL_SIZE, seconds: float = MATMUL_SECONDS) -> dict:
    """GFLOPS of a `size`^3 matmul in bf16 and in fp32 on `device`, timed side by side (bf16, fp32,
    bf16, fp32; each round runs at least one call and `seconds`, the best round of each kept).

    Returns `{"bf16_gflops", "fp32_gflops", "size", "threads", "cpu_capability", "compute_dtype",
    "reason"}` (CUDA: `device_name` and `total_memory_bytes` too) (GFLOPS = 2 size^3 / seconds / 1e9; `compute_dtype` and `reason` from
    `pipeline.calibration.precision.choose_compute_dtype` given this timing). bf16 that raises on the
    device (MPS before macOS 14) counts as 0 GFLOPS."""
    import torch

    from pipeline.calibration.precision import choose_compute_dtype

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
        elif device == "mps":
            torch.mps.synchronize()

    def one_round(dtype) -> float:
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        torch.matmul(a, b)  # warm-up: kernel selection, caches
        sync()
        calls, started = 0, time.perf_counter()
        while True:
            torch.matmul(a, b)
            calls += 1
            sync()
            elapsed = time.perf_counter() - started
            if elapsed >= seconds:
                return 2 * size**3 * calls / elapsed / 1e9

    best = {"bf16": 0.0, "fp32": 0.0}
    for _ in range(2):
        for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            try:
                best[name] = max(best[name], one_round(dtype))
            except (RuntimeError, TypeError):  # bf16 unsupported on this device
                best[name] = max(best[name], 0.0)
    out = {"bf16_gflops": round(best["bf16"], 2), "fp32_gflops": round(best["fp32"], 2), "size": size,
           "threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if device == "cuda":  # the GPU's name and memory complete the device key (pipeline.calibration.store)
        out["device_name"] = torch.cuda.get_device_name()
        out["total_memory_bytes"] = int(torch.cuda.get_device_properties(0).total_memory)
    elif device == "mps":
        out["device_name"] = "Apple MPS"
    out["compute_dtype"], out["reason"] = choose_compute_dtype(device, out)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from pipeline.host.cpu_threads import apply_threads, trainer_threads

    apply_threads(trainer_threads())
    print(json.dumps(matmul_speed(argv[0] if argv else "cpu")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
