"""Where a machine's calibration lives and what it is keyed by (torch-free).

One JSON file per user, `calibration.json` in `calibration_dir()` (`$TUTOR_CALIBRATION_DIR`, else
`$XDG_CACHE_HOME/pronunciation-tutor`, else `~/.cache/pronunciation-tutor`), shared by every
workspace on the machine. It holds one entry per device key (`device_key`): the device kind and
name, its total memory, the CPU model and the torch / transformers / bitsandbytes versions, i.e.
what changes the memory a device adds and the speed it runs at. Each entry keeps its raw evidence
(`measurements`: probe steps and finished runs; `speed`: the bf16 / fp32 matmul check; `step_seconds` and
`load_seconds`: how long steps and loading took here),
and `pipeline.calibration.fit` turns the evidence into the device's terms when an estimate asks.

Writes are atomic (`pipeline.fileio.atomic_write_json`): a failed or interrupted write leaves the
previous file whole. An unreadable file is never overwritten silently: `load_store` raises
`ConfigError` naming it and the fix.

Before a machine is calibrated its device terms come from the default calibration record shipped
with the code, `device_defaults.json` beside this module (`device_defaults`): the CPU runtime
overhead, oneDNN's kernel caches and glibc's retained heap as measured on one machine, each with its
dated lab note, and the overheads assumed for CUDA and MPS. The memory estimate's formulas price
with these values; `pipeline.calibration.fit` replaces or scales them with this machine's evidence.
"""

from __future__ import annotations

import functools
import json
import os
import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from pipeline.errors import ConfigError, in_words
from pipeline.fileio import atomic_write_json, locked
from pipeline.host.allocator import training_allocator

CALIBRATION_DIR_ENV = "TUTOR_CALIBRATION_DIR"
"""Environment variable that moves the calibration folder (tests point it at a temp dir)."""
CALIBRATION_FILE = "calibration.json"
STORE_VERSION = 1
MAX_MEASUREMENTS = 200
"""Evidence kept per device key (the oldest are dropped first): enough for years of runs, small on disk."""
KEY_FIELDS = ("device", "device_name", "total_memory_bytes", "cpu_model", "torch", "transformers", "bitsandbytes", "allocator")
"""What a device key holds, in order."""
MATCH_FIELDS = ("device", "cpu_model", "torch", "transformers", "bitsandbytes", "allocator")
"""The key fields an estimate can read without torch; an entry matches this machine on these (and, on
CPU, the total RAM), the GPU's name and memory being recorded for the reader. `allocator` is the C
allocator training processes run on (`pipeline.host.allocator.training_allocator`): what a step
keeps resident and how fast it runs depend on it."""
KEY_DEFAULTS = {"allocator": "glibc"}
"""What a key field stored before it was recorded was: entries written before the allocator was part of
the key were glibc's."""


def calibration_dir() -> Path:
    """The per-user calibration folder: `$TUTOR_CALIBRATION_DIR`, else `$XDG_CACHE_HOME/pronunciation-tutor`,
    else `~/.cache/pronunciation-tutor` (the XDG base directory convention)."""
    override = os.environ.get(CALIBRATION_DIR_ENV)
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pronunciation-tutor"


def calibration_path() -> Path:
    """`calibration_dir() / calibration.json`."""
    return calibration_dir() / CALIBRATION_FILE


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo `model name` (Linux x86), `Model`/`Hardware` (ARM), else
    `platform.processor()`, else the machine architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            import subprocess  # noqa: PLC0415

            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5)
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def software_versions() -> dict[str, str]:
    """torch / transformers / bitsandbytes versions as installed (read from package metadata, no import)."""
    return {name: _version(name) for name in ("torch", "transformers", "bitsandbytes")}


