"""Peak memory of the training process, per phase of the run, as each backend reports it; what to do
after running out.

A run goes through phases (`RUN_PHASES`: load, preflight, step, eval, save, resume; the memory
estimate, `pipeline.memory.run_phases`, uses the same names). `PhaseMemory` resets the backend's
peak counter when a phase begins and reads it when the phase ends, so each phase has its own peak
and the whole run's peak is the largest of them. Counters (FIELD_NOTES "Memory"):

  * CPU (Linux): the resident-set high-water mark `VmHWM` of /proc/self/status, reset at each
    phase change by writing 5 to /proc/self/clear_refs (Linux >= 4.0, allowed for one's own
    process). Exact: the kernel updates it on every page fault, so no spike is missed. Where
    clear_refs cannot be written (macOS, a locked-down /proc), `getrusage` `ru_maxrss` is read
    instead; it cannot be reset, so only the phase during which it rose gets an exact figure and
    the others get the larger of their start and end RSS (a lower bound; `exact` says which).
  * CUDA: `torch.cuda.max_memory_reserved` (what the caching allocator took from the device: what
    runs out) and `max_memory_allocated` (live tensors), both reset per phase with
    `reset_peak_memory_stats`; the host's RSS is recorded beside them.
  * Apple MPS: `torch.mps.driver_allocated_memory` has no peak counter; it is sampled at every
    phase change and after every micro-batch (`sample`), a lower bound of the true peak.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

import torch

from pipeline.config import TrainConfig
from pipeline.host.allocator import running_allocator
from pipeline.host.free_heap import release_free_heap

RUN_PHASES = ("load", "preflight", "step", "eval", "save", "resume")
"""The phases of a training process: `load` (process start, model, quantization, LoRA), `preflight`
(one forward+backward on the worst-case batch), `step` (optimizer steps), `eval` (evaluation on the
eval split), `save` (checkpoints and the final adapter), `resume` (reading a checkpoint back)."""


# --------------------------------------------------------------------------------------------------
# Counters


def _proc_status() -> dict[str, int]:
    """Byte values of /proc/self/status's `Vm*` / `Rss*` lines ({} where there is no /proc)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.startswith(("Vm", "Rss")) and value.strip().endswith("kB"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def _ru_maxrss_bytes() -> int:
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


def rss_bytes() -> int:
    """Current resident set size of this process (bytes): /proc/self/statm, else psutil, else 0."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except ImportError:
            return 0


def reset_rss_peak() -> bool:
    """Reset this process's RSS high-water mark VmHWM to the current RSS (Linux `clear_refs` 5);
    False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def rss_peak_bytes() -> int:
    """RSS high-water mark (bytes): VmHWM (resettable with `reset_rss_peak`) on Linux, else `ru_maxrss`."""
    return _proc_status().get("VmHWM") or _ru_maxrss_bytes()


def reset_peak_memory(device: str) -> None:
    """Reset the peak-memory counters where the backend allows it (CUDA; CPU VmHWM on Linux). On CPU the
    C heap's free memory is handed back first (`pipeline.host.free_heap`), as the trainer does
    before every micro-batch, so the high-water mark starts from live memory."""
    if device == "cpu":
        release_free_heap()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    reset_rss_peak()


def peak_memory_bytes(device: str) -> int:
    """Peak memory in bytes since the last `reset_peak_memory`: CUDA `max_memory_reserved`, MPS
    `driver_allocated_memory` (current: MPS has no peak counter), CPU the resident-set high-water mark
    (`rss_peak_bytes`). Source of the choice of counters: FIELD_NOTES "Memory"."""
    if device == "cuda":
        return int(torch.cuda.max_memory_reserved())
    if device == "mps":
        return int(torch.mps.driver_allocated_memory())
    return rss_peak_bytes()


def memory_kind(device: str) -> str:
    """Which counter `peak_memory_bytes` reads on `device`."""
    return {"cuda": "cuda_max_memory_reserved", "mps": "mps_driver_allocated_memory"}.get(device, "cpu_max_rss")


# --------------------------------------------------------------------------------------------------
# Per-phase peaks


