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
        build-<cpu>-<variant>/bin/   the tools built from src (`TOOLS`), only those, for one kind of CPU
        cpu-<cpu>.json               which variant of the build passed the smoke answer on that kind of CPU
        build.json                   how long each build took, on which machine, how busy it was

Every build is made for the CPU it runs on and proved there before it is used (`build_tools`):
- `<cpu>` is `cpu_key()`, the processor's architecture and instruction-set flags, so a cache copied from
  another computer (a shared home, a container image) is never taken for this one's: a CPU with other flags
  builds its own.
- The `native` variant is ggml's `GGML_NATIVE` build (`-march=native`) less the AMX kernels: on an Intel Xeon
  with AMX (`amx_int8` in /proc/cpuinfo) a native build died with SIGILL in ggml's AMX q8_0 kernel
  (`tilezero` in `tinygemm_kernel_amx`) as soon as `llama-mtmd-cli` answered a clip (FIELD_NOTES, turn 5).
- After the build, `smoke_answer` makes a tiny random Gemma 4 GGUF (the product's own stand-in and llama.cpp's
  own converter) and has `llama-mtmd-cli` answer a clip with it. A variant that dies on an illegal instruction
  is replaced by the `portable` variant (`GGML_NATIVE=OFF`, SSE4.2 at most: any x86-64 CPU of the last 15
  years), proved the same way.

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

import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

from pipeline.errors import ExportError
from pipeline.fileio import UnsafeArchiveMember, atomic_write_json, extract_tar, staged_folder, writer_gone

LLAMA_CPP_PYTHON = "0.3.36"
"""The llama-cpp-python release whose sdist carries the llama.cpp source used here (its `vendor/llama.cpp`)."""

TOOLS = ("llama-mtmd-cli", "llama-quantize", "llama-completion")
"""The cmake targets this project needs: the multimodal CLI (the proof that an export hears), the
quantizer (`--quant q4_k_m`) and the text CLI (`llama-completion`: a Gemma 3n text-only GGUF answers a
typed question in it; ~10 s more once the libraries are built). `llama-server` is left out: it is not
needed here and doubles the build."""

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
"""cmake options of every build (llama.cpp's CMakeLists.txt `option(...)`s): no tests, examples, server or
network. The CPU backend's instruction sets are the variant's (`VARIANT_OPTIONS`)."""

NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
"""Compiler flags that keep ggml's AMX kernels out of a native build (GCC and Clang keep an explicit `-mno-`
whatever `-march=native` enables; ggml compiles its AMX code only under `__AMX_INT8__`). Measured on a Xeon
with AMX: the native build with them answered clips, without them it died with SIGILL (FIELD_NOTES, turn 5)."""

VARIANT_OPTIONS = {
    "native": ("-DGGML_NATIVE=ON",),
    "portable": ("-DGGML_NATIVE=OFF", "-DGGML_SSE42=ON", "-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_BMI2=OFF",
                 "-DGGML_FMA=OFF", "-DGGML_F16C=OFF", "-DGGML_AVX512=OFF", "-DGGML_AMX_TILE=OFF",
                 "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"),
}
"""The builds tried, in order (ggml/CMakeLists.txt's instruction-set options): `native` is tuned to the CPU
that builds it (on x86 less AMX, `NO_AMX_FLAGS`); `portable` is the fall-back when the native one dies on an
illegal instruction: SSE4.2 at most, slower, runs on any x86-64 CPU made since about 2009."""

ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
             "avx512dq", "avx512cd", "avx512_vbmi", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_int8", "amx_bf16", "sve", "sve2", "asimddp", "i8mm", "bf16")
"""The /proc/cpuinfo flags that change what a native ggml build may contain (its `-march=native` and the
kernels ggml compiles for them); `cpu_key` hashes the ones this CPU has."""

