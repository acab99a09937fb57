"""End-to-end (issue 30): the tiny Gemma 4 through the whole app in headless Chromium, on one app start.

A teacher makes the offline tiny Gemma 4 with the model picker's button, loads the sample pack (real
speechocean762 clips), builds the dataset, estimates on the Memory tab, trains 2 steps, asks the run
about a clip on the Try tab, judges it on the Judge tab and exports it for llama.cpp and Ollama from
the Try tab's export section: `NAME-gguf/` holds `NAME.gguf`, `mmproj-NAME.gguf` and a `Modelfile`.
Needs Chromium (tests/browser.py) and llama.cpp's converter in its cache (`python -m pipeline
llama-cpp --build`; tests/test_gguf.py builds it on a clean machine). Screenshots go to
`artifacts/screenshots/`.
"""

from __future__ import annotations

import time

import pytest

from tests.browser import REPO_ROOT, fill_number, open_accordion, open_tab, shot, wait_text, wait_for_both_answers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CLIP = REPO_ROOT / "sample_data" / "speechocean762-pack" / "WAVE" / "SPEAKER0005" / "000050083.WAV"
RUN = "g4"


def test_the_tiny_gemma4_goes_from_recordings_to_a_gguf_in_the_app(module_app, module_page, tmp_path):
    page = module_page
    workspace = module_app[1]
    timings: list[tuple[str, float]] = []
    t0 = [time.perf_counter()]

    def step(name: str) -> None:
        now = time.perf_counter()
        timings.append((name, now - t0[0]))
        print(f"[e2e gemma4] {name} (+{now - t0[0]:.1f} s)", flush=True)
        t0[0] = now

    page.click("#make-tiny-gemma4")
    wait_text(page, "#model-note", r"random weights", timeout_s=300)
    assert page.locator("#model input").first.input_value().endswith("tiny-gemma4")
    step("tiny Gemma 4 made")

    page.click("#load-pack")
    wait_text(page, "#import-summary", r"Imported \*?\*?8", timeout_s=180)
    step("sample pack imported")

    open_tab(page, "2 · Dataset")
    page.click("#build-dataset")
    summary = wait_text(page, "#dataset-summary", r"\d+ to train on, \d+ to test", timeout_s=300)
    info = page.locator("#build-max-length").inner_text()
    assert "each clip takes ~25 per second of audio, at most 752" in info, info
    assert "~192" not in summary and "25 per second" in summary, summary  # a Gemma 4 clip's tokens follow its length
    step("dataset built")

    open_tab(page, "3 · Memory")
    page.locator("#memory-advanced").get_by_text("Advanced settings", exact=True).click()  # Gradient accumulation
    page.click("#estimate")
    wait_text(page, "#verdict", r"Yes, it fits|Yes, but only just|No, it does not fit", timeout_s=180)
    fill_number(page, "set-grad-accum", "1")
    step("estimated")

    open_tab(page, "4 · Train")
    page.locator("#run-name input, #run-name textarea").first.fill(RUN)
    page.locator("#train-advanced").get_by_text("Advanced settings").click()
    fill_number(page, "max-steps", "2")
    fill_number(page, "eval-steps", "2")
    fill_number(page, "save-steps", "2")
    page.click("#start-training")
    wait_text(page, "#train-status", r"Started", timeout_s=60)
    wait_text(page, "#train-progress", r"step 2 of 2 .*status: completed", timeout_s=600)
    shot(page, "g4-4-train")
    step("trained 2 steps")

    open_tab(page, "5 · Try")
    page.locator("#try-audio button[aria-label='Upload file']").click()
    page.locator("#try-audio input[type=file]").set_input_files(str(CLIP))
    page.locator("#try-target input, #try-target textarea").first.fill("KATE'S GOT SOME GREY")
    page.locator("#try-advanced").get_by_text("Advanced settings").click()
    slider = page.locator("#try-max-tokens input[type=number]").first
    slider.fill("16")
    slider.press("Enter")
    assert page.locator("#try-run input").first.input_value() == RUN
    page.wait_for_selector("#try-audio audio, #try-audio .waveform-container, #try-audio [data-testid='waveform-x']",
                           state="attached")
    page.click("#try-button")
    note = wait_text(page, "#try-note", r"Both answers are in|✗", timeout_s=300)
    assert "✗" not in note, note
    wait_for_both_answers(page, timeout_s=300)
    shot(page, "g4-5-try")
    step("Try answered")

    open_tab(page, "6 · Judge")
    wait_text(page, "#judge-models", rf"run · {RUN}", timeout_s=60)
    page.locator("#judge-models").get_by_label(f"run · {RUN}").check()
    slider = page.locator("#judge-max-tokens input[type=number]").first
    slider.fill("16")
    slider.press("Enter")
    page.click("#judge-run")
    progress = wait_text(page, "#judge-progress", r"answered .* done|✗|failed", timeout_s=600)
    assert "done" in progress, progress
    wait_text(page, "#judge-headline", rf"run · {RUN}", timeout_s=60)
    assert len(list((workspace / "runs" / RUN / "eval").glob("eval-*.json"))) == 1
    shot(page, "g4-6-judge")
    step("judged")

    open_tab(page, "5 · Try")
    open_accordion(page, "Take the tutor out", "#export-button")
    page.locator("#export-format").get_by_text("For Ollama / LM Studio").click()
    out = tmp_path / "exports"
    page.locator("#export-out input, #export-out textarea").first.fill(str(out))
    page.click("#export-button")
    note = wait_text(page, "#export-note", r"✓|✗|Exported|GGUF|gguf", timeout_s=600)
    folder = out / f"{RUN}-gguf"
    names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    assert {f"{RUN}.gguf", f"mmproj-{RUN}.gguf", "Modelfile"} <= names, (note, names)
    shot(page, "g4-5-export")
    step("exported GGUF")
    print("[e2e gemma4] " + ", ".join(f"{name} {s:.0f} s" for name, s in timings), flush=True)