class PhaseMemory:
    """The peak memory of each phase of a training process (see the module docstring for the counters).

    `enter(phase)` ends the current phase (its peak is read and kept, the largest over repeated
    visits: every evaluation is one visit of `eval`) and starts `phase` with fresh counters;
    `during(phase)` is a context manager that returns to the previous phase afterwards;
    `sample()` reads a current figure into the open phase (MPS, and CPU without a resettable
    high-water mark). `to_dict()` is what the run writes into progress.jsonl and result.json.
    """

    def __init__(self, device: str):
        self.device = device
        self.phase: str | None = None
        self.peaks: dict[str, int] = {}
        self.details: dict[str, dict[str, int]] = {}
        self.exact: dict[str, bool] = {}
        self._resettable = device != "mps" and reset_rss_peak()
        self._maxrss_at_start = _ru_maxrss_bytes()
        self._sampled = 0

    @property
    def method(self) -> str:
        """How the peaks were measured, in words (shown next to them)."""
        if self.device == "cuda":
            return ("CUDA torch.cuda.max_memory_reserved per phase (max_memory_allocated and the host's RSS "
                    "recorded beside it)")
        if self.device == "mps":
            return "MPS torch.mps.driver_allocated_memory sampled at each phase change and micro-batch (a lower bound)"
        if self._resettable:
            return "CPU resident set high-water mark (VmHWM), reset per phase through /proc/self/clear_refs"
        return ("CPU getrusage ru_maxrss (not resettable: exact for the phase that set it, the others are the larger "
                "of their start and end RSS)")

    def _read(self) -> tuple[int, dict[str, int], bool]:
        """(peak of the open phase so far, details, exact)."""
        status = _proc_status()
        details = {k: v for k, v in (("rss_anon_bytes", status.get("RssAnon")), ("rss_file_bytes", status.get("RssFile")),
                                     ("rss_bytes", status.get("VmRSS"))) if v is not None}
        if self.device == "cuda":
            details.update(cuda_max_memory_allocated=int(torch.cuda.max_memory_allocated()),
                           cuda_max_memory_reserved=int(torch.cuda.max_memory_reserved()),
                           host_peak_rss_bytes=rss_peak_bytes())
            return details["cuda_max_memory_reserved"], details, True
        if self.device == "mps":
            current = int(torch.mps.driver_allocated_memory())
            self._sampled = max(self._sampled, current)
            details["mps_driver_allocated_memory"] = current
            return self._sampled, details, False
        if self._resettable:
            return status.get("VmHWM", 0), details, True
        maxrss = _ru_maxrss_bytes()
        current = rss_bytes()
        self._sampled = max(self._sampled, current)
        if maxrss > self._maxrss_at_start:
            return maxrss, details, True
        return self._sampled, details, False

    def sample(self) -> None:
        """Read the counters into the open phase now (needed where the backend keeps no peak)."""
        if self.phase is not None and (self.device == "mps" or not self._resettable):
            self._read()

    def _close(self) -> None:
        if self.phase is None:
            return
        peak, details, exact = self._read()
        if peak >= self.peaks.get(self.phase, -1):
            self.details[self.phase] = details
            self.exact[self.phase] = exact
        self.peaks[self.phase] = max(peak, self.peaks.get(self.phase, 0))

    def enter(self, phase: str) -> None:
        """End the open phase (keeping its peak) and start `phase` with the counters reset; on CPU the C
        heap's free memory is handed back first (`pipeline.host.free_heap`), so the phase's peak is
        its own."""
        if phase not in RUN_PHASES:
            raise ValueError(f"unknown run phase {phase!r}; expected one of {RUN_PHASES}")
        self._close()
        if self.device == "cuda":
            torch.cuda.synchronize()
        reset_peak_memory(self.device)  # on CPU from live memory: the free heap is handed back first
        self._maxrss_at_start = _ru_maxrss_bytes()
        self._sampled = rss_bytes() if self.device == "cpu" else 0
        self.phase = phase
        self.sample()

    @contextmanager
    def during(self, phase: str) -> Iterator[None]:
        """Record the enclosed code as `phase`, then continue the phase that was open before."""
        previous = self.phase
        self.enter(phase)
        try:
            yield
        finally:
            self.enter(previous) if previous is not None else self._close()

    def current(self) -> dict[str, int]:
        """Phase -> peak bytes so far, the open phase included (without ending it)."""
        peaks = dict(self.peaks)
        if self.phase is not None:
            peak, _, _ = self._read()
            peaks[self.phase] = max(peak, peaks.get(self.phase, 0))
        return peaks

    def to_dict(self) -> dict:
        """`{"phase_peak_bytes": {phase: bytes}, "peak_phase", "peak_bytes", "method", "memory_kind",
        "allocator", "exact": {phase: bool}, "details": {phase: counters at that phase's peak visit}}`,
        phases in `RUN_PHASES` order, the open phase included; `allocator` is the C allocator this
        process runs on (`pipeline.host.allocator.running_allocator`: "tcmalloc" or "glibc")."""
        peaks = self.current()
        ordered = {p: peaks[p] for p in RUN_PHASES if p in peaks}
        peak_phase = max(ordered, key=ordered.get) if ordered else None
        return {
            "phase_peak_bytes": ordered,
            "peak_phase": peak_phase,
            "peak_bytes": ordered.get(peak_phase, 0) if peak_phase else 0,
            "method": self.method,
            "memory_kind": memory_kind(self.device),
            "allocator": running_allocator(),
            "exact": {p: self.exact.get(p, p == self.phase and self.device != "mps") for p in ordered},
            "details": {p: self.details[p] for p in RUN_PHASES if p in self.details},
        }


# --------------------------------------------------------------------------------------------------
# Out of memory


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
        tips.append("--lora-targets language (LoRA in the audio encoder costs memory that grows with the clip length)")
    tips.append("a lower --max-length, rebuilding the dataset so long rows are excluded")
    tips.append("`python -m pipeline estimate` to see what fits this device")
    return tips


# --------------------------------------------------------------------------------------------------
# Evidence for the calibration


def record_run_memory(result: dict, log) -> int:
    """Add a finished run's measured phases to this machine's calibration (`pipeline.calibration.record_run`:
    completed or stopped runs only, each phase beside its uncalibrated estimate). A calibration file that
    cannot be written never fails the run: the reason is logged as a warning. Returns the records added."""
    from pipeline.calibration.this_machine import record_run  # noqa: PLC0415
    from pipeline.errors import PipelineError  # noqa: PLC0415

    device_name = total = None
    if result.get("device") == "cuda" and torch.cuda.is_available():
        device_name, total = torch.cuda.get_device_name(), int(torch.cuda.get_device_properties(0).total_memory)
    try:
        return record_run(result, device_name, total)
    except (OSError, PipelineError) as error:
        log.warning("The run's memory was not added to the calibration: %s", error)
        return 0
