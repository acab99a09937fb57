"""The GGUF export's choices (issue 43): q8_0 (default), q5_k_m, q4_k_m and f16 with their expected sizes in the
app and the CLI; a q4_k_m export of a dataset with clips over 15 s warns and suggests q5_k_m; a Gemma 3n run is
offered its text-only GGUF, named "text only: this file cannot hear" wherever it is offered or listed."""

from __future__ import annotations

import json

import pytest


def test_the_app_offers_four_sizes_with_this_runs_expected_bytes():
    from pipeline.export.gguf import QUANTS, expected_gguf_bytes
    from ui.common import quant_choices

    gib = 2 ** 30
    choices = quant_choices({"merged_bytes": 10 * gib})
    assert [value for _, value in choices] == ["q8_0", "q5_k_m", "q4_k_m", "f16"]
    assert "default" in choices[0][0] and "q5_k_m" in QUANTS
    sizes = [expected_gguf_bytes(10 * gib, q) for _, q in choices]
    assert sizes[0] > sizes[1] > sizes[2] and sizes[3] == 10 * gib
    assert all("about" in label for label, _ in choices)
    assert all("about" not in label for label, _ in quant_choices(None))  # no run: no size guessed


def _workspace_with_clips(root, longest_s: float):
    folder = root / "dataset"
    folder.mkdir(parents=True)
    (folder / "build_report.json").write_text(json.dumps({"length_stats": {"max_clip_s": 3.0,
                                                                            "eval_max_clip_s": longest_s}}))
    return root


@pytest.mark.parametrize("longest_s, quant, warns", [(16.2, "q4_k_m", True), (16.2, "q5_k_m", False),
                                                      (16.2, "q8_0", False), (15.0, "q4_k_m", False)])
def test_q4_k_m_warns_when_a_clip_is_longer_than_15_s(tmp_path, longest_s, quant, warns):
    from pipeline.export.gguf import long_clip_warning

    warning = long_clip_warning(_workspace_with_clips(tmp_path / "ws", longest_s), quant)
    assert bool(warning) is warns
    if warns:
        assert "16.2 s" in warning and "q5_k_m" in warning


def test_no_dataset_no_warning(tmp_path):
    from pipeline.export.gguf import long_clip_warning

    assert long_clip_warning(tmp_path, "q4_k_m") is None


def test_a_gemma_3n_run_is_offered_its_text_only_file_by_that_name(tmp_path):
    from pipeline.export.gguf import TEXT_ONLY
    from ui.common import export_choices, export_choices_note
    from ui.try_view import export_markdown

    preview = {"family": "Gemma 3n", "gguf": False, "merged_bytes": 2 ** 30}
    choices = dict((value, label) for label, value in export_choices(tmp_path, "walk", preview))
    assert "gguf" not in choices and TEXT_ONLY in choices["gguf-text-only"]
    assert TEXT_ONLY in export_choices_note(tmp_path, "walk", preview)
    gemma4 = dict((value, label) for label, value in export_choices(tmp_path, "g4", {"family": "Gemma 4", "gguf": True}))
    assert "gguf" in gemma4 and "gguf-text-only" not in gemma4
    listed = export_markdown("walk", {"format": "gguf", "path": "/x/walk-gguf", "bytes": 10, "projector": None,
                                      "files": {"walk.gguf": 10}, "notes": []})
    assert "cannot hear" in listed


def test_the_cli_lists_every_quant_with_its_size(capsys):
    from pipeline.export.cli import export_main

    with pytest.raises(SystemExit):
        export_main(["--help"])
    out = capsys.readouterr().out
    for quant in ("q8_0 ~53%", "q5_k_m ~36%", "q4_k_m ~31%", "f16 ~100%"):
        assert quant in " ".join(out.split()), quant
