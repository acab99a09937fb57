"""The C allocator a training process runs on: TCMalloc where this Linux host has it, glibc's malloc otherwise.

On Linux, PyTorch's CPU tensors come from the C library's `malloc`. glibc's keeps much of what a step
frees resident, in amounts that vary from process to process (`pipeline.host.free_heap`), so the
estimate has to price a retained heap it can only bound (`pipeline.memory.cpu_heap`). TCMalloc
(gperftools' `libtcmalloc_minimal.so.4`, Debian/Ubuntu package `libtcmalloc-minimal4`; PyTorch's
performance tuning guide names it, with jemalloc, for CPU workloads) reuses freed spans by size, so a
step's resident set is its live tensors, and it is faster. Measured on this project's second machine
(AMD EPYC, AVX2, fp32, 2026-12-02, `pipeline.training.probe`, the mid-size stand-in, one 2,048-token row,
gradient checkpointing, LoRA r=64, two fresh processes each, nothing else running): glibc's default
3.57-3.80 GiB peak and 19.7-20.5 s per step; glibc with the mmap threshold pinned (the low-memory mode)
2.40 GiB and 30.0-30.7 s; TCMalloc 2.41 GiB and 15.8-16.6 s; jemalloc 2.41 GiB and 25.8-26.2 s;
mimalloc 2.45 GiB and 25.7-26.2 s.

A process cannot change its allocator once it runs, so the training process (`python -m pipeline
train`) and the memory probe (`python -m pipeline.training.probe`) start again on TCMalloc before they
import anything (`run_on_tcmalloc`: `os.execve` with the library in `LD_PRELOAD`, the same process
id, so a run that the app watches stays the same run). The estimate asks `training_allocator` which
allocator those processes will have and counts no retained heap under TCMalloc
(`pipeline.host.free_heap.heap_follows_live_tensors`).

`TUTOR_ALLOCATOR=glibc` keeps glibc's malloc; `TUTOR_ALLOCATOR=/path/to/libtcmalloc_minimal.so.4`
names the library where it is not in a standard folder; it is preloaded only when it is a TCMalloc
shared library (`tcmalloc_problem`), never any other file.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from pipeline.errors import ConfigError

ALLOCATOR_ENV = "TUTOR_ALLOCATOR"
"""`glibc` to keep glibc's malloc in training processes; a path to a TCMalloc shared library to use that
one; unset (or `tcmalloc`) to use TCMalloc where `tcmalloc_library` finds it."""

TCMALLOC_LIBRARY_NAMES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
"""gperftools' TCMalloc as Debian, Ubuntu, Fedora and conda-forge ship it (the minimal build has no
profiler, which training does not need)."""

TCMALLOC_LIBRARY_FOLDERS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                            "/usr/local/lib")
"""Where Linux distributions install shared libraries; the active conda environment's `lib` is searched first."""

REEXEC_MARK_ENV = "TUTOR_ALLOCATOR_STARTED"
"""Set in the environment of a process started again on TCMalloc, so that it never starts again twice."""

TCMALLOC_QUIET_ENV = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 50)}
"""TCMalloc prints a line for every allocation over 1 GiB by default (E2B's logits and embedding
tables are); a run's log stays readable without them."""


def _asked() -> str:
    return os.environ.get(ALLOCATOR_ENV, "").strip()


@functools.cache
def tcmalloc_library() -> str | None:
    """The path of the TCMalloc shared library a training process would preload, or None: not Linux,
    `TUTOR_ALLOCATOR=glibc`, or no library in `$CONDA_PREFIX/lib` or `TCMALLOC_LIBRARY_FOLDERS`. Looked
    up once per process (`tcmalloc_library.cache_clear()` after changing `TUTOR_ALLOCATOR`).

    Raises:
        ConfigError: `TUTOR_ALLOCATOR` names a path that is not a file (fix the path, or unset it).
    """
    asked = _asked()
    if not sys.platform.startswith("linux") or asked.lower() == "glibc":
        return None
    if asked and asked.lower() != "tcmalloc":
        why = tcmalloc_problem(asked)
        if why:
            raise ConfigError(f"{ALLOCATOR_ENV}={asked!r} {why}: expected 'glibc', 'tcmalloc' or the path of a "
                              "TCMalloc library such as /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 (nothing is "
                              "preloaded until it is fixed; unset it to use the one installed).")
        return asked
    folders = [str(Path(os.environ["CONDA_PREFIX"]) / "lib")] if os.environ.get("CONDA_PREFIX") else []
    for folder in folders + list(TCMALLOC_LIBRARY_FOLDERS):
        for name in TCMALLOC_LIBRARY_NAMES:
            if (Path(folder) / name).is_file() and tcmalloc_problem(str(Path(folder) / name)) is None:
                return str(Path(folder) / name)
    return None


