"""End-to-end: drive the real app in headless Chromium (Playwright + Debian's `chromium`).

Starts `python app.py` as a subprocess on a free localhost port with a temporary workspace, then,
as a new user would: creates the offline tiny model, loads the sample pack, builds the dataset,
runs the memory estimate, starts a short training run, watches progress appear, stops it, resumes
it, gets feedback in the Try tab for an uploaded clip, and judges the base model and the run side by
side on the eval split in the Judge tab (which a reloaded page shows again without re-running).
Screenshots of each tab are saved to `artifacts/screenshots/` (not committed). Teardown stops the
app and every training process it started, whatever the outcome (`tests/processes.py`).

Needs `/usr/bin/chromium` (`apt-get install chromium`; `.ci/run` installs it). Never runs
`playwright install`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO_ROOT / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SAMPLE_CLIP = REPO_ROOT / "sample_data" / "speechocean762-pack" / "WAVE" / "SPEAKER0005" / "000050083.WAV"

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def running_app(tmp_path):
    """`python app.py` on a free port with a temp workspace; yields (url, workspace, seconds to first page)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found; install Debian's chromium (`apt-get install chromium`).")
    workspace = tmp_path / "ws"
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    log_path = tmp_path / "app.log"
    log = open(log_path, "w", encoding="utf-8")
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "app.py"), "--workspace", str(workspace), "--port", str(port)],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        import urllib.request

        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"the app did not come up:\n{log_path.read_text()}")
            time.sleep(0.1)
        first_page_s = time.perf_counter() - started
        yield url, workspace, first_page_s, log_path
    finally:  # whatever the outcome: the app, then the training runs it started (detached on purpose)
        from tests.processes import stop_process_group, stop_workspace_eval_jobs, stop_workspace_runs

        stop_process_group(proc.pid, grace_s=15)
        proc.wait(timeout=30)
        stopped = stop_workspace_runs(workspace)
        if stopped:
            print(f"[e2e] teardown stopped training process(es) {stopped}", flush=True)
        stopped = stop_workspace_eval_jobs(workspace)  # evaluation jobs are detached too
        if stopped:
            print(f"[e2e] teardown stopped evaluation job process(es) {stopped}", flush=True)
        log.close()


def _no_error_toast(page) -> None:
    errors = page.locator(".toast-body.error")
    if errors.count():
        raise AssertionError("error shown in the app: " + " | ".join(errors.all_inner_texts()))


def _wait_text(page, selector: str, pattern: str, timeout_s: float = 120) -> str:
    """Wait until the element's text matches `pattern` (regex); fail early on an error toast."""
    deadline = time.time() + timeout_s
    text = ""
    while time.time() < deadline:
        _no_error_toast(page)
        locator = page.locator(selector)
        if locator.count():
            fields = locator.first.locator("textarea, input")
            values = [fields.nth(i).input_value() for i in range(fields.count())]
            text = "\n".join([locator.first.inner_text(), *values])
            if re.search(pattern, text):
                return text
        time.sleep(0.5)
    raise AssertionError(f"{selector} never matched {pattern!r}; last text: {text!r}")


_T0 = [time.perf_counter()]


def _step(name: str) -> None:
    """Print how long the previous step took (shown with `pytest -s`)."""
    now = time.perf_counter()
    print(f"[e2e] {name} (+{now - _T0[0]:.1f} s)", flush=True)
    _T0[0] = now


def _tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()
    time.sleep(0.8)


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _write_test_clip(path: Path) -> None:
    """A 2 s voiced-sounding test clip (150 Hz harmonics, syllable-rate envelope, light noise), 16 kHz WAV."""
    import numpy as np
    import soundfile

    rate = 16000
    t = np.arange(2 * rate) / rate
    voice = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    signal = voice + 0.05 * np.random.default_rng(0).standard_normal(t.size)
    soundfile.write(str(path), (0.4 * signal / np.abs(signal).max()).astype(np.float32), rate, subtype="PCM_16")