def ram_total_bytes() -> int:
    """Total RAM in bytes (os.sysconf; 0 where unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def device_key(device: str, device_name: str | None = None, total_memory_bytes: int | None = None) -> dict:
    """The key a calibration is stored under: `KEY_FIELDS`. On CPU the device name is the CPU model
    and the memory the total RAM; a GPU's name and memory are given by the caller that asked torch
    (`pipeline.memory.calibrate.calibrate`), else "unknown" / 0."""
    cpu = cpu_model()
    if device == "cpu":
        device_name, total_memory_bytes = cpu, ram_total_bytes()
    return {"device": device, "device_name": device_name or "unknown", "total_memory_bytes": int(total_memory_bytes or 0),
            "cpu_model": cpu, **software_versions(), "allocator": training_allocator()}


def key_id(key: dict) -> str:
    """One string naming a device key (the entry's name in the file)."""
    gib = key.get("total_memory_bytes", 0) / 2**30
    allocator = key.get("allocator", KEY_DEFAULTS["allocator"])  # named only where it is not glibc: older names stand
    return (f"{key['device']} | {key['device_name']} | {gib:.1f} GiB | CPU {key['cpu_model']} | torch {key['torch']} | "
            f"transformers {key['transformers']} | bitsandbytes {key['bitsandbytes']}"
            + (f" | {allocator}" if allocator != KEY_DEFAULTS["allocator"] else ""))


def matches_this_machine(key: dict, device: str) -> bool:
    """Whether a stored key is this machine's `device` with today's software (`MATCH_FIELDS`; on CPU the
    total RAM too, within 1 %: the kernel reserves a little differently from boot to boot)."""
    here = device_key(device)
    if any(key.get(f, KEY_DEFAULTS.get(f)) != here[f] for f in MATCH_FIELDS):
        return False
    if device == "cpu":
        total = here["total_memory_bytes"]
        return abs(int(key.get("total_memory_bytes", 0)) - total) <= 0.01 * max(total, 1)
    return True


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def load_store(path: Path | None = None) -> dict:
    """The calibration file as a dict `{"version", "devices": {key_id: entry}}` ({} of devices when there
    is none). Raises `ConfigError` when the file exists but is not a calibration file (naming it and the fix)."""
    path = path or calibration_path()
    if not path.exists():
        return {"version": STORE_VERSION, "devices": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"The calibration file {path} cannot be read ({error}). Delete it and calibrate again "
                          f"(Memory tab, or `python -m pipeline estimate --measure`), or point {CALIBRATION_DIR_ENV} "
                          "at another folder.") from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
        raise ConfigError(f"{path} is not a calibration file (no `devices` object). Delete it and calibrate again, "
                          f"or point {CALIBRATION_DIR_ENV} at another folder.")
    return data


def entry_for(device: str, store: dict | None = None) -> dict | None:
    """The stored entry of this machine's `device` with today's software (`matches_this_machine`), the
    most recently updated if several match; None when it was never calibrated."""
    store = store if store is not None else load_store()
    found = [e for e in store["devices"].values() if matches_this_machine(e.get("key", {}), device)]
    return max(found, key=lambda e: e.get("updated", "")) if found else None


def update_entry(key: dict, change, path: Path | None = None) -> dict:
    """Read the file, apply `change(entry)` to the entry of `key` (created empty if absent), stamp it and
    write the file atomically, all under the file's lock (`pipeline.fileio.locked`, across processes).
    Returns the updated entry."""
    path = path or calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path):  # two workspaces' runs finishing at once both keep their figures
        store = load_store(path)
        name = key_id(key)
        entry = store["devices"].setdefault(name, {"key": key, "measurements": [], "speed": None, "step_seconds": []})
        entry["key"] = key
        change(entry)
        entry["measurements"] = entry["measurements"][-MAX_MEASUREMENTS:]
        entry["step_seconds"] = entry.get("step_seconds", [])[-MAX_MEASUREMENTS:]
        if "load_seconds" in entry:
            entry["load_seconds"] = entry["load_seconds"][-MAX_MEASUREMENTS:]
        entry["updated"] = now_iso()
        store["version"] = STORE_VERSION
        atomic_write_json(path, store)
    return entry


# --------------------------------------------------------------------------------------------------
# The default calibration record (shipped with the code)


DEVICE_DEFAULTS_FILE = Path(__file__).with_name("device_defaults.json")
"""The default calibration record: each device term's value, unit, date, how it was found, machine and note."""
SIZE_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
"""A term in one of these units is turned into whole bytes (binary units); any other unit is kept as written."""
CHECKPOINTING_KEYS = {"gradient_checkpointing": True, "no_gradient_checkpointing": False}
"""How a term that depends on gradient checkpointing is keyed in the file, and the key it gets in `DeviceDefaults`."""


@dataclass(frozen=True)
class DeviceDefaults:
    """The default calibration record (`DEVICE_DEFAULTS_FILE`) as values: what a device adds to the
    memory estimate before this machine is calibrated. Sizes in bytes; `{True: ..., False: ...}` maps
    gradient checkpointing on / off to the term's value.

    Attributes:
        runtime_overhead_bytes: device kind (`cpu`, `cuda`, `mps`) -> bytes the runtime holds that are not
            tensors of ours (cpu: `cpu_import_baseline_bytes` + `cpu_runtime_objects_bytes`).
        runtime_overhead_note: device kind -> where that figure comes from, in words (the estimate's note).
        cpu_import_baseline_bytes: RSS of a process that imported what the trainer imports.
        cpu_runtime_objects_bytes: the processor, the model's objects, peft, the Trainer, the first kernels.
        cpu_kernel_cache_bytes_per_row_length, cpu_kernel_cache_bytes_per_clip_length,
            cpu_kernel_cache_bytes_per_answer_length: oneDNN's kernels cached per new row / clip / answer length.
        cpu_kernel_cache_max_shapes: shapes of each kind counted at most (count).
        cpu_heap_retention_per_token: checkpointing -> (bytes per MLP unit, bytes per hidden unit per decoder
            layer), per token of the micro-batch.
        cpu_heap_retention_per_audio_second: checkpointing -> bytes per second of a row's audio.
        cpu_heap_retention_fitted_dtype: the compute dtype the retention terms were measured in.
        cpu_heap_retention_run_spread: checkpointing -> fraction of the step's retention a whole run adds.
        notes: term name (as in the file) -> its dated lab note, "DATE, measured|assumed, MACHINE: NOTE".
    """

    runtime_overhead_bytes: dict[str, int]
    runtime_overhead_note: dict[str, str]
    cpu_import_baseline_bytes: int
    cpu_runtime_objects_bytes: int
    cpu_kernel_cache_bytes_per_row_length: int
    cpu_kernel_cache_bytes_per_clip_length: int
    cpu_kernel_cache_bytes_per_answer_length: int
    cpu_kernel_cache_max_shapes: int
    cpu_heap_retention_per_token: dict[bool, tuple[int, int]]
    cpu_heap_retention_per_audio_second: dict[bool, int]
    cpu_heap_retention_fitted_dtype: str
    cpu_heap_retention_run_spread: dict[bool, float]
    notes: dict[str, str]


