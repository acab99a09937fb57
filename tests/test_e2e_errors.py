"""End-to-end: what a new user sees when something is wrong, in headless Chromium (no training needed).

Every failure shows in the tab's own status panel, rendered as Markdown (code in `code`, no literal
backticks), in plain words: no error toasts that stack up ("Error (2)") over the audio widget, and no
red "Error" badges on the outputs. Covers the Samples checks (not audio, too long with and without the
trim box, blank feedback), Resume with nothing picked, and the Try tab's errors. Screenshots go to
`artifacts/screenshots/`.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.test_e2e import CHROMIUM, CHROMIUM_ARGS, _shot, _tab, _wait_text, running_app  # noqa: F401

pytestmark = pytest.mark.e2e


def _upload(page, elem_id: str, path: Path) -> None:
    clear = page.locator(f"#{elem_id} button[aria-label='Clear']")
    if clear.count():
        clear.first.click()
        time.sleep(0.5)
    page.locator(f"#{elem_id} button[aria-label='Upload file']").click()
    page.locator(f"#{elem_id} input[type=file]").set_input_files(str(path))


def _calm(page, panel: str) -> str:
    """The panel's text, after checking there is no toast, no errored component and no literal backtick."""
    assert page.locator(".toast-body").count() == 0, page.locator(".toast-body").all_inner_texts()
    assert page.locator(".error").count() == 0, "a component is marked errored"
    text = page.locator(panel).inner_text()
    assert "`" not in text, f"Markdown not rendered: {text!r}"
    return text


def test_errors_show_in_calm_panels(running_app, tmp_path):  # noqa: F811
    from playwright.sync_api import sync_playwright

    url, _workspace, _first_page_s, _log = running_app
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("Kate's got some grey.\nSay GREY with a G.\n", encoding="utf-8")
    long_clip = tmp_path / "long-take.wav"
    rate = 16000
    t = np.arange(40 * rate) / rate
    voice = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    soundfile.write(str(long_clip), (0.4 * voice / np.abs(voice).max()).astype(np.float32), rate, subtype="PCM_16")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(url)
        page.wait_for_selector("#load-pack")

        # Samples: a text file renamed .wav is named for what it is, with the accepted formats.
        _upload(page, "sample-audio", not_audio)
        text = _wait_text(page, "#checks", r"✗", timeout_s=60)
        assert "notes.wav is not audio" in text and "Accepted audio formats" in text, text
        assert "Errno" not in text and "/tmp" not in text
        assert page.locator("#checks code").count(), "the file name is rendered as code"
        _calm(page, "#checks")
        _shot(page, "errors-1-not-audio")

        # A 40 s clip: the check says what the trim box does; ticking it re-checks with the trim.
        _upload(page, "sample-audio", long_clip)
        text = _wait_text(page, "#checks", r"40\.0 s", timeout_s=60)
        assert "Trim clips longer than 30 s" in text and "import" not in text.lower(), text
        page.check("#save-trim input")
        _wait_text(page, "#checks", r"trimmed from 40\.0 s", timeout_s=60)
        # Feedback made only of spaces fails "Check clip".
        page.locator("#sample-target textarea, #sample-target input").first.fill("Kate's got some grey.")
        page.locator("#sample-feedback textarea").first.fill("     ")
        page.click("#check-clip")
        text = _wait_text(page, "#checks", r"Not ready to save", timeout_s=60)
        assert "tutor feedback" in text and "All checks passed" not in text
        _calm(page, "#checks")
        _shot(page, "errors-2-blank-feedback")

        # Train: Resume with nothing picked says what to pick.
        _tab(page, "4 · Train")
        page.click("#resume-training")
        text = _wait_text(page, "#train-status", r"✗", timeout_s=30)
        assert "Stopped run to continue" in text
        _calm(page, "#train-status")

        # Try: two failed clicks leave one calm message, no toasts over the audio widget's buttons.
        _tab(page, "5 · Try")
        _upload(page, "try-audio", long_clip)
        page.wait_for_selector("#try-audio audio, #try-audio .waveform-container", state="attached")
        page.locator("#try-run input").first.fill("any-run")
        page.locator("#try-run input").first.press("Enter")
        for _ in range(2):
            page.click("#try-button")
            text = _wait_text(page, "#try-note", r"✗", timeout_s=60)
            time.sleep(1)
        assert "long-take.wav is 40.0 s" in text and "Trim it or split it" in text, text
        assert "import" not in text.lower() and "trimming on" not in text.lower()
        _calm(page, "#try-note")
        clear = page.locator("#try-audio button[aria-label='Clear']").first
        assert clear.is_visible()
        clear.click(timeout=5_000)  # nothing covers it
        _shot(page, "errors-3-try")
        browser.close()
