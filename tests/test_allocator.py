"""The C allocator a training process runs on (pipeline.host.allocator): which one, how a process
starts again on TCMalloc, and what the estimate counts for each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import TrainConfig
from pipeline.errors import ConfigError
from pipeline.memory.inputs import EstimateOptions, LengthStats
from pipeline.memory.phases import estimate_memory
from pipeline.host import allocator
from tests.test_memory import SMALL

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def asked(monkeypatch):
    """Set `TUTOR_ALLOCATOR` (None: unset) with the library lookup's cache cleared before and after."""

    def set_asked(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(allocator.ALLOCATOR_ENV, raising=False)
        else:
            monkeypatch.setenv(allocator.ALLOCATOR_ENV, value)
        allocator.tcmalloc_library.cache_clear()

    yield set_asked
    allocator.tcmalloc_library.cache_clear()


def _fake_tcmalloc(path: Path) -> Path:
    """A file shaped like a TCMalloc shared library as far as the check reads it: an ELF header of a shared
    object (e_type 3, little-endian) and `tc_malloc` in its strings."""
    header = b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + (3).to_bytes(2, "little") + b"\x00" * 46
    path.write_bytes(header + b"\x00tc_malloc\x00tc_free\x00")
    return path


def test_the_allocator_setting_is_read_and_a_wrong_path_is_named(asked, tmp_path):
    asked("glibc")
    assert allocator.tcmalloc_library() is None
    assert allocator.training_allocator() == "glibc"
    library = _fake_tcmalloc(tmp_path / "libtcmalloc_minimal.so.4")
    asked(str(library))
    expected = str(library) if sys.platform.startswith("linux") else None
    assert allocator.tcmalloc_library() == expected
    asked(str(tmp_path / "missing.so"))
    if sys.platform.startswith("linux"):
        with pytest.raises(ConfigError, match="missing.so.*glibc"):
            allocator.tcmalloc_library()
        assert allocator.training_allocator() == "glibc"  # the estimate never raises for it


@pytest.mark.parametrize("content, says", [
    (b"", "no ELF header"),
    (b"root:x:0:0:root:/root:/bin/bash\n", "no ELF header"),
    (b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + (2).to_bytes(2, "little") + b"\x00tc_malloc\x00", "not a shared library"),
    (b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + (3).to_bytes(2, "little") + b"\x00malloc\x00", "not TCMalloc"),
])
def test_only_a_real_tcmalloc_is_preloaded(asked, tmp_path, content, says):
    """Issue 31 #5: `TUTOR_ALLOCATOR` preloaded any existing file into every training process."""
    path = tmp_path / "libtcmalloc_minimal.so.4"
    path.write_bytes(content)
    assert says in allocator.tcmalloc_problem(str(path))
    asked(str(path))
    if sys.platform.startswith("linux"):
        with pytest.raises(ConfigError, match=says):
            allocator.tcmalloc_library()
    assert "folder" in allocator.tcmalloc_problem(str(tmp_path))


def test_the_library_is_found_in_the_active_conda_environment(asked, monkeypatch, tmp_path):
    (tmp_path / "lib").mkdir()
    _fake_tcmalloc(tmp_path / "lib" / "libtcmalloc.so.4")
    monkeypatch.setenv("CONDA_PREFIX", str(tmp_path))
    asked(None)
    expected = str(tmp_path / "lib" / "libtcmalloc.so.4") if sys.platform.startswith("linux") else None
    assert allocator.tcmalloc_library() == expected


def _child(env_extra: dict) -> list[str]:
    """Run a child that prints its pid and allocator, starts again on TCMalloc where it can, and prints them again."""
    code = ("import os; from pipeline.host.allocator import run_on_tcmalloc, running_allocator; "
            "print(os.getpid(), running_allocator(), flush=True); run_on_tcmalloc(); print(os.getpid(), running_allocator())")
    env = {k: v for k, v in os.environ.items() if k not in (allocator.ALLOCATOR_ENV, allocator.REEXEC_MARK_ENV)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                         env=env | env_extra, check=True)
    return out.stdout.split()


@pytest.mark.skipif(allocator.training_allocator() != "tcmalloc", reason="TCMalloc is not installed on this host")
def test_a_training_process_starts_again_on_tcmalloc_with_the_same_pid():
    printed = _child({})  # before run_on_tcmalloc, then the whole program again on TCMalloc
    assert printed[1::2] == ["glibc", "tcmalloc", "tcmalloc"]
    assert len(set(printed[0::2])) == 1  # os.execve: the app watches the same process
    assert _child({allocator.ALLOCATOR_ENV: "glibc"})[1::2] == ["glibc", "glibc"]


@pytest.mark.parametrize("name", ["tcmalloc", "glibc"])
def test_the_estimate_counts_a_retained_heap_only_on_glibc(monkeypatch, name):
    """The estimate's default (`EstimateOptions.cpu_heap_retention`) follows the allocator training runs
    on: TCMalloc keeps no freed heap, so neither the step's retention nor the run's spread of it counts,
    and the estimate says which."""
    monkeypatch.setattr("pipeline.host.free_heap.training_allocator", lambda: name)
    monkeypatch.setattr("pipeline.memory.phases.training_allocator", lambda: name)
    monkeypatch.delenv("TUTOR_PIN_MMAP_THRESHOLD", raising=False)
    config = TrainConfig(model="tiny", device="cpu", quantization="none", gradient_checkpointing=True)
    estimate = estimate_memory(SMALL, config, LengthStats(512, 0.0), "cpu", EstimateOptions())
    on_tcmalloc = name == "tcmalloc"
    assert (estimate.components["allocator_retention"] == 0) == on_tcmalloc
    assert (estimate.components["cpu_heap_run_spread"] == 0) == on_tcmalloc
    assert any("TCMalloc" in note and "follows what training holds" in note for note in estimate.notes) == on_tcmalloc
    low_memory = estimate_memory(SMALL, config.replace(low_memory_heap=True), LengthStats(512, 0.0), "cpu", EstimateOptions())
    assert any("changes nothing here" in note for note in low_memory.notes) == on_tcmalloc


@pytest.mark.slow
def test_the_memory_probe_runs_on_the_allocator_its_estimate_assumes(tiny_model_dir):
    """`estimate --measure` and the calibration compare the probe's peak with an estimate that counts a
    retained heap or not by `training_allocator`; the probe has to run on that allocator."""
    from pipeline.memory.measure import measure_peak

    config = TrainConfig(model=str(tiny_model_dir), device="cpu", quantization="none", lora_rank=8, lora_alpha=16,
                         batch_size=1, max_length=256)
    measured = measure_peak(str(tiny_model_dir), config, LengthStats(256, 0.0), "cpu", EstimateOptions())
    assert measured["allocator"] == allocator.training_allocator()
