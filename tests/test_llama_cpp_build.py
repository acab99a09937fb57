"""llama.cpp's tools are built for the CPU that runs them and proved there before use
(`pipeline.export.llama_cpp.build_tools`): a build keyed by the CPU's instruction-set flags, a smoke answer after
every build, the portable build when the native one dies on an illegal instruction, and one sentence for a tool
that still does. cmake and the compiler are replaced here by a build that writes small shell tools; the real
build and its smoke answer run in `.ci/run` (`python -m pipeline llama-cpp --build`) and in tests/test_gguf.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.errors import ExportError
from pipeline.export import llama_cpp

ROOT = Path(__file__).resolve().parents[1]


def _write_tool(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture()
def fake_llama(tmp_path, monkeypatch):
    """A llama.cpp cache in `tmp_path` with its source in place, and a build whose tools die on an illegal
    instruction for the variants named in `dies` (a shell that kills itself with SIGILL, as a CPU does)."""
    monkeypatch.setenv("TUTOR_LLAMA_CPP_DIR", str(tmp_path / "llama"))
    (tmp_path / "llama" / "src").mkdir(parents=True)
    (tmp_path / "llama" / "src" / "convert_hf_to_gguf.py").write_text("# llama.cpp's converter\n")
    monkeypatch.setattr(llama_cpp.shutil, "which", lambda name: f"/usr/bin/{name}")
    state = {"dies": set(), "built": []}

    def build_variant(src, variant, targets, jobs, say):
        state["built"].append(variant)
        body = "kill -ILL $$" if variant in state["dies"] else f"echo answered by {variant}"
        for name in targets:
            _write_tool(llama_cpp.build_dir(variant) / "bin" / name, body)

    monkeypatch.setattr(llama_cpp, "_build_variant", build_variant)
    return state


def _smoke(bin_folder: Path) -> None:
    """The smoke answer's verdict on a tool, without the tiny model: run it and read its exit status."""
    done = subprocess.run([str(bin_folder / "llama-mtmd-cli")], capture_output=True)
    if llama_cpp.died_on_illegal_instruction(done.returncode):
        raise llama_cpp.IllegalInstruction(f"exit {done.returncode}")
    assert done.returncode == 0


def test_a_native_build_that_dies_on_an_illegal_instruction_falls_back_to_the_portable_one(fake_llama):
    fake_llama["dies"] = {"native"}
    record = llama_cpp.build_tools(smoke=_smoke)
    assert fake_llama["built"] == ["native", "portable"]
    assert record["variant"] == "portable" and record["variants_tried"] == ["native", "portable"]
    assert llama_cpp.proved_variant()["variant"] == "portable"
    assert llama_cpp.tool("llama-mtmd-cli", build=False) == llama_cpp.build_dir("portable") / "bin" / "llama-mtmd-cli"
    assert llama_cpp.status()["variant"] == "portable"
    assert llama_cpp.build_history()[-1]["variant"] == "portable"


def test_a_native_build_that_answers_is_kept_and_not_rebuilt(fake_llama):
    record = llama_cpp.build_tools(smoke=_smoke)
    assert record["variant"] == "native" and fake_llama["built"] == ["native"]
    path = llama_cpp.tool("llama-quantize")
    assert path == llama_cpp.build_dir("native") / "bin" / "llama-quantize"
    assert fake_llama["built"] == ["native"], "a proved build was built again"


def test_every_build_dying_says_so_and_proves_nothing(fake_llama):
    fake_llama["dies"] = {"native", "portable"}
    with pytest.raises(ExportError, match="illegal|SIGILL"):
        llama_cpp.build_tools(smoke=_smoke)
    assert llama_cpp.proved_variant() is None and llama_cpp.built_tools() == {}