SIGILL_EXIT_CODES = (-signal.SIGILL, 128 + signal.SIGILL)
"""How a process that ran an instruction its CPU refuses ends: killed by SIGILL (subprocess's -4), or a shell's
132 for the same."""

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
        with staged_folder(src) as staging:  # a killed unpack leaves no half `src/` (fileio.staged_folder)
            with tarfile.open(sdist) as archive:
                members = [m for m in archive.getmembers() if m.name.startswith(SDIST_PREFIX)]
                if not members:
                    raise ExportError(f"{sdist} holds no {SDIST_PREFIX}: not the sdist this project expects.")
                for member in members:
                    member.name = member.name[len(SDIST_PREFIX):]
                _extract_safely(archive, [m for m in members if m.name], staging)
    return src


def _extract_safely(archive: tarfile.TarFile, members: list[tarfile.TarInfo], target: Path) -> None:
    """`pipeline.fileio.extract_tar` of `members` into `target`.

    Raises:
        ExportError: a member would land outside `target` or is not a plain file (named, with what to do)."""
    try:
        extract_tar(archive, target, members)
    except UnsafeArchiveMember as error:
        raise ExportError(f"llama.cpp's source archive holds {error}: not the sdist this project expects. Delete "
                          f"{cache_dir() / 'sdist'} and run `python -m pipeline llama-cpp --build` again.") from error


def _download_sdist(folder: Path, say: Callable[[str], None] | None) -> Path:
    """The sdist in `folder`, downloaded by pip into a staging folder first and moved in whole, so a download
    that was cut (a kill, a closed terminal) is never taken for the file."""
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if (folder / name).is_file():
        return folder / name
    folder.mkdir(parents=True, exist_ok=True)
    for leftover in folder.glob(".download-*-*"):  # a download killed half-way: its process is gone
        pid = leftover.name.split("-")[1]
        if pid.isdigit() and writer_gone(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f".download-{os.getpid()}-", dir=folder) as staging:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", staging]
        (say or (lambda _: None))(f"Downloading llama.cpp's source (llama-cpp-python {LLAMA_CPP_PYTHON} sdist, ~75 MB)…")
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not (Path(staging) / name).is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise ExportError(f"Could not download llama.cpp's source with `{' '.join(command[2:-2])}`:\n{tail}\n"
                              "The package index must be reachable (pip's index settings apply).")
        os.replace(Path(staging) / name, folder / name)
    return folder / name


def converter_command(model_dir: str | os.PathLike, outfile: str | os.PathLike, outtype: str, *,
                      mmproj: bool = False, model_name: str | None = None) -> list[str]:
    """The command line of llama.cpp's own converter for a Hugging Face model folder.

    Args:
        model_dir: a transformers model folder (config.json, safetensors, tokenizer, chat template).
        outfile: the GGUF file to write.
        outtype: `f32`, `f16`, `bf16` or `q8_0` (the converter's `--outtype`).
        mmproj: write the multimodal projector (Gemma 4: the vision and `gemma4a` audio encoders) instead
            of the language model (`--mmproj`).
        model_name: the GGUF's `general.name` (`--model-name`; default: the converter's guess from the folder).
    """
    command = [sys.executable, str(source_dir() / "convert_hf_to_gguf.py"), str(model_dir),
               "--outfile", str(outfile), "--outtype", outtype]
    return command + (["--mmproj"] if mmproj else []) + (["--model-name", model_name] if model_name else [])


