"""End-to-end: a 3-item recording session in the browser (uploaded real clips), then the dataset build.

A teacher pastes three sentences, sets the speaker once, and for each item uploads the clip, sees the
automatic check, types feedback and clicks Save and next (no retyping); the progress reads "2 of 3",
"3 of 3", then done; the three samples are in the library, and the Dataset tab builds from them.
Uses `tests/test_e2e.py`'s app fixture (a real `python app.py` on a free port, torn down afterwards).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.browser import open_tab, shot, wait_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ITEMS = {"000010011": "WE CALL IT BEAR", "000010035": "ZERO THREE FIVE ONE", "000010053": "THREE TWO TWO SEVEN"}


def test_recording_session_of_three_items_then_build(running_app, studio_page, speechocean_dir):
    page = studio_page
    _, workspace, _, _ = running_app
    clips = {}
    for utt in ITEMS:
        clips[utt] = workspace.parent / f"{utt}.wav"
        shutil.copyfile(speechocean_dir / "WAVE" / "SPEAKER0001" / f"{utt}.WAV", clips[utt])
    page.click("#make-tiny")
    wait_text(page, "#model-note", r"random weights", timeout_s=180)

    page.get_by_text("Recording session: a list, one clip after another").click()
    page.locator("#session-items textarea").first.fill("\n".join(ITEMS.values()))
    page.locator("#session-speaker input, #session-speaker textarea").first.fill("0001")
    page.click("#session-start")
    wait_text(page, "#session-progress", r"1 of 3")
    for number, (utt, sentence) in enumerate(ITEMS.items(), start=1):
        wait_text(page, "#session-item", sentence)
        page.locator("#session-audio button[aria-label='Upload file']").click()
        page.locator("#session-audio input[type=file]").set_input_files(str(clips[utt]))
        wait_text(page, "#session-checks", r"duration", timeout_s=60)
        page.locator("#session-feedback textarea").first.fill(f"Feedback {number}.")
        page.wait_for_selector("#session-audio audio, #session-audio .waveform-container", state="attached")
        page.click("#session-save")
        expected = rf"{number + 1} of 3 · {number} saved" if number < 3 else r"done: 3 saved of 3"
        wait_text(page, "#session-progress", expected, timeout_s=60)
        wait_text(page, "#session-status", r"Saved")
    wait_text(page, "#samples-table", r"THREE TWO TWO SEVEN")
    table = page.locator("#samples-table").inner_text()
    assert all(sentence in table for sentence in ITEMS.values())
    shot(page, "1-samples-session")

    page.reload()  # closing the tab keeps the session where it was
    page.wait_for_selector("#load-pack")
    page.get_by_text("Recording session: a list, one clip after another").click()
    wait_text(page, "#session-progress", r"done: 3 saved of 3", timeout_s=30)

    open_tab(page, "2 · Dataset")
    page.click("#build-dataset")
    wait_text(page, "#dataset-summary", r"\d+ to train on, \d+ to test", timeout_s=180)
    assert (workspace / "dataset" / "dataset_dict.json").exists()
    report = json.loads((workspace / "dataset" / "build_report.json").read_text())
    assert report["kinds"]["read_aloud"]["rows"] == 3 and sum(report["splits"].values()) == 3