def _fill_number(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input").first
    box.fill(value)
    box.press("Tab")


def test_full_flow_in_the_browser(running_app):
    from playwright.sync_api import sync_playwright

    url, workspace, first_page_s, log_path = running_app
    print(f"[e2e] first page served {first_page_s:.1f} s after `python app.py` started", flush=True)
    assert first_page_s < 30, f"first page took {first_page_s:.1f} s"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(url)
        page.wait_for_selector("#load-pack")

        # Model: create the offline tiny test model; the picker selects it and says it is random.
        _step("page loaded")
        page.click("#make-tiny")
        _wait_text(page, "#model-note", r"random weights", timeout_s=180)
        _step("tiny model created")

        # 1 Samples: one click loads the sample pack; the table lists the clips.
        page.click("#load-pack")
        _wait_text(page, "#import-summary", r"Imported \*?\*?8", timeout_s=120)
        _wait_text(page, "#samples-table", r"000050083")
        _step("sample pack loaded")

        # A failed action (save with no audio) shows one message in the checks panel, no error toast,
        # and leaves the sample library intact and clickable (no red "Error" badge on it).
        page.click("#save-sample")
        _wait_text(page, "#checks", r"✗", timeout_s=60)
        assert "000050083" in page.locator("#samples-table").inner_text()
        assert not page.locator("#samples-table .error, #sample-audio .error").count(), "components marked errored"
        _shot(page, "1-samples-failed-save")
        _step("failed save shows a message only")

        # Add one recording by upload: the checks show before saving; saving adds it to the table.
        clip = workspace.parent / "my-recording.wav"
        _write_test_clip(clip)
        page.locator("#sample-audio button[aria-label='Upload file']").click()
        page.locator("#sample-audio input[type=file]").set_input_files(str(clip))
        _wait_text(page, "#checks", r"duration.*2\.00 s", timeout_s=60)
        page.locator("#sample-target textarea, #sample-target input").first.fill("The quick brown fox.")
        page.locator("#sample-feedback textarea").first.fill("Clear overall; stress QUICK a little more.")
        page.locator("#sample-speaker textarea, #sample-speaker input").first.fill("me")
        page.click("#save-sample")
        _wait_text(page, "#checks", r"Saved sample", timeout_s=60)
        _wait_text(page, "#samples-table", r"The quick brown fox")
        _shot(page, "1-samples")
        _step("own recording checked and saved")

        # Click it in the table: it loads for playback and editing; edit the feedback; then delete it.
        page.locator("#samples-table").get_by_text("The quick brown fox.").first.click()
        _wait_text(page, "#edit-id", r"s-[0-9a-f]+", timeout_s=30)
        page.wait_for_selector("#edit-audio audio, #edit-audio [data-testid='waveform-x'], #edit-audio .waveform-container",
                               state="attached")
        page.locator("#edit-feedback textarea").first.fill("Good pace. Stress QUICK.")
        page.click("#update-sample")
        _wait_text(page, "#samples-table", r"Good pace\. Stress QUICK\.")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#delete-sample")
        _wait_text(page, "#edit-status", r"Deleted")
        deadline = time.time() + 30
        while "The quick brown fox" in page.locator("#samples-table").inner_text() and time.time() < deadline:
            time.sleep(0.5)
        assert "The quick brown fox" not in page.locator("#samples-table").inner_text()
        _step("edited and deleted it")

        # 2 Dataset: build with the tiny model.
        _tab(page, "2 · Dataset")
        page.click("#build-dataset")
        _wait_text(page, "#dataset-summary", r"train \d+, eval \d+", timeout_s=180)
        page.wait_for_selector("#length-plot img")
        _shot(page, "2-dataset")
        _step("dataset built")
        assert (workspace / "dataset" / "dataset_dict.json").exists()

        # 3 Memory: the device is detected; the estimate draws the bar and gives a verdict.
        _tab(page, "3 · Memory")
        # the device note and Gradient accumulation are under Advanced settings
        page.locator("#memory-advanced").get_by_text("Advanced settings", exact=True).click()
        _wait_text(page, "#device-note", r"usable for training", timeout_s=120)
        page.click("#estimate")
        _wait_text(page, "#verdict", r"Fits|Tight|Does not fit", timeout_s=120)
        page.wait_for_selector("#memory-plot img")
        _shot(page, "3-memory")
        _step("memory estimated")
        _fill_number(page, "set-grad-accum", "1")  # one row per optimizer step: a short CPU run

        # 4 Train: a short run in its own process; progress appears; stop; resume; it completes.
        _tab(page, "4 · Train")
        page.locator("#run-name input, #run-name textarea").first.fill("e2e-run")
        # 60 steps: long enough that Stop lands mid-run on a fast quiet machine (6 steps took 4 s here)
        page.locator("#train-advanced").get_by_text("Advanced settings").click()
        _fill_number(page, "max-steps", "60")
        _fill_number(page, "eval-steps", "10")
        _fill_number(page, "save-steps", "5")
        page.click("#start-training")
        _wait_text(page, "#train-status", r"Started")
        _step("training started")
        _wait_text(page, "#train-progress", r"step \d+ of 60", timeout_s=240)
        _wait_text(page, "#log-tail", r"step \d+/60 loss", timeout_s=60)
        page.wait_for_selector("#loss-plot img")
        _shot(page, "4-train-running")
        _step("progress seen")
        page.reload()  # a reloaded page re-attaches to the running job
        page.wait_for_selector("#load-pack")
        _tab(page, "4 · Train")
        _wait_text(page, "#train-status", r"Re-attached to the running job e2e-run", timeout_s=60)
        _wait_text(page, "#train-progress", r"e2e-run · step \d+ of 60", timeout_s=60)
        # The settings (grad accumulation 1 typed on the Memory tab; the Train tab's summary of the next run)
        # and the tiny model survive the reload.
        _wait_text(page, "#settings-summary", r"× 1 accumulation", timeout_s=30)
        assert "tiny-gemma3n" in page.locator("#model input").first.input_value()
        _step("re-attached after reload")
        page.click("#stop-training")
        _wait_text(page, "#train-status", r"Asked .*e2e-run.* to stop")
        _wait_text(page, "#train-progress", r"status: stopped", timeout_s=240)
        _step("stopped")
        run_dir = workspace / "runs" / "e2e-run"
        assert any((run_dir / "checkpoints").glob("checkpoint-*")), "a stopped run keeps a checkpoint"
        _wait_text(page, "#resume-choice", r"e2e-run", timeout_s=30)
        assert page.locator("#resume-choice input").first.input_value() == "e2e-run"
        page.click("#resume-training")
        _wait_text(page, "#train-status", r"Resumed")
        _wait_text(page, "#train-progress", r"step 60 of 60 .*status: completed", timeout_s=420)
        _wait_text(page, "#runs-table", r"completed")
        _shot(page, "4-train-done")
        _step("resumed and completed")

        # 5 Try: upload a clip, type the sentence, get tuned and base feedback side by side.
        _tab(page, "5 · Try")
        page.locator("#try-audio button[aria-label='Upload file']").click()
        page.locator("#try-audio input[type=file]").set_input_files(str(SAMPLE_CLIP))
        page.locator("#try-target input, #try-target textarea").first.fill("KATE'S GOT SOME GREY")
        page.locator("#try-advanced").get_by_text("Advanced settings").click()
        slider = page.locator("#try-max-tokens input[type=number]").first
        slider.fill("24")
        slider.press("Enter")
        assert page.locator("#try-run input").first.input_value() == "e2e-run"
        page.wait_for_selector("#try-audio audio, #try-audio .waveform-container, #try-audio [data-testid='waveform-x']",
                               state="attached")
        page.click("#try-button")
        _wait_text(page, "#try-note", r"random weights", timeout_s=300)
        tuned = page.locator("#tuned-feedback textarea").first
        base = page.locator("#base-feedback textarea").first
        deadline = time.time() + 300
        while time.time() < deadline and not (tuned.input_value() and base.input_value()):
            _no_error_toast(page)
            time.sleep(1)
        assert tuned.input_value().strip() and base.input_value().strip()
        _shot(page, "5-try")
        _step("feedback received")

        # 6 Judge: evaluate the base model and the run on the eval split, short answers; both columns show.
        _tab(page, "6 · Judge")
        _wait_text(page, "#judge-models", r"base · tiny-gemma3n[\s\S]*run · e2e-run", timeout_s=60)
        base_box = page.locator("#judge-models").get_by_label("base · tiny-gemma3n")
        deadline = time.time() + 60  # the picked base model is ticked once the page has restored its settings
        while not base_box.is_checked() and time.time() < deadline:
            time.sleep(0.5)
        assert base_box.is_checked()
        page.locator("#judge-models").get_by_label("run · e2e-run").check()
        slider = page.locator("#judge-max-tokens input[type=number]").first
        slider.fill("16")
        slider.press("Enter")
        page.click("#judge-run")
        _wait_text(page, "#judge-progress", r"answers .* done", timeout_s=420)
        both = r"base · tiny-gemma3n[\s\S]*run · e2e-run"
        _wait_text(page, "#judge-headline", both, timeout_s=60)
        _wait_text(page, "#judge-headline", r"unparsed answers")
        page.wait_for_selector("#judge-scatter img")
        _wait_text(page, "#judge-clips", r"disagreement[\s\S]*run · e2e-run: answer")
        page.wait_for_selector("#judge-audio audio, #judge-audio .waveform-container", state="attached")
        _shot(page, "6-judge")
        _step("base model and run judged")
        assert len(list((workspace / "runs" / "e2e-run" / "eval").glob("eval-*.json"))) == 1
        page.reload()  # a reopened page shows the saved evaluations without re-running them
        page.wait_for_selector("#load-pack")
        _tab(page, "6 · Judge")
        _wait_text(page, "#judge-headline", both, timeout_s=60)
        assert "done" in page.locator("#judge-progress").inner_text()  # how the last evaluation ended
        _step("saved evaluations shown after reload")
        browser.close()
