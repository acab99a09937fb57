"""Handing the C heap's free memory back between the parts of a CPU run (`pipeline.host.free_heap`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A child process fills the heap with 64 KiB buffers (under glibc's 128 KiB mmap threshold, so they
# come from the heap) interleaved with small buffers that stay alive (`fragment`), frees the big ones
# (the heap cannot shrink from its top: live buffers sit above the holes) and reports its anonymous RSS.
FREED_BYTES = 4096 * 64 * 1024  # 256 MiB freed between live buffers
_CHILD_PRELUDE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pipeline.host.free_heap import release_free_heap, releasing_free_heap_while
def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
def fragment():
    big, kept = [], []
    for _ in range(4096):
        big.append(bytearray(64 * 1024))
        kept.append(bytearray(1024))
    return big, kept
"""

# RSS before and after `release_free_heap`.
_CHILD = _CHILD_PRELUDE + r"""
big, kept = fragment()
del big
before = anon()
released = release_free_heap()
print(json.dumps({"before": before, "after": anon(), "released": released}))
"""


def _child(env_extra: dict[str, str], script: str = _CHILD) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if k != "TUTOR_KEEP_FREE_HEAP"} | env_extra
    proc = subprocess.run([sys.executable, "-c", script, str(REPO)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-1500:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim (Linux); a no-op elsewhere")
def test_the_free_heap_leaves_the_resident_set_and_the_diagnostic_switch_keeps_it():
    freed = FREED_BYTES
    released = _child({})
    assert released["released"] is True
    assert released["before"] - released["after"] >= 0.75 * freed, released
    kept = _child({"TUTOR_KEEP_FREE_HEAP": "1"})
    assert kept["released"] is False
    assert kept["before"] - kept["after"] < 0.1 * freed, kept


def test_every_phase_change_releases_the_free_heap_on_cpu_only(monkeypatch):
    from pipeline.training import peak_memory

    calls = []
    monkeypatch.setattr(peak_memory, "release_free_heap", lambda: calls.append(1) or True)
    recorder = peak_memory.PhaseMemory("cpu")
    recorder.enter("load")
    with recorder.during("save"):
        pass
    assert len(calls) == 3  # load, save, back to load
    peak_memory.reset_peak_memory("cpu")
    assert len(calls) == 4


# The same fragmented heap, made inside `releasing_free_heap_while`: the block never calls
# `release_free_heap` itself, yet its freed buffers leave the resident set while it is still running.
_CHILD_WHILE = _CHILD_PRELUDE + r"""
start = anon()
with releasing_free_heap_while(0.05):
    big, kept = fragment()
    held = anon()
    del big
    time.sleep(1.0)
    during = anon()
print(json.dumps({"start": start, "held": held, "during": during}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim (Linux); a no-op elsewhere")
def test_a_long_call_hands_its_freed_heap_back_while_it_runs():
    freed = FREED_BYTES
    rss = _child({}, _CHILD_WHILE)
    assert rss["held"] - rss["start"] >= 0.9 * freed, rss  # the buffers were resident
    assert rss["during"] - rss["start"] < 0.25 * freed, rss  # and left while the block still ran


def test_loading_on_cpu_releases_the_free_heap_while_from_pretrained_runs(monkeypatch, tiny_model_dir):
    from pipeline.host import free_heap
    from pipeline.model.loading import load_model

    entered = []
    real = free_heap.releasing_free_heap_while

    def recording(*args, **kwargs):
        entered.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(free_heap, "releasing_free_heap_while", recording)
    load_model(str(tiny_model_dir), device="cpu", quantization="none")
    assert len(entered) == 1


def test_the_runs_low_memory_heap_reaches_the_loader_on_cpu_only(monkeypatch, tiny_model_dir):
    """`TrainConfig.low_memory_heap` travels with the load options to `load_model`, which asks to pin the
    threshold on CPU (recorded here, not done: pinning would slow this test process)."""
    from pipeline.config import TrainConfig
    from pipeline.host import free_heap
    from pipeline.model.loading import load_model

    calls = []
    monkeypatch.setattr(free_heap, "pin_mmap_threshold", lambda asked=False: calls.append(asked) or False)
    options = TrainConfig(model=str(tiny_model_dir), device="cpu", quantization="none", low_memory_heap=True).load_options()
    assert options["low_memory_heap"] is True
    load_model(str(tiny_model_dir), device="cpu", **options)
    load_model(str(tiny_model_dir), device="cpu", quantization="none")
    assert calls == [True, False]


# 1 MiB buffers freed between live ones of the same size, with glibc's mmap threshold where its dynamic
# rule puts it once a 16 MiB mapping is freed (set directly: whether one freed buffer raises it, and
# where small blocks land, depend on the heap's layout, which every imported module changes): unpinned
# the freed buffers are holes in the heap and stay resident; pinned each was its own mapping.
_PIN_CHILD = _CHILD_PRELUDE + r"""
import ctypes
from pipeline.host.free_heap import pin_mmap_threshold
pinned = pin_mmap_threshold(asked=sys.argv[3] == "asked") if sys.argv[2] == "pin" else False
if not pinned:
    ctypes.CDLL("libc.so.6").mallopt(-3, 16 << 20)  # M_MMAP_THRESHOLD
before = anon()
blocks = [bytearray(1 << 20) for _ in range(200)]
live = blocks[1::2]  # 100 MiB stays live, each freed buffer lies between two live ones
del blocks
print(json.dumps({"pinned": pinned, "kept_bytes": anon() - before - len(live) * (1 << 20)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt (Linux); a no-op elsewhere")
def test_a_pinned_mmap_threshold_makes_the_resident_set_follow_live_memory(monkeypatch):
    """What lets the estimate count no retained heap on a glibc host (`EstimateOptions.cpu_heap_retention`)."""
    import os

    def child(mode: str, env_extra: dict[str, str], run_asks: bool = False) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("TUTOR_KEEP_FREE_HEAP", "TUTOR_PIN_MMAP_THRESHOLD")}
        env["TUTOR_ALLOCATOR"] = "glibc"  # glibc's heap is what this test is about, TCMalloc installed or not
        proc = subprocess.run([sys.executable, "-c", _PIN_CHILD, str(REPO), mode, "asked" if run_asks else "-"],
                              capture_output=True, text=True, env=env | env_extra, timeout=120)
        assert proc.returncode == 0, proc.stderr[-1500:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    asked = {"TUTOR_PIN_MMAP_THRESHOLD": "1"}
    pinned, default = child("pin", asked), child("default", asked)
    assert pinned["pinned"] and pinned["kept_bytes"] < 10 * 2**20, pinned  # 100 MiB freed, none kept
    assert default["kept_bytes"] > 80 * 2**20, default  # glibc's default keeps what was freed in the heap
    assert not child("pin", {})["pinned"]  # opt-in: it costs speed
    by_the_run = child("pin", {}, run_asks=True)  # the run's `low_memory_heap` (`--low-memory-heap`) asks for it
    assert by_the_run["pinned"] and by_the_run["kept_bytes"] < 10 * 2**20, by_the_run
    assert not child("pin", asked | {"TUTOR_KEEP_FREE_HEAP": "1"})["pinned"]  # the diagnostic baseline leaves glibc alone

    from pipeline.memory.inputs import EstimateOptions
    from pipeline.host.allocator import tcmalloc_library

    monkeypatch.setenv("TUTOR_ALLOCATOR", "glibc")
    tcmalloc_library.cache_clear()
    monkeypatch.delenv("TUTOR_PIN_MMAP_THRESHOLD", raising=False)
    assert EstimateOptions().cpu_heap_retention is True  # the estimate counts what glibc keeps
    monkeypatch.setenv("TUTOR_PIN_MMAP_THRESHOLD", "1")
    assert EstimateOptions().cpu_heap_retention is False
    monkeypatch.undo()
    tcmalloc_library.cache_clear()
