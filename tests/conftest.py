"""Shared fixtures: offline mode, the real speechocean762 subset, and one tiny Gemma 3n (and Gemma 4) per session."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# No test reads or writes the real per-user calibration, not even a module- or session-scoped fixture that
# trains before the per-test folder below is set: the whole session starts from an empty one of its own.
_SESSION_CALIBRATION = tempfile.mkdtemp(prefix="tutor-calibration-")
os.environ["TUTOR_CALIBRATION_DIR"] = _SESSION_CALIBRATION
atexit.register(shutil.rmtree, _SESSION_CALIBRATION, ignore_errors=True)

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Under `pytest -n N` (pytest-xdist) each of the N worker processes gives torch its share of the cores
    (`available_cores() // N`, at least 1) instead of every core: N pools each asking for every core would spin
    against each other at every parallel region (pipeline/host/cpu_threads.py). The processes a test starts
    (training runs, the app) choose their own threads as the product does."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if os.environ.get("PYTEST_XDIST_WORKER") and workers > 1:
        import torch

        from pipeline.host.cpu_threads import available_cores

        torch.set_num_threads(max(1, available_cores() // workers))


pytest_plugins = ["pytester", "tests.browser", "tests.hub_server", "tests.expense_counts"]  # the browser tests' app, Chromium and page; a hub on 127.0.0.1; the count of apps, runs and model loads


@pytest.fixture(autouse=True)
def _calibration_in_a_temp_dir(tmp_path_factory, monkeypatch):
    """No test reads or writes the real per-user calibration (`pipeline.calibration.store`): each test
    gets an empty calibration folder (children it starts inherit the variable)."""
    monkeypatch.setenv("TUTOR_CALIBRATION_DIR", str(tmp_path_factory.mktemp("calibration")))


@pytest.fixture()
def glibc_heap(monkeypatch):
    """Estimates as on a host whose training runs on glibc's malloc (`TUTOR_ALLOCATOR=glibc`), for tests
    whose figures include the retained heap, whether or not this host has TCMalloc (the estimate on
    TCMalloc: tests/test_allocator.py). Child processes inherit it."""
    from pipeline.host.allocator import tcmalloc_library

    monkeypatch.setenv("TUTOR_ALLOCATOR", "glibc")
    tcmalloc_library.cache_clear()
    yield
    monkeypatch.undo()
    tcmalloc_library.cache_clear()


@pytest.fixture(autouse=True)
def _stop_started_runs():
    """After every test, whatever its outcome: stop the training processes it started with
    `pipeline.training.runs.start_run` (detached on purpose, so nothing else would stop them)."""
    yield
    import sys

    jobs = sys.modules.get("pipeline.jobs")  # what `start_run` starts with (`pipeline.jobs.start`)
    if jobs is None:
        return
    from tests.processes import stop_process_group

    for pid, child in list(jobs._CHILDREN.items()):
        if child.poll() is None:
            stop_process_group(pid)
            child.wait(timeout=30)


def _speechocean_dir() -> Path:
    """`$SPEECHOCEAN_DIR`, else `shared/data/speechocean762-mini` beside the checkout or beside any
    folder above it (CI clones the repo next to its copy of `shared/`)."""
    override = os.environ.get("SPEECHOCEAN_DIR")
    if override:
        return Path(override)
    relative = Path("shared") / "data" / "speechocean762-mini"
    for folder in REPO_ROOT.parents:
        if (folder / relative / "resource" / "scores.json").exists():
            return folder / relative
    return REPO_ROOT.parent / relative


@pytest.fixture(scope="session")
def speechocean_dir() -> Path:
    """The 60-utterance speechocean762 subset in its original Kaldi layout (read-only)."""
    path = _speechocean_dir()
    if not (path / "resource" / "scores.json").exists():
        pytest.fail(
            f"The speechocean762-mini test data was not found at {path}. Put the `shared/` folder beside "
            "this checkout, or set SPEECHOCEAN_DIR=/path/to/speechocean762-mini (see README, Quick start)."
        )
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Gemma 3n + processor written by `make-tiny-model`, built once per test session."""
    from pipeline.model.tiny_gemma3n import make_tiny_gemma3n

    out = tmp_path_factory.mktemp("tiny-gemma3n")
    make_tiny_gemma3n(out)
    return out


@pytest.fixture(scope="session")
def tiny_gemma4_dir(tmp_path_factory) -> Path:
    """A tiny random Gemma 4 + processor (`make-tiny-model --family gemma4`), built once per test session."""
    from pipeline.model.tiny_gemma4 import make_tiny_gemma4

    out = tmp_path_factory.mktemp("tiny-gemma4")
    make_tiny_gemma4(out)
    return out


@pytest.fixture()
def launched():
    """Processes a test starts in their own session (`start_new_session=True`: torchrun and its
    workers, a bundle's train.sh); each one's process group is killed at teardown whatever the outcome."""
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=30)
