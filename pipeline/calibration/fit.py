"""From a machine's stored evidence to the device's terms of the memory estimate (torch-free).

The estimate (`pipeline.memory.phases.estimate_memory`) is structural terms (weights, LoRA,
gradients, optimizer, activations, logits, audio encoder: formulas with their sources) plus what
the device adds (`DEVICE_TERMS`): the runtime overhead (the process and its libraries, or the CUDA
context), the heap the allocator keeps resident (`allocator_retention` and the run's spread of it,
glibc on CPU) and the kernels cached per batch shape (`cpu_kernel_cache`, oneDNN on CPU). Only
those are calibrated. Each measurement (a probe step, or a phase of a finished run) is stored as its
measured peak next to the estimate's structural part S and device parts O, R, K for the same
settings (`measurement_record`); the fit reads

    measured = S + overhead + retention_scale x R + kernel_cache_scale x K + spread_scale x P

(P: the run's heap spread, `cpu_heap_run_spread`, in a run's step and preflight only)

  1. `runtime_overhead_bytes`: the median over probe steps (where K = 0) of measured - S - R; with no
     probe yet, over every record, of measured - S - R - K;
  2. `retention_scale`: with probe steps whose R differs by more than `RETENTION_SPREAD_BYTES`, the
     least-squares slope of measured - S against R (the overhead its intercept), in [0, `MAX_SCALE`];
     otherwise 1 (the default calibration record's coefficients, `pipeline.calibration.store.device_defaults`);
  3. `kernel_cache_scale`: the median, in [0, `MAX_SCALE`], over the records with K >=
     `MIN_KERNEL_CACHE_BYTES` of: measured / K for a probe's measured growth over new batch shapes
     (`kind` kernel_cache, `pipeline.training.probe.kernel_cache_growth`), and
     (measured - S - overhead - retention_scale x R - P) / K for a run's phase; otherwise 1;
  4. `spread_scale`: with at least `MIN_SPREAD_RECORDS` run phases whose P >= `MIN_SPREAD_BYTES`, the
     largest over them, in [0, `MAX_SCALE`], of (measured - S - overhead - retention_scale x R -
     kernel_cache_scale x K) / P: a run's peak is its largest micro-batch, so the spread is fitted to
     the top of this machine's runs, not their middle; otherwise 1 (the default record's safe-side
     `cpu_heap_retention_run_spread`). Records stored before the spread had
     its own part count it in R.

Uncalibrated, the device terms are the default calibration record's (`pipeline.calibration.store.
device_defaults`, measured on the development CPU), and the estimate says how far off they may be
(`uncalibrated_percent`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from pipeline.units import plural

DEVICE_TERMS = {
    "overhead": ("runtime_overhead",),
    "retention": ("allocator_retention", "eval_allocator_retention"),
    "spread": ("cpu_heap_run_spread",),
    "kernel_cache": ("cpu_kernel_cache",),
}
"""Components of `pipeline.memory.phases.MemoryEstimate` that the device adds, by what scales them."""
RETENTION_SPREAD_BYTES = 64 * 2**20
MIN_KERNEL_CACHE_BYTES = 16 * 2**20
MIN_SPREAD_BYTES = 32 * 2**20
MIN_SPREAD_RECORDS = 2
"""The run spread is fitted from at least this many run phases whose priced spread is at least
`MIN_SPREAD_BYTES` (a smaller one drowns in the runtime overhead's own run-to-run noise)."""
MAX_SCALE = 3.0
"""A fitted scale beyond 3x the measured constants means the evidence is not what the model says it is."""
UNCALIBRATED_UNCERTAINTY = {"overhead": 0.15, "retention": 1.0, "spread": 1.0, "kernel_cache": 1.0}
"""Relative error assumed for each uncalibrated device part on CPU, for `uncalibrated_percent`: the CPU's
runtime baseline was 900 MiB on the development CPU (torch 2.14.1 stack) and differs with the libraries
and the allocator (15 %); the heap glibc keeps follows the CPU, the compute dtype and the settings (up
to its own size: on a second CPU computing in fp32, an AMD EPYC, 2026-12-01, a mid-size 4-bit step
with checkpointing over 2 x 512 tokens kept 0.42 GiB more than the dtype-scaled term's 0.56 GiB; other
rows there were within a fifth of it); the kernel caches follow the CPU and its oneDNN build (on that
EPYC a new batch shape left 0.4-0.5 MiB where the constants, measured with oneDNN's bf16 kernels, say
19.5 MiB)."""

UNMEASURED_DEVICE_UNCERTAINTY = {"overhead": 0.5, "structural": 0.05}
"""On CUDA and MPS, which this project has not measured: the runtime overhead is a figure from public
reports (CUDA context and kernels: 0.3-1 GiB by GPU, driver and lazy loading), so 50 %; and the
allocator's slack (the caching allocator reserves whole blocks: `max_memory_reserved` exceeds the live
tensors) is not modelled, so 5 % of the rest is added to the band."""


def device_parts(components: dict, members: list[str]) -> dict[str, int]:
    """Bytes of `members` (components alive at one phase's peak) by device part (`DEVICE_TERMS`), and
    `structural`: the rest."""
    parts = {part: sum(int(components.get(n, 0)) for n in names if n in members) for part, names in DEVICE_TERMS.items()}
    parts["structural"] = sum(int(components.get(n, 0)) for n in members) - sum(parts.values())
    return parts


@dataclass
class DeviceCalibration:
    """What one machine's calibration says about its device's terms.

    Attributes:
        device_key: `pipeline.calibration.store.device_key`'s dict.
        date: the latest evidence's date (ISO 8601 UTC).
        n_measurements: probe steps and run phases fitted.
        runtime_overhead_bytes: the device's runtime overhead (bytes), replacing the constant.
        retention_scale, kernel_cache_scale: factors on the heap-retention and kernel-cache terms.
        spread_scale: factor on the run's heap spread (`cpu_heap_run_spread`), from this machine's runs.
        max_error_percent: the largest |residual| of the fitted records, as % of their measured peak.
        compute_dtype, compute_dtype_reason: the precision this device runs (`precision.choose_compute_dtype`).
        speed: the timed matmul check (`speed.matmul_speed`), or None.
    """

    device_key: dict
    date: str
    n_measurements: int
    runtime_overhead_bytes: int | None = None
    retention_scale: float = 1.0
    kernel_cache_scale: float = 1.0
    spread_scale: float = 1.0
    max_error_percent: float | None = None
    compute_dtype: str | None = None
    compute_dtype_reason: str | None = None
    speed: dict | None = field(default=None)
    folders: list = field(default_factory=list)
    """The project folder (workspace) each piece of evidence was measured in, None where not recorded (older records
    or the stand-in's probes): the calibration is this computer's, shared by its project folders."""

    def to_dict(self) -> dict:
        return asdict(self)

    def within_percent(self) -> int:
        """How far the calibrated figures may be off, in whole % (the one figure every screen shows): the fit's
        largest residual (`max_error_percent`) rounded up, at least 1 (1 when no residual is known)."""
        return max(1, math.ceil(self.max_error_percent or 1))

    def text(self) -> str:
        """"calibrated on this machine on DATE (N measurements), each within N % after the fit" (`within_percent`)."""
        out = f"calibrated on this machine on {self.date[:10]} ({plural(self.n_measurements, 'measurement')})"
        if self.max_error_percent is not None:
            out += f", each within {self.within_percent()} % after the fit"
        return out


def _clip(value: float) -> float:
    return min(MAX_SCALE, max(0.0, value))


def _beyond_retention(record: dict, overhead: float, retention_scale: float) -> float:
    """What a record measured beyond its structural part, the overhead and its scaled retention (bytes)."""
    return record["measured_bytes"] - record["structural"] - overhead - retention_scale * record["retention"]


def fit_entry(entry: dict) -> DeviceCalibration | None:
    """The `DeviceCalibration` of a stored entry (see the module docstring); None without measurements."""
    every = [r for r in entry.get("measurements", []) if r.get("measured_bytes") is not None]
    records = [r for r in every if r.get("kind") != "kernel_cache"]  # peaks; the cache growths are no peak
    if not every:
        return None
    probes = [r for r in records if r.get("kind") == "probe"]
    scale_r = 1.0
    if len(probes) >= 2 and max(r["retention"] for r in probes) - min(r["retention"] for r in probes) > RETENTION_SPREAD_BYTES:
        xs = [r["retention"] for r in probes]
        ys = [r["measured_bytes"] - r["structural"] for r in probes]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        scale_r = _clip(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs))
    if probes:
        overhead = statistics.median(r["measured_bytes"] - r["structural"] - scale_r * r["retention"] for r in probes)
    elif records:
        overhead = statistics.median(r["measured_bytes"] - r["structural"] - r["retention"] - r["kernel_cache"]
                                     - r.get("spread", 0) for r in records)
    else:
        overhead = None
    # kernel caches: measured growths directly (`kind` kernel_cache), and what a run's phase leaves beyond the rest
    ratios = [r["measured_bytes"] / r["kernel_cache"] for r in every
              if r.get("kind") == "kernel_cache" and r.get("kernel_cache", 0) >= MIN_KERNEL_CACHE_BYTES]
    if probes:
        ratios += [(_beyond_retention(r, overhead, scale_r) - r.get("spread", 0)) / r["kernel_cache"]
                   for r in records if r.get("kind") == "run" and r.get("kernel_cache", 0) >= MIN_KERNEL_CACHE_BYTES]
    scale_k = _clip(statistics.median(ratios)) if ratios else 1.0
    # the run's spread: what this machine's runs kept beyond everything else, at their largest
    spreads = [(_beyond_retention(r, overhead, scale_r) - scale_k * r.get("kernel_cache", 0)) / r["spread"]
               for r in records if r.get("kind") == "run" and r.get("spread", 0) >= MIN_SPREAD_BYTES] if probes else []
    scale_s = _clip(max(spreads)) if len(spreads) >= MIN_SPREAD_RECORDS else 1.0
    residuals = [abs(_beyond_retention(r, overhead, scale_r) - scale_k * r.get("kernel_cache", 0) - scale_s * r.get("spread", 0))
                 / r["measured_bytes"] * 100 for r in records] if overhead is not None else []
    speed = entry.get("speed")
    return DeviceCalibration(
        device_key=entry["key"], date=max(r.get("date", "") for r in every), n_measurements=len(every),
        runtime_overhead_bytes=int(max(0, overhead)) if overhead is not None else None, retention_scale=round(scale_r, 3),
        kernel_cache_scale=round(scale_k, 3), spread_scale=round(scale_s, 3), max_error_percent=round(max(residuals), 1) if residuals else None,
        compute_dtype=(speed or {}).get("compute_dtype"), compute_dtype_reason=(speed or {}).get("reason"), speed=speed,
        folders=[r.get("workspace") for r in every])


def uncalibrated_percent(components: dict, members: list[str], total_bytes: int, device: str = "cpu") -> int:
    """How far an uncalibrated estimate may be off, in % of `total_bytes` (rounded up): the device parts
    of its peak phase (`members`) times their assumed relative error (`UNCALIBRATED_UNCERTAINTY`; on
    `device` cuda or mps, `UNMEASURED_DEVICE_UNCERTAINTY` for the overhead and the structural share)."""
    if total_bytes <= 0:
        return 0
    parts = device_parts(components, members)
    uncertainty = dict(UNCALIBRATED_UNCERTAINTY, structural=0.0)
    if device in ("cuda", "mps"):
        uncertainty.update(UNMEASURED_DEVICE_UNCERTAINTY)
    spread = sum(uncertainty[p] * parts[p] for p in (*DEVICE_TERMS, "structural"))
    return max(1, math.ceil(100 * spread / total_bytes))


def uncalibrated_text(percent: int) -> str:
    """"not calibrated: the device's share is assumed, expect up to ±N %"."""
    return f"not calibrated: the device's share is assumed, expect up to ±{percent} %"