def test_a_build_from_another_cpu_is_not_taken_for_this_ones(fake_llama, monkeypatch):
    """A cache copied from another computer (shared home, container image): its build is keyed by that CPU's
    flags, so this CPU neither finds its tools nor runs them; it builds and proves its own."""
    llama_cpp.build_tools(smoke=_smoke)
    assert llama_cpp.built_tools()
    monkeypatch.setattr(llama_cpp, "cpu_flags", lambda: {"sse4_2", "avx", "avx2", "amx_int8", "amx_tile"})
    assert llama_cpp.built_tools() == {} and llama_cpp.proved_variant() is None
    with pytest.raises(ExportError, match="not built for this computer's CPU"):
        llama_cpp.tool("llama-mtmd-cli", build=False)


def test_the_cpu_key_follows_the_instruction_sets_and_ignores_other_flags(tmp_path, monkeypatch):
    read_flags = llama_cpp.cpu_flags

    def key_for(flags: str) -> str:
        info = tmp_path / "cpuinfo"
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\nbugs\t\t: spectre_v1\n")
        monkeypatch.setattr(llama_cpp, "cpu_flags", lambda: read_flags(info))
        return llama_cpp.cpu_key()

    avx2 = key_for("fpu sse4_2 avx avx2 fma f16c")
    assert key_for("fpu sse4_2 avx avx2 fma f16c hypervisor rdrand") == avx2, "a flag ggml ignores changed the key"
    assert key_for("fpu sse4_2 avx avx2 fma f16c avx512f amx_tile amx_int8") != avx2
    assert read_flags(tmp_path / "missing") == set()


def test_a_native_x86_build_leaves_the_amx_kernels_out_and_the_portable_one_uses_no_avx(monkeypatch, tmp_path):
    """What each variant asks cmake for (`_build_variant`'s command lines): the native build keeps ggml's
    `-march=native` less AMX; the portable one turns off every instruction set above SSE4.2."""
    monkeypatch.setenv("TUTOR_LLAMA_CPP_DIR", str(tmp_path))
    commands = []
    monkeypatch.setattr(llama_cpp, "_run", lambda command, out, log: commands.append(command))
    monkeypatch.setattr(llama_cpp.platform, "machine", lambda: "x86_64")
    for variant in ("native", "portable"):
        llama_cpp._build_variant(tmp_path / "src", variant, llama_cpp.TOOLS, 2, lambda _: None)
    native, portable = commands[0], commands[2]
    assert "-DGGML_NATIVE=ON" in native and f"-DCMAKE_CXX_FLAGS={llama_cpp.NO_AMX_FLAGS}" in native
    assert "amx-int8" in llama_cpp.NO_AMX_FLAGS and "amx-tile" in llama_cpp.NO_AMX_FLAGS
    assert "-DGGML_NATIVE=OFF" in portable and "-DGGML_AVX2=OFF" in portable and "-DGGML_AMX_INT8=OFF" in portable
    assert not any("amx" in part and "FLAGS" in part for part in portable)
    assert commands[1][:2] == ["cmake", "--build"] and str(llama_cpp.build_dir("native")) in commands[1]


def test_a_tool_that_dies_on_an_illegal_instruction_gets_one_sentence_that_says_what_to_do(tmp_path, monkeypatch):
    from pipeline.export import gguf

    dying = tmp_path / "llama-quantize"
    _write_tool(dying, "kill -ILL $$")
    monkeypatch.setattr(llama_cpp, "tool", lambda name, say=None: dying)
    (tmp_path / "in.gguf").write_bytes(b"GGUF")
    with pytest.raises(ExportError) as raised:
        gguf._quantize(tmp_path / "in.gguf", tmp_path / "out.gguf", "q4_k_m", lambda _: None)
    message = str(raised.value)
    assert "does not run (SIGILL)" in message and "llama-cpp --build --portable" in message
    assert "Traceback" not in message and message.count(". ") <= 2