def converter_env() -> dict[str, str]:
    """The environment the converter runs in: offline (`HF_HUB_OFFLINE=1`: it only reads the folder it
    is given), the vendored `gguf-py` on `PYTHONPATH` (the converter also puts it first itself)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    gguf_py = str(source_dir() / "gguf-py")
    env["PYTHONPATH"] = os.pathsep.join([gguf_py] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def cpu_key() -> str:
    """A short name for this kind of CPU: its architecture and a hash of its instruction-set flags
    (`ISA_FLAGS` present in /proc/cpuinfo; on other systems the processor's name), e.g. `x86_64-3f9c2a1b`.
    Two computers with the same key can run each other's native build."""
    machine = platform.machine() or "cpu"
    flags = cpu_flags()
    described = " ".join(sorted(flags & set(ISA_FLAGS))) if flags else (platform.processor() or "")
    return f"{machine}-{hashlib.sha1(described.encode()).hexdigest()[:8]}"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The first `flags` (x86) or `Features` (Arm) line of `cpuinfo`, as a set; empty where there is none."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.split(":")[0].strip() in ("flags", "Features"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def build_dir(variant: str) -> Path:
    """Where variant `variant` (`VARIANT_OPTIONS`) is built for this CPU: `cache_dir()/build-<cpu_key>-<variant>`."""
    return cache_dir() / f"build-{cpu_key()}-{variant}"


def _proved_path() -> Path:
    return cache_dir() / f"cpu-{cpu_key()}.json"


def proved_variant() -> dict | None:
    """The record of the build that passed the smoke answer on this kind of CPU (`{"variant", "smoke",
    "cpu_key", ...}`), or None when none has yet (or its tools are gone)."""
    try:
        record = json.loads(_proved_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("variant") not in VARIANT_OPTIONS or not all(
            (build_dir(record["variant"]) / "bin" / name).is_file() for name in TOOLS):
        return None
    return record


def bin_dir() -> Path:
    """Where the built tools for this CPU are: the proved variant's `bin/`, else the native one's (not built yet)."""
    record = proved_variant()
    return build_dir(record["variant"] if record else "native") / "bin"


def built_tools() -> dict[str, Path]:
    """The tools of `TOOLS` built for this CPU and proved by the smoke answer, by name."""
    if proved_variant() is None:
        return {}
    return {name: bin_dir() / name for name in TOOLS if (bin_dir() / name).is_file()}


def tool(name: str, *, build: bool = True, say: Callable[[str], None] | None = None) -> Path:
    """The path of llama.cpp tool `name` (one of `TOOLS`) built for this CPU, building (and proving) the tools
    first when `build`.

    Raises:
        ExportError: `name` is not one of `TOOLS`; it is not built and `build` is False; or the build fails.
    """
    if name not in TOOLS:
        raise ExportError(f"`{name}` is not a llama.cpp tool this project builds; expected one of {', '.join(TOOLS)}.")
    if name in built_tools():
        return built_tools()[name]
    if not build:
        raise ExportError(f"llama.cpp's `{name}` is not built for this computer's CPU yet ({bin_dir()}); run "
                          "`python -m pipeline llama-cpp --build` (minutes: it compiles llama.cpp's CPU backend).")
    build_tools(say=say)
    return built_tools()[name]


def died_on_illegal_instruction(returncode: int | None) -> bool:
    """Whether a process's exit status says it ran an instruction this CPU does not run (SIGILL)."""
    return returncode in SIGILL_EXIT_CODES


def illegal_instruction_advice(name: str) -> str:
    """The sentence for a llama.cpp tool that died on an illegal instruction: what happened and what to do."""
    return (f"llama.cpp's `{name}` stopped on an instruction this computer's processor does not run (SIGILL): "
            "it was built for another CPU. Run `python -m pipeline llama-cpp --build --portable` to build the "
            "slower build that runs on any x86-64 CPU, then try again.")


def build_tools(targets: tuple[str, ...] = TOOLS, *, jobs: int | None = None, variants: tuple[str, ...] | None = None,
                smoke: Callable[[Path], None] | None = None, say: Callable[[str], None] | None = None) -> dict:
    """Build `targets` for this CPU and prove them: each variant in turn (`VARIANT_OPTIONS`: native, then
    portable) is configured (once) and built with cmake into `build_dir(variant)`, then `smoke` (default
    `smoke_answer`) runs it; the first variant whose smoke answer does not die on an illegal instruction is
    recorded for this CPU (`cpu-<cpu_key>.json`) and used from then on.

    Returns the build record `{"targets", "variant", "variants_tried", "seconds", "smoke_seconds", "jobs", "cpus",
    "cpu_key", "load_average_at_start", "built_at"}`, also added to `cache_dir()/build.json` (the README's build
    time comes from there). Already built targets make this quick (cmake checks them).

    Raises:
        ExportError: cmake or a C++ compiler is missing (names the packages to install), a build fails (the log's
            last lines and its path), the smoke answer fails for another reason than an illegal instruction,
            or every variant died on one.
    """
    missing = [t for t in ("cmake", "c++") if shutil.which(t) is None]
    if missing:
        raise ExportError(f"Building llama.cpp needs {' and '.join(missing)}: install them (Debian/Ubuntu: "
                          "`apt-get install cmake g++`; macOS: `xcode-select --install` and `brew install cmake`).")
    src = source_dir(say=say)
    root = cache_dir()
    jobs = jobs or os.cpu_count() or 2
    say = say or (lambda _: None)
    smoke = smoke or (lambda bin_folder: smoke_answer(bin_folder, say=say))
    tried: list[str] = []
    with _lock(root / ".build.lock"):
        started = time.monotonic()
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        (root / "build.log").write_text("", encoding="utf-8")  # this build's log only (each variant appends)
        _proved_path().unlink(missing_ok=True)  # proved again below: a build killed from here on proves nothing
        for variant in variants or tuple(VARIANT_OPTIONS):
            tried.append(variant)
            _build_variant(src, variant, targets, jobs, say)
            smoke_started = time.monotonic()
            try:
                smoke(build_dir(variant) / "bin")
            except IllegalInstruction as died:
                say(f"The {variant} build died on this CPU ({died}); trying the next build.")
                continue
            record = {"targets": list(targets), "variant": variant, "variants_tried": tried,
                      "seconds": round(time.monotonic() - started, 1),
                      "smoke_seconds": round(time.monotonic() - smoke_started, 1), "jobs": jobs,
                      "cpus": os.cpu_count(), "cpu_key": cpu_key(), "load_average_at_start": load,
                      "built_at": time.strftime("%Y-%m-%d %H:%M")}
            atomic_write_json(_proved_path(), dict(record, smoke="answered a clip"))
            atomic_write_json(root / "build.json", {"builds": build_history() + [record]})
            return record
    raise ExportError(f"Every llama.cpp build tried ({', '.join(tried)}) died on an instruction this computer's "
                      f"processor does not run (SIGILL), even the portable one; its log is {root / 'build.log'}. "
                      "Please report the processor (`lscpu`) with that log.")


BUILDING_MARKER = "building.json"
"""Written in a variant's build folder while cmake builds it (`{"pid"}`), removed when the build ends. Found
with its process gone, it says a build was killed (SIGKILL, a closed terminal) and may have left a cut object
file or binary newer than its source, which make would take as up to date: the next build cleans first."""


def _build_variant(src: Path, variant: str, targets: tuple[str, ...], jobs: int, say: Callable[[str], None]) -> None:
    """Configure and build `targets` of `variant` in `build_dir(variant)`. The configure step runs every time
    (seconds; it is idempotent, and a killed one leaves a `CMakeCache.txt` that cannot be trusted); a build
    that was killed half-way (`BUILDING_MARKER`) is rebuilt from clean (`--clean-first`)."""
    build = build_dir(variant)
    build.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / "build.log"
    options = list(CMAKE_OPTIONS) + list(VARIANT_OPTIONS[variant])
    if variant == "native" and platform.machine().lower() in ("x86_64", "amd64", "i686", "x86"):
        options += [f"-DCMAKE_C_FLAGS={NO_AMX_FLAGS}", f"-DCMAKE_CXX_FLAGS={NO_AMX_FLAGS}"]
    marker = build / BUILDING_MARKER
    killed = _killed_build(marker)
    with open(log, "a", encoding="utf-8") as out:
        say(f"Configuring llama.cpp's {variant} build (cmake)…")
        _run(["cmake", "-S", str(src), "-B", str(build), *options], out, log)
        if killed:
            say(f"The last {variant} build was stopped half-way: building it again from clean.")
        say(f"Building {', '.join(targets)} ({variant}) with {jobs} jobs (minutes on a laptop)…")
        atomic_write_json(marker, {"pid": os.getpid()})
        _run(["cmake", "--build", str(build), "--target", *targets, "-j", str(jobs)]
             + (["--clean-first"] if killed else []), out, log)
        marker.unlink(missing_ok=True)


def _killed_build(marker: Path) -> bool:
    """Whether `marker` (`BUILDING_MARKER`) says a build was killed: it is there and its writer is gone."""
    try:
        pid = int(json.loads(marker.read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return marker.exists()
    return writer_gone(pid)


class IllegalInstruction(ExportError):
    """A llama.cpp tool died on an instruction this CPU does not run (SIGILL)."""


SMOKE_CLIP = Path(__file__).resolve().parents[2] / "sample_data" / "speechocean762-pack" / "WAVE" / "SPEAKER0001" / "000010011.WAV"
"""The clip the smoke answer hears: a real learner's recording from the sample pack."""


def smoke_answer(bin_folder: Path, *, say: Callable[[str], None] | None = None) -> str:
    """Prove a build on this CPU: write a tiny random Gemma 4 (`make_tiny` of the gemma4 family), convert it with
    llama.cpp's own converter to a q8_0 GGUF (the export's default, whose kernel died on AMX) and an F16 audio
    projector, and have `bin_folder/llama-mtmd-cli` answer `SMOKE_CLIP` with 4 tokens. Takes about a minute.

    Returns:
        The tool's answer (the text of a random model: its content means nothing, its arrival does).

    Raises:
        IllegalInstruction: the tool died on an illegal instruction.
        ExportError: the stand-in, the conversion or the answer failed otherwise (the output's last lines).
    """
    from pipeline.model.catalog import FAMILIES

    (say or (lambda _: None))("Proving the build on this CPU: a tiny Gemma 4 answers a clip in llama-mtmd-cli…")
    with tempfile.TemporaryDirectory(prefix="llama-smoke-") as folder:
        work = Path(folder)
        model = FAMILIES["gemma4"].make_tiny(work / "tiny", seed=0)
        for outfile, outtype, mmproj in ((work / "m.gguf", "q8_0", False), (work / "mmproj.gguf", "f16", True)):
            done = subprocess.run(converter_command(model, outfile, outtype, mmproj=mmproj), env=converter_env(),
                                  capture_output=True, text=True)
            if done.returncode != 0 or not outfile.is_file():
                raise ExportError(f"The smoke answer's conversion failed (exit {done.returncode}):\n"
                                  + "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:]))
        command = [str(bin_folder / "llama-mtmd-cli"), "-m", str(work / "m.gguf"), "--mmproj", str(work / "mmproj.gguf"),
                   "--jinja", "--temp", "0", "-n", "4", "-t", "1", "--audio", str(SMOKE_CLIP), "-p", "Say it again."]
        done = subprocess.run(command, capture_output=True, timeout=300)
    if died_on_illegal_instruction(done.returncode):
        raise IllegalInstruction(f"llama-mtmd-cli exit {done.returncode}")
    if done.returncode != 0:
        tail = "\n".join(done.stderr.decode("utf-8", "replace").strip().splitlines()[-10:])
        raise ExportError(f"The smoke answer of llama-mtmd-cli failed (exit {done.returncode}):\n{tail}")
    return done.stdout.decode("utf-8", "replace")


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
    "cpu_key", "variant" (the build proved on this CPU, or None), "tools" (name -> path, None where not built and
    proved for this CPU), "builds"}` (no download, no build)."""
    src = cache_dir() / "src"
    have_src = (src / "convert_hf_to_gguf.py").is_file()
    proved = proved_variant()
    tools = built_tools()
    return {"llama_cpp_python": LLAMA_CPP_PYTHON, "cache_dir": str(cache_dir()),
            "source": str(src) if have_src else None,
            "converter": str(src / "convert_hf_to_gguf.py") if have_src else None,
            "cpu_key": cpu_key(), "variant": proved["variant"] if proved else None,
            "tools": {name: str(tools[name]) if name in tools else None for name in TOOLS},
            "builds": build_history()}
