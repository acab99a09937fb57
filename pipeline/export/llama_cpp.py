"""llama.cpp on this computer: its source, its converter and the tools this project needs, found or built once.

The GGUF export (`pipeline.export.gguf`), its tests and `.ci/run` all go through this module, so they
use one llama.cpp: the source that the package index ships inside the llama-cpp-python sdist
(`LLAMA_CPP_PYTHON`, its `vendor/llama.cpp/`). On a fresh machine the only network this needs is the
package registry: `pip download --no-deps --no-binary :all: llama-cpp-python==VERSION` (pip's own
client, with whatever index and proxy settings pip has) fetches the sdist once.

Layout of the cache, outside every repository (`cache_dir`, `$TUTOR_LLAMA_CPP_DIR` overrides it):
    ~/.cache/pronunciation-tutor/llama.cpp/<version>/
        sdist/        the downloaded sdist
        src/          its vendor/llama.cpp: convert_hf_to_gguf.py, conversion/, gguf-py/, tools/mtmd/, ...
        build/bin/    the tools built from src (`TOOLS`), only those
        build.json    how long each build took, on which machine, how busy it was

- `source_dir()`: the source, fetched and unpacked once (a file lock keeps two processes from doing it
  twice at the same time; `filelock`).
- `converter_command(...)`: llama.cpp's own `convert_hf_to_gguf.py` run with this Python; its `gguf`
  package comes from the vendored `gguf-py` (the converter puts it first on `sys.path` itself), the
  rest from requirements.txt (torch, transformers, numpy, PyYAML).
- `tool(name)`: the path of a built tool (`llama-mtmd-cli`, `llama-quantize`), building the missing
  ones with cmake (`build_tools`: only those targets; minutes on 2 cores).
- `python -m pipeline llama-cpp [--build] [--json]` (`pipeline.export.cli.llama_cpp_main`) says where
  everything is and builds the tools.

This module does not convert or run models itself (`pipeline.export.gguf`; the proof test in
`tests/test_gguf.py` runs `llama-mtmd-cli`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

from pipeline.errors import ExportError
from pipeline.fileio import atomic_write_json

LLAMA_CPP_PYTHON = "0.3.36"
"""The llama-cpp-python release whose sdist carries the llama.cpp source used here (its `vendor/llama.cpp`)."""

TOOLS = ("llama-mtmd-cli", "llama-quantize")
"""The cmake targets this project needs: the multimodal CLI (the proof that an export hears) and the
quantizer (`--quant q4_k_m`). `llama-server` is left out: it is not needed here and doubles the build."""

CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",  # no HTTPS client: nothing here downloads models
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # would fetch the web UI at configure time
)
"""cmake options of the build (llama.cpp's CMakeLists.txt `option(...)`s): no tests, examples, server or
network; ggml's CPU backend for the machine that builds it (`GGML_NATIVE`, the default)."""

SDIST_PREFIX = f"llama_cpp_python-{LLAMA_CPP_PYTHON}/vendor/llama.cpp/"


def cache_dir() -> Path:
    """Where the source and the build are kept: `$TUTOR_LLAMA_CPP_DIR`, else
    `~/.cache/pronunciation-tutor/llama.cpp/<LLAMA_CPP_PYTHON>/` (`$XDG_CACHE_HOME` honoured)."""
    override = os.environ.get("TUTOR_LLAMA_CPP_DIR")
    if override:
        return Path(override).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pronunciation-tutor" / "llama.cpp" / LLAMA_CPP_PYTHON


def _lock(path: Path):
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path))


def source_dir(*, fetch: bool = True, say: Callable[[str], None] | None = None) -> Path:
    """The unpacked llama.cpp source (holding `convert_hf_to_gguf.py`), fetched once.

    Args:
        fetch: download and unpack the sdist when the source is not there yet (else raise).
        say: called with a line of progress (download, unpack).

    Raises:
        ExportError: the source is missing and `fetch` is False, or pip could not download the sdist
            (the message names the command and pip's last lines).
    """
    root = cache_dir()
    src = root / "src"
    if (src / "convert_hf_to_gguf.py").is_file():
        return src
    if not fetch:
        raise ExportError(f"llama.cpp's source is not in {src}; run `python -m pipeline llama-cpp` to fetch it "
                          f"(llama-cpp-python {LLAMA_CPP_PYTHON}'s sdist from the package index).")
    with _lock(root / ".source.lock"):
        if (src / "convert_hf_to_gguf.py").is_file():
            return src
        sdist = _download_sdist(root / "sdist", say)
        (say or (lambda _: None))(f"Unpacking llama.cpp from {sdist.name}…")
        staging = Path(tempfile.mkdtemp(prefix=".src.staging-", dir=root))
        try:
            with tarfile.open(sdist) as archive:
                members = [m for m in archive.getmembers() if m.name.startswith(SDIST_PREFIX)]
                if not members:
                    raise ExportError(f"{sdist} holds no {SDIST_PREFIX}: not the sdist this project expects.")
                for member in members:
                    member.name = member.name[len(SDIST_PREFIX):]
                archive.extractall(staging, members=[m for m in members if m.name], filter="data")
            if src.exists():
                shutil.rmtree(src)
            staging.rename(src)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return src


def _download_sdist(folder: Path, say: Callable[[str], None] | None) -> Path:
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if (folder / name).is_file():
        return folder / name
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(folder)]
    (say or (lambda _: None))(f"Downloading llama.cpp's source (llama-cpp-python {LLAMA_CPP_PYTHON} sdist, ~75 MB)…")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not (folder / name).is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise ExportError(f"Could not download llama.cpp's source with `{' '.join(command[2:])}`:\n{tail}\n"
                          "The package index must be reachable (pip's index settings apply).")
    return folder / name


