"""End-to-end: what a new user sees when something is wrong, in headless Chromium (no training needed).

Every failure shows in the tab's own status panel, rendered as Markdown (code in `code`, no literal
backticks), in plain words: no error toasts that stack up ("Error (2)") over the audio widget, and no
red "Error" badges on the outputs. Covers the Samples checks (not audio, too long with and without the
trim box, blank feedback), Resume with nothing picked, and the Try tab's errors. Screenshots go to
`artifacts/screenshots/`.
"""

from __future__ import annotations

import time

import pytest

from tests.browser import calm, open_tab, shot, upload, wait_text, write_voice

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_errors_show_in_calm_panels(studio_page, tmp_path):
    page = studio_page
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("Kate's got some grey.\nSay GREY with a G.\n", encoding="utf-8")
    long_clip = write_voice(tmp_path / "long-take.wav", seconds=40, noise=0)

    # Samples: a text file renamed .wav is named for what it is, with the accepted formats.
    upload(page, "sample-audio", not_audio)
    text = wait_text(page, "#checks", r"✗", timeout_s=60)
    assert "notes.wav is not audio" in text and "Accepted audio formats" in text, text
    assert "Errno" not in text and "/tmp" not in text
    assert page.locator("#checks code").count(), "the file name is rendered as code"
    calm(page, "#checks")
    shot(page, "errors-1-not-audio")

    # A 40 s clip: the check says what the trim box does; ticking it re-checks with the trim.
    upload(page, "sample-audio", long_clip)
    text = wait_text(page, "#checks", r"40\.0 s", timeout_s=60)
    assert "Trim clips longer than 30 s" in text and "import" not in text.lower(), text
    page.check("#save-trim input")
    wait_text(page, "#checks", r"trimmed from 40\.0 s", timeout_s=60)
    # Feedback made only of spaces fails "Check clip".
    page.locator("#sample-target textarea, #sample-target input").first.fill("Kate's got some grey.")
    page.locator("#sample-feedback textarea").first.fill("     ")
    page.click("#check-clip")
    text = wait_text(page, "#checks", r"Not ready to save", timeout_s=60)
    assert "tutor feedback" in text and "All checks passed" not in text
    calm(page, "#checks")
    shot(page, "errors-2-blank-feedback")

    # Train: Resume with nothing picked says what to pick.
    open_tab(page, "4 · Train")
    page.click("#resume-training")
    text = wait_text(page, "#train-status", r"✗", timeout_s=30)
    assert "Stopped run to continue" in text
    calm(page, "#train-status")

    # Try: two failed clicks leave one calm message, no toasts over the audio widget's buttons.
    open_tab(page, "5 · Try")
    upload(page, "try-audio", long_clip)
    page.wait_for_selector("#try-audio audio, #try-audio .waveform-container", state="attached")
    page.locator("#try-run input").first.fill("any-run")
    page.locator("#try-run input").first.press("Enter")
    for _ in range(2):
        page.click("#try-button")
        text = wait_text(page, "#try-note", r"✗", timeout_s=60)
        time.sleep(1)
    assert "long-take.wav is 40.0 s" in text and "Trim it or split it" in text, text
    assert "import" not in text.lower() and "trimming on" not in text.lower()
    calm(page, "#try-note")
    clear = page.locator("#try-audio button[aria-label='Clear']").first
    assert clear.is_visible()
    clear.click(timeout=5_000)  # nothing covers it
    shot(page, "errors-3-try")
