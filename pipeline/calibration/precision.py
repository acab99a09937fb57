"""The compute precision each device runs fast, and why (torch-free; the timed check is `speed.py`).

bf16 halves the bytes of every unquantized weight, activation and logit, but it is fast only where
the hardware multiplies bf16 natively: on x86 CPUs with AVX512_BF16 or AMX (recent Xeons, AMD Zen 4
and later), on ARM CPUs with the BF16 extension, on CUDA GPUs from Ampere on, and on Apple MPS from
macOS 14 (older systems raise on bf16). Elsewhere PyTorch emulates it: on an AVX2 CPU a 1024x1024
bf16 matmul ran at 0.7 GFLOPS against 54 GFLOPS in fp32 and a mid-size Gemma 3n forward took 4.3x
as long (FIELD_NOTES "Devices"). So:

  * a capability says whether bf16 is a candidate (`bf16_capable`: the CPU's flags, macOS's version);
  * the calibration's timed matmul check (`pipeline.calibration.speed`, stored with this machine's
    key) confirms it: bf16 is kept only if it runs at least `BF16_MIN_SPEED_RATIO` of fp32's speed;
  * `TUTOR_COMPUTE_DTYPE` (bfloat16 | float32) overrides both.

`choose_compute_dtype(device)` gives (dtype name, reason); `compute_dtype_name(device)` is its dtype, the
one decision the trainer (`pipeline.model.loading.compute_dtype`, as a torch dtype) and the memory
estimate (every term of `pipeline.memory.terms`) both read, so the estimate prices what runs.
"""

from __future__ import annotations

import functools
import os
import platform

COMPUTE_DTYPE_ENV = "TUTOR_COMPUTE_DTYPE"
"""Override: `bfloat16` or `float32` on every device."""
DTYPES = ("bfloat16", "float32")
BF16_MIN_SPEED_RATIO = 0.8
"""bf16 is kept when its timed matmul reaches at least this fraction of fp32's GFLOPS: at equal speed
bf16 wins (half the memory); an emulated bf16 runs at 1-10 % of fp32's speed, far below."""
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""x86 /proc/cpuinfo flags of native bf16 matmuls (oneDNN uses them); ARM's is `bf16` in `Features`."""
MPS_BF16_MACOS = 14
"""bf16 on Apple MPS needs macOS 14 (Sonoma) or newer (PyTorch raises on older systems)."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo `flags` on x86, `Features` on ARM; empty where unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def bf16_capable(device: str) -> tuple[bool, str]:
    """Whether `device` has native bf16, and the evidence in words. CPU: `CPU_BF16_FLAGS` (x86) or ARM's
    `bf16` feature; an Apple silicon CPU (no /proc) counts as capable (ARMv8.6 BF16 on M2 and later, and
    the timed check decides). MPS: macOS >= `MPS_BF16_MACOS` (asked from another system: a Mac on a
    current macOS is assumed). CUDA: assumed (Ampere and later; the
    trainer asks `torch.cuda.is_bf16_supported()`)."""
    if device == "cuda":
        return True, "CUDA GPUs from Ampere on multiply bf16 natively"
    if device == "mps":
        if platform.system() != "Darwin":  # asked about a Mac from another machine
            return True, f"a Mac on macOS {MPS_BF16_MACOS} or newer is assumed (bf16 runs on MPS there)"
        release = platform.mac_ver()[0]
        major = int(release.split(".")[0]) if release.split(".")[0].isdigit() else 0
        if major >= MPS_BF16_MACOS:
            return True, f"macOS {release} runs bf16 on MPS"
        return False, f"bf16 on MPS needs macOS {MPS_BF16_MACOS} or newer (this is {release or 'not macOS'})"
    flags = cpu_flags()
    native = sorted(f for f in flags if f in CPU_BF16_FLAGS) + (["bf16"] if "bf16" in flags else [])
    if native:
        return True, f"the CPU has native bf16 ({', '.join(native)})"
    if not flags and platform.system() == "Darwin" and platform.machine() == "arm64":
        return True, "Apple silicon CPU (bf16 checked by timing)"
    simd = "AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return False, f"the CPU has no native bf16 ({simd} only), where bf16 is emulated and slow"


def choose_compute_dtype(device: str, speed: dict | None = None) -> tuple[str, str]:
    """(dtype name, reason) for `device`: `TUTOR_COMPUTE_DTYPE` if set; else fp32 where bf16 is not a
    candidate (`bf16_capable`); else bf16 unless the timed check `speed` (`pipeline.calibration.speed.
    matmul_speed`'s dict, from this machine's calibration when None is given) measured it below
    `BF16_MIN_SPEED_RATIO` of fp32. Never fp16 (Gemma 3n's activations overflow it, FIELD_NOTES "dtype").
    Raises `ConfigError` for an override that is not bfloat16 or float32."""
    override = os.environ.get(COMPUTE_DTYPE_ENV, "").strip()
    if override:
        if override not in DTYPES:
            from pipeline.errors import ConfigError  # noqa: PLC0415

            raise ConfigError(f"`{COMPUTE_DTYPE_ENV}` must be bfloat16 or float32, got {override!r}; unset it to let "
                              "each device pick what it runs fast.")
        return override, f"{COMPUTE_DTYPE_ENV}={override}"
    capable, why = bf16_capable(device)
    if not capable:
        return "float32", f"fp32: {why}"
    if speed is None and device != "cuda":
        from pipeline.calibration.store import entry_for  # noqa: PLC0415

        try:
            entry = entry_for(device)
        except Exception:  # noqa: BLE001 - an unreadable file is reported by the estimate, not here
            entry = None
        speed = (entry or {}).get("speed")
    if speed and speed.get("bf16_gflops") and speed.get("fp32_gflops"):
        ratio = speed["bf16_gflops"] / speed["fp32_gflops"]
        if ratio < BF16_MIN_SPEED_RATIO:
            return "float32", (f"fp32: {why}, but bf16 ran at {ratio:.0%} of fp32's speed in this machine's check "
                               f"({speed['bf16_gflops']:.1f} against {speed['fp32_gflops']:.1f} GFLOPS)")
        return "bfloat16", (f"bf16: {why}; confirmed by this machine's check ({speed['bf16_gflops']:.1f} against "
                            f"{speed['fp32_gflops']:.1f} GFLOPS in fp32): half the memory at the same speed")
    here = device == "cpu" or (device == "mps" and platform.system() == "Darwin")  # else it is asked about another machine
    return "bfloat16", f"bf16: {why} (half the memory of fp32{'; not yet timed on this machine' if here else ''})"


def compute_dtype_name(device: str, override: str | None = None) -> str:
    """The compute dtype on `device` (`bfloat16` | `float32`): the dtype of the frozen unquantized
    weights, the activations and the logits, as the trainer runs them and the estimate prices them.
    `override` when given (an estimate pricing another dtype: `pipeline.memory.inputs.EstimateOptions.
    compute_dtype`), else `choose_compute_dtype(device)`'s, cached per (device, `TUTOR_COMPUTE_DTYPE`,
    calibration file version): the memory estimate asks for it in every term of every layer.
    Raises `ConfigError` for a `TUTOR_COMPUTE_DTYPE` that is not bfloat16 or float32."""
    if override:
        return override
    from pipeline.calibration.store import calibration_path  # noqa: PLC0415

    path = calibration_path()
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = 0
    return _cached_dtype(device, os.environ.get(COMPUTE_DTYPE_ENV, ""), str(path), stamp)


@functools.lru_cache(maxsize=64)
def _cached_dtype(device: str, override: str, path: str, stamp: int) -> str:
    return choose_compute_dtype(device)[0]
