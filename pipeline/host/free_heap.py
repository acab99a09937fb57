"""Keeping a CPU run's resident memory equal to its live tensors: a pinned mmap threshold, and the free
heap handed back between the parts of the run.

With `TrainConfig.low_memory_heap` (`--low-memory-heap`, the Memory tab's low-memory mode) or
`TUTOR_PIN_MMAP_THRESHOLD=1` (the low-memory heap, opt-in: it costs speed) a process that loads the
model first pins glibc's mmap threshold at 64 KiB (`pin_mmap_threshold`): each tensor but
the smallest is its own mapping, unmapped when freed, so what a step frees never stays resident and
the estimate counts no retained heap (`heap_follows_live_tensors`). By default glibc's dynamic
threshold stays, and the releases below keep what it retains in check. Where TCMalloc is installed,
training processes run on it instead (`pipeline.host.allocator`): it keeps no freed heap that the
estimate has to price, so the threshold is not pinned there, and `malloc_trim` (glibc's) finds nothing
of TCMalloc's to hand back.

On Linux, PyTorch's CPU tensors come from glibc malloc. Tensors under its mmap threshold (which
rises to 32 MiB, glibc malloc.c `DEFAULT_MMAP_THRESHOLD_MAX`) live in the heap, and what a step
frees stays resident there. The next step does not reuse all of it: its allocations land between
long-lived tensors (the NF4 weights made while loading, LoRA states), so the resident set grows on
top of what the previous step left. Measured on full-size Gemma 3n E2B with random weights, NF4,
gradient checkpointing, a 512-token row with a 30 s clip (this machine, 2026-11-30,
`pipeline.training.probe`): after one training step the process held 4.92 GiB of anonymous memory
of which 1.84 GiB were live (the figure with `MALLOC_MMAP_THRESHOLD_=65536`, where the resident set
follows live tensors); the next step then peaked at 7.49, 7.54 and 8.12 GiB in three runs, against
6.87 GiB when `malloc_trim` had handed the free heap back first, in the same step time (28 s).

`release_free_heap` is called where the training process changes what it does: every 0.5 s while
`from_pretrained` loads and quantizes (`releasing_free_heap_while`: the quantizer's bf16
temporaries) and at its end, at every phase change of the run
(`pipeline.training.peak_memory.PhaseMemory.enter`), and before every micro-batch and after its
backward (`pipeline.training.trainer_setup.answer_loss_trainer_class`), so each starts from its live
memory and its peak is its own (what `pipeline.memory` estimates). The release after backward is
for the optimizer step: on E2B, NF4, a 30 s clip, ~2.2 GiB of the backward's freed heap was still
resident when AdamW ran (RssAnon 4.0 GiB before the next release, 1.77 GiB after it), and the
whole run's peak came from there (7.01-7.29 GiB in four runs; 6.82-6.96 GiB in three with the
release, of which 4.47 GiB is resident before each micro-batch: 1.77 GiB anonymous, 2.70 GiB
mapped checkpoint pages; 2026-11-30). The cost is speed:
the pages handed back are faulted in again by the next micro-batch (`malloc_trim` itself takes
1-26 ms). `benchmarks/free_heap.py` measured, before the releases while loading and after backward
existed, 1.09-1.15x the seconds per step for 0.95-1.05x the whole-run peak without gradient
accumulation (the mid-size random Gemma 3n, two pairs of runs; full-size E2B, one pair: 7.12
against 6.81 GiB, 40.9 against 37.4 s per step); the release before a micro-batch matters for one
that follows another in the same step (the probe's case above; gradient accumulation, 4
micro-batches per step by default). The release while loading cost no time (E2B: 97-113 s against
102-107 s per load, three loads each way, alternating). `TUTOR_KEEP_FREE_HEAP=1` turns
it off (faster, less predictable; the benchmark's baseline).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import sys
import threading
from collections.abc import Iterator

from pipeline.host.allocator import tcmalloc_loaded, training_allocator

KEEP_FREE_HEAP_ENV = "TUTOR_KEEP_FREE_HEAP"
"""Set to 1 to keep glibc's free heap resident as before: no `malloc_trim`, no pinned mmap threshold (a
diagnostic; the benchmark's baseline)."""


def _keeping_free_heap() -> bool:
    """True when `TUTOR_KEEP_FREE_HEAP` asks to keep the free heap resident (1, true or yes)."""
    return os.environ.get(KEEP_FREE_HEAP_ENV, "").strip().lower() in ("1", "true", "yes")


@functools.cache
def _trim_function():
    """glibc's `malloc_trim`, or None (not Linux, another C library, or it cannot be loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # glibc only (musl has none)
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def release_free_heap() -> bool:
    """Return the C heap's free pages to the system (glibc `malloc_trim(0)`: the free top of every
    arena and the whole free pages inside it, through `madvise(MADV_DONTNEED)`); live memory is never
    touched. Returns True when it released something, False where it did nothing (not glibc, or
    `TUTOR_KEEP_FREE_HEAP=1`). Costs a walk over the heap's free chunks (milliseconds) and, later,
    the page faults of memory allocated again.
    """
    if _keeping_free_heap():
        return False
    function = _trim_function()
    return bool(function(0)) if function is not None else False


MMAP_THRESHOLD_BYTES = 64 * 1024
"""The mmap threshold `pin_mmap_threshold` fixes (bytes): every allocation of 64 KiB or more, i.e. every
tensor but the smallest, gets its own mapping, which `free` unmaps."""
M_MMAP_THRESHOLD = -3
"""glibc malloc.h's `mallopt` parameter number for the mmap threshold."""


