"""The device's side: how much memory there is (CUDA free memory, Apple's recommended working set,
available RAM), how much of it a run may use after headroom, and the verdict (fits / tight / does
not fit) of an estimate against that budget. torch is imported only to ask a CUDA or MPS device.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from pipeline.errors import ConfigError
from pipeline.units import GIB, MIB

# Verdict thresholds as fractions of the usable budget. Below FIT_FRACTION the run "fits" with a
# margin larger than this model's worst measured error (see benchmarks/memory_accuracy.py);
# between FIT_FRACTION and 1.0 it is "tight"; above 1.0 it "does not fit".
FIT_FRACTION = 0.90


# --------------------------------------------------------------------------------------------------
# Device memory and headroom


@dataclass
class DeviceMemory:
    """Memory of a device (bytes): `total`, `free` (now), `usable` (budget after headroom) and
    `headroom_note` saying how much is left to the OS and why."""

    device: str
    total_bytes: int
    free_bytes: int
    usable_bytes: int
    headroom_note: str
    source: str

    def to_dict(self) -> dict:
        return asdict(self)


def usable_budget(device: str, total_bytes: int, free_bytes: int) -> tuple[int, str]:
    """The usable budget after headroom, and why.

    * cuda: free memory minus 256 MiB: the GPU is ours, but display servers and the allocator's
      last partial block need a little (the CUDA context is in the estimate's runtime overhead).
    * mps: min(recommended_max_memory, total - 4 GiB): Metal's recommended working set already
      leaves ~25 % of unified memory to macOS; apps in use need a few GiB more.
    * cpu: free (MemAvailable) minus max(2 GiB, 10 % of total): the desktop, browser running the
      app and the page cache need room, or the machine swaps instead of failing cleanly.

    The reason states the rule, not its figure in bytes: the screen shows what is kept back as the
    difference of the two figures it shows (`pipeline.units.gib_minus`), and a second figure for it,
    rounded apart, could read 0.01 GiB off.
    """
    if device == "cuda":
        return max(0, free_bytes - 256 * MIB), "0.25 GiB left for the display and allocator block rounding"
    if device == "mps":
        return max(0, min(free_bytes, total_bytes - 4 * GIB)), "4 GiB of unified memory left to macOS and open apps"
    headroom = max(2 * GIB, int(0.10 * total_bytes))
    return max(0, free_bytes - headroom), "10 % of RAM, at least 2 GiB, left to the OS and open apps"


def _proc_meminfo() -> tuple[int, int]:
    info = {}
    with open("/proc/meminfo", encoding="ascii") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            info[key] = int(rest.split()[0]) * 1024
    return info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0))


MAX_MEMORY_GB = 4096.0
"""The largest budget `--memory-gb` takes (4 TiB, beyond any single machine's accelerator or RAM): a
larger figure is a typo (e.g. bytes typed as GiB), refused rather than answered "fits"."""


def device_memory(device: str, memory_gb: float | None = None) -> DeviceMemory:
    """Total, free and usable memory of `device` (`cpu`, `cuda`, `mps`).

    `memory_gb` overrides the device's size in GB as the OS reports it, i.e. GiB (N x 1024**3
    bytes: a "48 GB" laptop shows 48 GiB of RAM), and treats all of it as free, to ask "would
    this fit on a 48 GB laptop?". CUDA: `torch.cuda.mem_get_info`;
    MPS: `torch.mps.recommended_max_memory` and total RAM; CPU: psutil if installed, else
    /proc/meminfo MemAvailable. `memory_gb` 0 means the device's own figures. Raises `ConfigError`
    when the device is not available or `memory_gb` is not a number of GiB in [0, `MAX_MEMORY_GB`].
    """
    if memory_gb is not None and memory_gb == 0:
        memory_gb = None  # 0: what the device reports (the app's Memory budget field says the same)
    if memory_gb is not None:
        if not math.isfinite(memory_gb) or memory_gb < 0 or memory_gb > MAX_MEMORY_GB:
            raise ConfigError(f"`--memory-gb` must be a number of GiB between 0 and {MAX_MEMORY_GB:g} (e.g. 16 for a "
                              f"16 GB machine; 0 uses what the device reports), got {memory_gb:g}.")
        total = free = int(memory_gb * GIB)
        source = f"--memory-gb {memory_gb:g} (GiB)"
    elif device == "cuda":
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            raise ConfigError("`--device cuda` but no CUDA GPU is visible; use --device cpu or --memory-gb N.")
        free, total = torch.cuda.mem_get_info()
        source = f"torch.cuda.mem_get_info ({torch.cuda.get_device_name()})"
    elif device == "mps":
        import torch  # noqa: PLC0415

        if not torch.backends.mps.is_available():
            raise ConfigError("`--device mps` but Apple MPS is not available; use --device cpu or --memory-gb N.")
        total = _ram()[0]
        free = int(torch.mps.recommended_max_memory())
        source = "torch.mps.recommended_max_memory"
    elif device == "cpu":
        total, free = _ram()
        source = "psutil.virtual_memory" if _has_psutil() else "/proc/meminfo"
    else:
        raise ConfigError(f"`--device` must be cpu, cuda or mps, got {device!r}.")
    usable, note = usable_budget(device, total, free)
    return DeviceMemory(device, int(total), int(free), int(usable), note, source)


def _has_psutil() -> bool:
    try:
        import psutil  # noqa: F401, PLC0415

        return True
    except ImportError:
        return False


def _ram() -> tuple[int, int]:
    try:
        import psutil  # noqa: PLC0415

        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)
    except ImportError:
        return _proc_meminfo()


def auto_device() -> str:
    """The device `--device auto` trains on: cuda, then mps, then cpu (cpu when torch is absent)."""
    try:
        import torch  # noqa: PLC0415

        if torch.cuda.is_available():
            return "cuda"
        if torch.backends.mps.is_available():
            return "mps"
    except ImportError:
        pass
    return "cpu"


# --------------------------------------------------------------------------------------------------
# Verdict


@dataclass
class Verdict:
    """`status` is `fits`, `tight` or `does not fit`; `margin_bytes` = usable - total (negative when
    it does not fit) and `margin_percent` of the usable budget."""

    status: str
    margin_bytes: int
    margin_percent: float

    def to_dict(self) -> dict:
        return asdict(self)


def verdict(total_bytes: int, usable_bytes: int) -> Verdict:
    """fits when total <= FIT_FRACTION x usable (a margin above our measured error), tight when
    total <= usable, else does not fit."""
    margin = usable_bytes - total_bytes
    pct = 100.0 * margin / usable_bytes if usable_bytes > 0 else -100.0
    if usable_bytes > 0 and total_bytes <= FIT_FRACTION * usable_bytes:
        status = "fits"
    elif total_bytes <= usable_bytes:
        status = "tight"
    else:
        status = "does not fit"
    return Verdict(status, int(margin), round(pct, 1))