def _term_value(path: Path, name: str, term: dict):
    """A term's value in the unit `DeviceDefaults` keeps: whole bytes for `SIZE_UNITS`, tuples for lists,
    `{True, False}` for values keyed by `CHECKPOINTING_KEYS`."""
    missing = [k for k in ("value", "unit", "date", "how", "machine", "note") if k not in term]
    if missing:
        raise ConfigError(f"`{name}` in {path} lacks {in_words(missing)}; every term has a value, its unit and a dated note. "
                          "Restore the file from the repository.")
    value, factor = term["value"], SIZE_UNITS.get(term["unit"])
    if isinstance(value, dict):
        if set(value) != set(CHECKPOINTING_KEYS):
            raise ConfigError(f"`{name}` in {path} must be keyed by {sorted(CHECKPOINTING_KEYS)}, got {sorted(value)}. "
                              "Restore the file from the repository.")
        return {CHECKPOINTING_KEYS[k]: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    return int(value * factor) if factor else value


def read_device_defaults(path: Path = DEVICE_DEFAULTS_FILE) -> DeviceDefaults:
    """The default calibration record at `path` as `DeviceDefaults` (see `_term_value` for the units).

    Raises `ConfigError` naming the file when it is unreadable, lacks a term `DeviceDefaults` needs, or
    a term lacks its value, unit or dated note (the fix: restore the file from the repository)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        terms = data["terms"]
        notes = data["runtime_overhead_notes"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"The default calibration record {path} cannot be read ({type(error).__name__}: {error}). "
                          "Restore it from the repository (it ships with the code).") from None
    values = {name: _term_value(path, name, term) for name, term in terms.items()}
    needed = ("cpu_import_baseline", "cpu_runtime_objects", "cuda_runtime_overhead", "mps_runtime_overhead",
              "cpu_kernel_cache_per_row_length", "cpu_kernel_cache_per_clip_length", "cpu_kernel_cache_per_answer_length",
              "cpu_kernel_cache_max_shapes", "cpu_heap_retention_per_token", "cpu_heap_retention_per_audio_second",
              "cpu_heap_retention_fitted_dtype", "cpu_heap_retention_run_spread")
    missing = [name for name in needed if name not in values] + [d for d in ("cpu", "cuda", "mps") if d not in notes]
    if missing:
        raise ConfigError(f"The default calibration record {path} lacks {in_words(missing)}. Restore it from the repository.")
    cpu = values["cpu_import_baseline"] + values["cpu_runtime_objects"]
    return DeviceDefaults(
        runtime_overhead_bytes={"cpu": cpu, "cuda": values["cuda_runtime_overhead"], "mps": values["mps_runtime_overhead"]},
        runtime_overhead_note={device: str(notes[device]) for device in ("cpu", "cuda", "mps")},
        cpu_import_baseline_bytes=values["cpu_import_baseline"],
        cpu_runtime_objects_bytes=values["cpu_runtime_objects"],
        cpu_kernel_cache_bytes_per_row_length=values["cpu_kernel_cache_per_row_length"],
        cpu_kernel_cache_bytes_per_clip_length=values["cpu_kernel_cache_per_clip_length"],
        cpu_kernel_cache_bytes_per_answer_length=values["cpu_kernel_cache_per_answer_length"],
        cpu_kernel_cache_max_shapes=int(values["cpu_kernel_cache_max_shapes"]),
        cpu_heap_retention_per_token=values["cpu_heap_retention_per_token"],
        cpu_heap_retention_per_audio_second=values["cpu_heap_retention_per_audio_second"],
        cpu_heap_retention_fitted_dtype=str(values["cpu_heap_retention_fitted_dtype"]),
        cpu_heap_retention_run_spread=values["cpu_heap_retention_run_spread"],
        notes={name: f"{term['date']}, {term['how']}, {term['machine']}: "
               + (" ".join(term["note"]) if isinstance(term["note"], list) else str(term["note"]))
               for name, term in terms.items()},
    )


@functools.lru_cache(maxsize=1)
def device_defaults() -> DeviceDefaults:
    """The shipped default calibration record (`read_device_defaults(DEVICE_DEFAULTS_FILE)`), read once per
    process: the estimate asks for it in every device term."""
    return read_device_defaults(DEVICE_DEFAULTS_FILE)