def converter_command(model_dir: str | os.PathLike, outfile: str | os.PathLike, outtype: str, *,
                      mmproj: bool = False) -> list[str]:
    """The command line of llama.cpp's own converter for a Hugging Face model folder.

    Args:
        model_dir: a transformers model folder (config.json, safetensors, tokenizer, chat template).
        outfile: the GGUF file to write.
        outtype: `f32`, `f16`, `bf16` or `q8_0` (the converter's `--outtype`).
        mmproj: write the multimodal projector (Gemma 4: the vision and `gemma4a` audio encoders) instead
            of the language model (`--mmproj`).
    """
    command = [sys.executable, str(source_dir() / "convert_hf_to_gguf.py"), str(model_dir),
               "--outfile", str(outfile), "--outtype", outtype]
    return command + (["--mmproj"] if mmproj else [])


def converter_env() -> dict[str, str]:
    """The environment the converter runs in: offline (`HF_HUB_OFFLINE=1`: it only reads the folder it
    is given), the vendored `gguf-py` on `PYTHONPATH` (the converter also puts it first itself)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    gguf_py = str(source_dir() / "gguf-py")
    env["PYTHONPATH"] = os.pathsep.join([gguf_py] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def bin_dir() -> Path:
    """Where the built tools are: `cache_dir()/build/bin`."""
    return cache_dir() / "build" / "bin"


def built_tools() -> dict[str, Path]:
    """The tools of `TOOLS` already built, by name."""
    return {name: bin_dir() / name for name in TOOLS if (bin_dir() / name).is_file()}


def tool(name: str, *, build: bool = True, say: Callable[[str], None] | None = None) -> Path:
    """The path of llama.cpp tool `name` (one of `TOOLS`), building the missing tools first when `build`.

    Raises:
        ExportError: `name` is not one of `TOOLS`; it is not built and `build` is False; or the build fails.
    """
    if name not in TOOLS:
        raise ExportError(f"`{name}` is not a llama.cpp tool this project builds; expected one of {', '.join(TOOLS)}.")
    path = bin_dir() / name
    if path.is_file():
        return path
    if not build:
        raise ExportError(f"llama.cpp's `{name}` is not built yet ({path}); run `python -m pipeline llama-cpp --build` "
                          "(minutes: it compiles llama.cpp's CPU backend).")
    build_tools(say=say)
    return path


def build_tools(targets: tuple[str, ...] = TOOLS, *, jobs: int | None = None,
                say: Callable[[str], None] | None = None) -> dict:
    """Configure (once) and build `targets` from `source_dir()` with cmake into `cache_dir()/build`.

    Returns the build record `{"targets", "seconds", "jobs", "cpus", "load_average", "built_at"}`, also
    added to `cache_dir()/build.json` (the README's build time comes from there). Already built targets
    make this quick (cmake checks them).

    Raises:
        ExportError: cmake or a C++ compiler is missing (names the packages to install), or the build
            fails (the log's last lines and its path).
    """
    missing = [t for t in ("cmake", "c++") if shutil.which(t) is None]
    if missing:
        raise ExportError(f"Building llama.cpp needs {' and '.join(missing)}: install them (Debian/Ubuntu: "
                          "`apt-get install cmake g++`; macOS: `xcode-select --install` and `brew install cmake`).")
    src = source_dir(say=say)
    root = cache_dir()
    build = root / "build"
    jobs = jobs or os.cpu_count() or 2
    with _lock(root / ".build.lock"):
        started = time.monotonic()
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        log = root / "build.log"
        with open(log, "w", encoding="utf-8") as out:
            if not (build / "CMakeCache.txt").is_file():
                (say or (lambda _: None))("Configuring llama.cpp (cmake)…")
                _run(["cmake", "-S", str(src), "-B", str(build), *CMAKE_OPTIONS], out, log)
            (say or (lambda _: None))(f"Building {', '.join(targets)} with {jobs} jobs (minutes on a laptop)…")
            _run(["cmake", "--build", str(build), "--target", *targets, "-j", str(jobs)], out, log)
        record = {"targets": list(targets), "seconds": round(time.monotonic() - started, 1), "jobs": jobs,
                  "cpus": os.cpu_count(), "load_average_at_start": load, "built_at": time.strftime("%Y-%m-%d %H:%M")}
        history = build_history()
        atomic_write_json(root / "build.json", {"builds": history + [record]})
    return record


def _run(command: list[str], out, log: Path) -> None:
    out.write("$ " + " ".join(command) + "\n")
    out.flush()
    done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        out.flush()
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
        raise ExportError(f"Building llama.cpp failed (`{' '.join(command[:3])} ...`, exit {done.returncode}); "
                          f"the whole log is {log}:\n{tail}")


def build_history() -> list[dict]:
    """Every build recorded in `cache_dir()/build.json` (oldest first); [] when none."""
    try:
        return list(json.loads((cache_dir() / "build.json").read_text(encoding="utf-8")).get("builds") or [])
    except (OSError, ValueError):
        return []


def status() -> dict:
    """Where llama.cpp is on this computer: `{"llama_cpp_python", "cache_dir", "source", "converter",
    "tools" (name -> path or None), "builds"}` (no download, no build)."""
    src = cache_dir() / "src"
    have_src = (src / "convert_hf_to_gguf.py").is_file()
    return {"llama_cpp_python": LLAMA_CPP_PYTHON, "cache_dir": str(cache_dir()),
            "source": str(src) if have_src else None,
            "converter": str(src / "convert_hf_to_gguf.py") if have_src else None,
            "tools": {name: str(bin_dir() / name) if (bin_dir() / name).is_file() else None for name in TOOLS},
            "builds": build_history()}
