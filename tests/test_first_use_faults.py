"""Faults a new user met on the command line (a fresh helper following only the docs, 2026-12-07): a stand-in
written over a teacher's folder, `--out` naming a file, a stand-in GGUF that llama.cpp cannot load."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError, ExportError


@pytest.mark.parametrize("kind", ["file", "folder with files"])
def test_the_stand_in_is_never_written_over_a_file_or_a_folder_that_holds_other_things(tmp_path, kind):
    from pipeline.model.tiny_gemma3n import make_tiny_gemma3n

    target = tmp_path / "mydocs"
    if kind == "file":
        target.write_text("hi")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("important")
    with pytest.raises(ConfigError, match="mydocs"):
        make_tiny_gemma3n(target)
    assert (target.read_text() if kind == "file" else (target / "notes.txt").read_text()) in ("hi", "important")


def test_export_out_naming_a_file_gets_one_sentence(tmp_path):
    from pipeline.export.cli import export_main

    (tmp_path / "afile").write_text("hi")
    for out in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        with pytest.raises(ExportError, match="is a file, not a folder"):
            export_main(["--workspace", str(tmp_path / "ws"), "--run", "r", "--format", "adapter", "--out", str(out)])


def test_a_gguf_of_the_small_gemma3n_stand_in_warns_that_llama_cpp_will_not_load_it(tiny_model_dir, tiny_gemma4_dir):
    import json

    from pipeline.export.gguf import llama_cpp_load_warning
    from pipeline.model.catalog import FAMILIES, shipped_config_path
    from pipeline.model.tiny_gemma3n import llama_cpp_text_shapes

    gemma3n = FAMILIES["gemma3n"]
    warning = llama_cpp_load_warning(str(tiny_model_dir), gemma3n)
    assert warning and "--llama-cpp-shapes" in warning and "will not load" in warning
    assert llama_cpp_load_warning(str(tiny_gemma4_dir), FAMILIES["gemma4"]) is None  # its shapes come from its GGUF
    assert gemma3n.gguf_misfit(json.loads((tiny_model_dir / "config.json").read_text())) is not None
    assert gemma3n.gguf_misfit({"text_config": llama_cpp_text_shapes()}) is None
    for real in ("google/gemma-3n-E2B-it", "google/gemma-3n-E4B-it"):  # the hub's configs, shipped in assets/
        assert gemma3n.gguf_misfit(json.loads(shipped_config_path(real).read_text())) is None, real


def test_export_from_a_workspace_that_does_not_exist_says_so(tmp_path):
    from pipeline.export.tutor import read_run

    with pytest.raises(ExportError, match="workspace .* does not exist"):
        read_run(tmp_path / "nows", "try1")