def test_the_command_line_builds_the_portable_tools_when_asked(fake_llama, capsys, monkeypatch):
    from pipeline.export.cli import llama_cpp_main

    monkeypatch.setattr(llama_cpp, "smoke_answer", lambda bin_folder, say=None: _smoke(bin_folder))
    assert llama_cpp_main(["--build", "--portable"]) == 0
    out = capsys.readouterr().out
    assert fake_llama["built"] == ["portable"] and "portable, proved by a smoke answer" in out
    with pytest.raises(SystemExit):
        llama_cpp_main(["--portable"])


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_a_build_killed_half_way_is_built_again_from_clean(tmp_path, monkeypatch):
    """SIGKILL or a closed terminal during `cmake --build` can leave a cut object file or binary newer than its
    source, which make would take as built: the marker left by the killed build makes the next one clean first."""
    monkeypatch.setenv("TUTOR_LLAMA_CPP_DIR", str(tmp_path))
    commands = []
    monkeypatch.setattr(llama_cpp, "_run", lambda command, out, log: commands.append(command))
    marker = llama_cpp.build_dir("native") / llama_cpp.BUILDING_MARKER
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"pid": _dead_pid()}))
    lines = []
    llama_cpp._build_variant(tmp_path / "src", "native", llama_cpp.TOOLS, 2, lines.append)
    assert commands[0][:2] == ["cmake", "-S"], "the configure step is not run again after a kill"
    assert "--clean-first" in commands[1] and any("stopped half-way" in line for line in lines)
    assert not marker.exists()
    llama_cpp._build_variant(tmp_path / "src", "native", llama_cpp.TOOLS, 2, lines.append)
    assert "--clean-first" not in commands[3], "a build that ended cleanly was rebuilt from clean"


def test_a_build_that_does_not_end_leaves_no_proved_tools(fake_llama, monkeypatch):
    llama_cpp.build_tools(smoke=_smoke)
    assert llama_cpp.built_tools()

    def killed(*args):
        raise KeyboardInterrupt  # as a build stopped half-way: the binaries may be cut

    monkeypatch.setattr(llama_cpp, "_build_variant", killed)
    with pytest.raises(KeyboardInterrupt):
        llama_cpp.build_tools(smoke=_smoke)
    assert llama_cpp.built_tools() == {} and llama_cpp.proved_variant() is None


def test_a_cut_sdist_download_is_never_taken_for_the_file(tmp_path, monkeypatch):
    folder = tmp_path / "sdist"
    leftover = folder / f".download-{_dead_pid()}-x1"
    leftover.mkdir(parents=True)
    (leftover / "llama_cpp_python-cut.tar.gz").write_bytes(b"\x1f\x8b cut")
    name = f"llama_cpp_python-{llama_cpp.LLAMA_CPP_PYTHON}.tar.gz"

    def pip_download(command, **kwargs):
        staging = Path(command[-1])
        assert staging.parent == folder and staging.name.startswith(f".download-{os.getpid()}-")
        (staging / name).write_bytes(b"whole")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(llama_cpp.subprocess, "run", pip_download)
    path = llama_cpp._download_sdist(folder, None)
    assert path == folder / name and path.read_bytes() == b"whole"
    assert sorted(p.name for p in folder.iterdir()) == [name], "a killed download's folder was left behind"


@pytest.mark.parametrize("has_data_filter", [True, False])
def test_the_source_unpacks_on_pythons_without_tar_filters_and_nothing_lands_outside(tmp_path, monkeypatch,
                                                                                     has_data_filter):
    """Debian 12's Python 3.11.2 has no `extractall(filter=...)` (3.11.4+): a fresh machine's build stopped there.
    Both ways unpack a plain archive and refuse a member that would land outside the target."""
    import io
    import tarfile

    from pipeline.errors import ExportError

    if not has_data_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)

    def archive(names: list[str]) -> tarfile.TarFile:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name in names:
                info = tarfile.TarInfo(name)
                info.size = 2
                tar.addfile(info, io.BytesIO(b"ok"))
        buffer.seek(0)
        return tarfile.open(fileobj=buffer)

    with archive(["convert_hf_to_gguf.py", "ggml/CMakeLists.txt"]) as tar:
        llama_cpp._extract_safely(tar, tar.getmembers(), tmp_path / "good")
    assert (tmp_path / "good" / "ggml" / "CMakeLists.txt").read_bytes() == b"ok"
    with archive(["../evil.py"]) as tar, pytest.raises((ExportError, tarfile.TarError)):
        llama_cpp._extract_safely(tar, tar.getmembers(), tmp_path / "bad")
    assert not (tmp_path / "evil.py").exists()