@functools.cache
def _mallopt_function():
    """glibc's `mallopt`, or None (not Linux, another C library, or it cannot be loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


PIN_MMAP_THRESHOLD_ENV = "TUTOR_PIN_MMAP_THRESHOLD"
"""Set to 1 for the low-memory heap: `pin_mmap_threshold` in every process that loads the model (less
memory, slower steps where page faults are expensive; see `pin_mmap_threshold`)."""


def heap_can_follow_live_tensors() -> bool:
    """Whether this host can pin glibc's mmap threshold (`pin_mmap_threshold`): glibc's `mallopt` and
    `malloc_trim` load, and `TUTOR_KEEP_FREE_HEAP=1` does not ask to keep the free heap."""
    return _mallopt_function() is not None and _trim_function() is not None and not _keeping_free_heap()


def heap_follows_live_tensors(asked: bool = False) -> bool:
    """Whether a training process on this host keeps no freed heap resident, so its resident set follows
    its live tensors and the estimate counts no retained heap
    (the default of `pipeline.memory.inputs.EstimateOptions.cpu_heap_retention`):
    when it runs on TCMalloc (`pipeline.host.allocator.training_allocator`, the default where the
    library is installed), or when `asked` (the run's `TrainConfig.low_memory_heap`) or
    `TUTOR_PIN_MMAP_THRESHOLD=1` asks to pin glibc's mmap threshold and `heap_can_follow_live_tensors`."""
    return training_allocator() == "tcmalloc" or _pins_mmap_threshold(asked)


def _pins_mmap_threshold(asked: bool) -> bool:
    """Whether a glibc process pins its mmap threshold: `asked` by the run or `TUTOR_PIN_MMAP_THRESHOLD=1`,
    and `heap_can_follow_live_tensors`."""
    asked = asked or os.environ.get(PIN_MMAP_THRESHOLD_ENV, "").strip().lower() in ("1", "true", "yes")
    return asked and heap_can_follow_live_tensors()


def pin_mmap_threshold(asked: bool = False) -> bool:
    """Fix glibc's mmap threshold at `MMAP_THRESHOLD_BYTES` for the rest of the process
    (`mallopt(M_MMAP_THRESHOLD, 65536)`, which also turns off glibc's dynamic threshold).

    By default the threshold rises to the largest chunk freed so far (up to 32 MiB, glibc malloc.c
    `DEFAULT_MMAP_THRESHOLD_MAX`), after which activation-sized tensors come from the heap, and what a
    step frees stays resident in amounts that depend on the CPU, the compute dtype and the settings.
    Measured on this project's second machine (AMD EPYC, fp32, 2026-12-01, `pipeline.training.probe`, the
    mid-size stand-in, 4-bit, checkpointing, 2 x 512 tokens): 2.90 GiB peak and 32.9 s per step with
    glibc's default, 1.96 GiB and 28.7 s with the threshold pinned (the same as `MALLOC_MMAP_THRESHOLD_`
    set in the environment); with the default the fitted retention constants were 1-20 % short in
    fp32 there. Pinned, the peak is what the tensor-level estimate says. The cost is speed: every
    large tensor is a fresh mapping whose pages fault in again; on that machine (a VM, where page
    faults are expensive) the step took 13.8-14.5 s pinned against 6.8-7.2 s with glibc's default
    (two probes each, alternating, nothing else running), and 9.9 s at a 4 MiB threshold (2.39 GiB).
    So it is opt-in (`asked`: the run's `TrainConfig.low_memory_heap`, `--low-memory-heap`, or
    `TUTOR_PIN_MMAP_THRESHOLD=1` for every run): less memory, slower steps. Returns True when pinned,
    False where nothing was done (not asked for, not glibc, running on TCMalloc, or `TUTOR_KEEP_FREE_HEAP=1`).
    """
    if tcmalloc_loaded() or not _pins_mmap_threshold(asked):
        return False  # TCMalloc keeps no freed heap; glibc's threshold would change nothing there
    return bool(_mallopt_function()(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


LOADING_RELEASE_INTERVAL_SECONDS = 0.5
"""How often `releasing_free_heap_while` hands the free heap back while a model loads (seconds): a
few quantized Linears' bf16 temporaries at most accumulate in between (E2B quantizes ~3 per second
on this 2-core machine)."""


@contextlib.contextmanager
def releasing_free_heap_while(interval_seconds: float = LOADING_RELEASE_INTERVAL_SECONDS) -> Iterator[None]:
    """Call `release_free_heap` every `interval_seconds` from a daemon thread while the block runs,
    and once more at its end.

    For work that frees large temporaries inside one library call we cannot split, such as
    `from_pretrained` quantizing every Linear on the fly (bitsandbytes makes each NF4 weight from a
    bf16 copy and frees the copy). Left alone, how much of that freed heap stays resident varied
    from run to run: full-size E2B, NF4 on CPU, four fresh loads on this machine (2026-11-30) ended
    with 1.87, 3.43, 3.36 and 2.45 GiB of anonymous memory, so the load phase peaked at 5.71-7.28 GiB.
    `malloc_trim` takes the arena locks, so it is safe beside the loading thread. Does nothing where
    `release_free_heap` does nothing.
    """
    if _trim_function() is None or _keeping_free_heap():
        yield
        return
    finished = threading.Event()

    def release_until_finished() -> None:
        while not finished.wait(interval_seconds):
            release_free_heap()

    releaser = threading.Thread(target=release_until_finished, name="release-free-heap", daemon=True)
    releaser.start()
    try:
        yield
    finally:
        finished.set()
        releaser.join()
        release_free_heap()
