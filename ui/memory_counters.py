"""How the app says which counter measured a peak of memory, in words: "measured as the most of the
computer's memory (RAM) it held at once" for `cpu_max_rss` (the process's peak resident memory).

The counters are the trainer's (`pipeline.training.peak_memory.memory_kind`) and the memory probe's
`method` texts (`pipeline.training.probe`); the Memory tab's calibration, the Train tab's memory line and
the readable training log (`ui.wording`) all say them with `memory_counter_words`. Pure text: no gradio,
no pipeline module.
"""

from __future__ import annotations

MEMORY_COUNTERS = {
    "cpu_max_rss": "measured as the most of the computer's memory (RAM) it held at once",
    "cuda_max_memory_allocated": "measured as the most GPU memory it used at once",
    "cuda_max_memory_reserved": "measured as the most GPU memory it set aside at once",
    "mps_driver_allocated_memory": "measured as the memory the Mac's GPU gave it",
}
"""How each peak-memory counter (`pipeline.training.peak_memory.memory_kind`) is said in the app."""
# The memory probe's `method` texts (`pipeline.training.probe`), by their first words.
_PROBE_METHODS = (("CPU peak RSS", "cpu_max_rss"), ("CUDA max_memory_reserved", "cuda_max_memory_reserved"),
                  ("MPS driver_allocated_memory", "mps_driver_allocated_memory"))


def memory_counter_words(kind: str | None) -> str:
    """How a peak was measured, in plain words: 'measured as the most of the computer's memory (RAM) it held
    at once' for `cpu_max_rss` (or the probe's "CPU peak RSS ..."); '' for None; 'measured by NAME' (underscores as
    spaces) for a counter not listed in `MEMORY_COUNTERS`."""
    if not kind:
        return ""
    kind = str(kind)
    kind = next((name for prefix, name in _PROBE_METHODS if kind.startswith(prefix)), kind)
    return MEMORY_COUNTERS.get(kind, f"measured by {kind.replace('_', ' ')}")
