"""`pipeline.calibration.speed`: the timed bf16-against-fp32 matmul check a calibration runs (here
in-process and tiny; a calibration runs it in a child process at 512^3)."""

from __future__ import annotations

from pipeline.calibration.speed import matmul_speed


def test_the_timed_check_reports_both_speeds_and_the_dtype_it_implies():
    speed = matmul_speed("cpu", size=64, seconds=0.01)
    assert {"bf16_gflops", "fp32_gflops", "size", "threads", "cpu_capability", "compute_dtype", "reason"} <= set(speed)
    assert speed["size"] == 64 and speed["threads"] >= 1
    # GFLOPS rounded to 0.01: a tiny check on a busy machine may round to 0, never below
    assert isinstance(speed["fp32_gflops"], float) and speed["fp32_gflops"] >= 0 and speed["bf16_gflops"] >= 0
    assert speed["compute_dtype"] in ("bfloat16", "float32") and speed["reason"]