ELF_MAGIC = b"\x7fELF"
"""The first 4 bytes of an ELF file (the System V ABI's `e_ident`), which every Linux shared library is."""
TCMALLOC_SYMBOL = b"\x00tc_malloc\x00"
"""`tc_malloc`, as the dynamic string table of every gperftools TCMalloc library holds it (NUL-delimited)."""


def tcmalloc_problem(path: str) -> str | None:
    """Why the file at `path` is not a TCMalloc shared library to preload, in words (None when it is one): not a
    file, unreadable, not an ELF shared object (`e_type` ET_DYN, bytes 16-17 of the header), or no exported
    `tc_malloc` (`TCMALLOC_SYMBOL`). Preloading anything else would load an arbitrary file into every
    training process, or make the dynamic loader print an error in each of them."""
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        return "is a folder, not a file"
    except FileNotFoundError:
        return "is not a file"
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if not data.startswith(ELF_MAGIC) or len(data) < 18:
        return "is not a shared library (no ELF header)"
    e_type = int.from_bytes(data[16:18], "little" if data[5] == 1 else "big")
    if e_type != 3:  # ET_DYN
        return "is an ELF file but not a shared library"
    if TCMALLOC_SYMBOL not in data:
        return "is a shared library but not TCMalloc (it exports no `tc_malloc`)"
    return None


def training_allocator() -> str:
    """`"tcmalloc"` when training processes on this host run on TCMalloc (`tcmalloc_library` finds it),
    else `"glibc"` (glibc's malloc on Linux; on macOS and Windows the system allocator, which the
    estimate's CPU heap terms treat like glibc's)."""
    try:
        return "tcmalloc" if tcmalloc_library() else "glibc"
    except ConfigError:
        return "glibc"


@functools.cache
def tcmalloc_loaded() -> bool:
    """Whether this process runs on TCMalloc (a `libtcmalloc` mapping in /proc/self/maps, read once: a
    process keeps its allocator; False where that file does not exist)."""
    try:
        return "libtcmalloc" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def running_allocator() -> str:
    """`"tcmalloc"` or `"glibc"`: what this process runs on (recorded by runs and probes; the estimate and
    the calibration's key use `training_allocator`, what training processes will run on)."""
    return "tcmalloc" if tcmalloc_loaded() else "glibc"


def run_on_tcmalloc() -> None:
    """Start this process again on TCMalloc when `tcmalloc_library` finds it and the process does not run
    on it yet: `os.execve` of the same command line (`sys.orig_argv`) with the library first in
    `LD_PRELOAD`. Call it first thing under `if __name__ == "__main__"` of a process that trains, never
    from a function another program calls (it replaces the calling process). Returns without doing
    anything when the library is missing, the process already runs on it, or it was started again
    once already (`TUTOR_ALLOCATOR_STARTED`). Raises ConfigError as `tcmalloc_library` does.
    """
    library = tcmalloc_library()
    if library is None or tcmalloc_loaded() or os.environ.get(REEXEC_MARK_ENV):
        return
    preload = os.environ.get("LD_PRELOAD", "")
    env = dict(os.environ, LD_PRELOAD=f"{library} {preload}".strip(), **{REEXEC_MARK_ENV: "1"})
    for name, value in TCMALLOC_QUIET_ENV.items():
        env.setdefault(name, value)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(sys.orig_argv), env)
