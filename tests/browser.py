"""The browser tests' one start: the app in its own process, headless Chromium through Playwright, and
the page helpers every `tests/test_e2e*.py` shares.

Registered as a pytest plugin by `tests/conftest.py`, so a test asks for the fixtures by name:
- `running_app`: `python app.py` on a free localhost port with a temporary workspace; yields
  `(url, workspace, seconds to first page, log path)`;
- `browser`: headless Chromium (Debian's `chromium`, `$CHROMIUM_PATH` to use another; never runs
  `playwright install`), for tests that open several contexts (tests/test_e2e_practice.py);
- `studio_page`: a 1280 x 900 page of the running app, loaded (the Samples tab's `#load-pack` shown),
  each wait at most 60 s;
- `module_app`, `module_browser`, `module_page`: the same, started once for all the tests of a module
  (tests/test_e2e_truth.py: one app for several checks), the app with its own calibration folder.
Teardown, whatever the outcome: the browser closes and Playwright stops, then the app stops with every
training run and evaluation job it started (detached on purpose, so nothing else would stop them;
`tests/processes.py`). `launch_app` is the same start for an app with other arguments.
"""

from __future__ import annotations

import contextlib
import os
import re
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
VIEWPORT = {"width": 1280, "height": 900}
"""The studio's window in every browser test (px): the width the layout checks are made at."""
WAIT_MS = 60_000
"""Playwright's default wait per action and selector in the browser tests (ms)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _require_chromium() -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found; install Debian's chromium (`apt-get install chromium`).")


@contextlib.contextmanager
def launch_app(workspace: Path, log_path: Path, *args: str, ready=None, timeout_s: float = 60,
               env: dict[str, str] | None = None):
    """Run `python app.py --workspace WORKSPACE ARGS` offline in its own session, its output in
    `log_path` (with `env` over this process's environment, e.g. a local hub: `tests.hub_server.FakeHub.env`);
    yields the process once `ready()` is true (checked every 0.1 s), and stops it, then the training runs,
    evaluation jobs and model downloads of `workspace`, on exit whatever the outcome.

    Raises AssertionError with the app's log when the process ends or `timeout_s` passes before ready.
    """
    from tests.processes import stop_process_group, stop_workspace_downloads, stop_workspace_eval_jobs, stop_workspace_runs

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "app.py"), "--workspace", str(workspace), *args],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            deadline = time.time() + timeout_s
            while not (ready is None or ready()):
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"the app did not come up:\n{log_path.read_text()}")
                time.sleep(0.1)
            yield proc
        finally:  # the app, then the runs and jobs it started (detached on purpose)
            stop_process_group(proc.pid, grace_s=15)
            proc.wait(timeout=30)
            stopped = stop_workspace_runs(workspace)
            if stopped:
                print(f"[e2e] teardown stopped training process(es) {stopped}", flush=True)
            stopped = stop_workspace_eval_jobs(workspace)
            if stopped:
                print(f"[e2e] teardown stopped evaluation job process(es) {stopped}", flush=True)
            stopped = stop_workspace_downloads(workspace)
            if stopped:
                print(f"[e2e] teardown stopped model download process(es) {stopped}", flush=True)


def page_served(url: str, log_path: Path | None = None):
    """A `ready` check for `launch_app`: `url` answers 200, asked only once the app's log (`log_path`, when
    given) says it is running. Asking earlier, ten times a second, slowed the app's own start-up check of
    its page (Gradio's `launch` gives up after one 3 s answer: "When localhost is not accessible...") on a
    busy computer."""
    import urllib.request

    def ready() -> bool:
        if log_path is not None and "is running at" not in log_path.read_text(encoding="utf-8", errors="replace"):
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    return ready


@contextlib.contextmanager
def _served_app(folder: Path, env: dict[str, str] | None = None):
    """`python app.py` on a free port with the workspace `folder/ws`; yields (url, workspace, seconds to
    first page, log path)."""
    _require_chromium()
    workspace = folder / "ws"
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    started = time.perf_counter()
    with launch_app(workspace, folder / "app.log", "--port", str(port), ready=page_served(url, folder / "app.log"),
                    env=env):
        yield url, workspace, time.perf_counter() - started, folder / "app.log"


@contextlib.contextmanager
def _chromium():
    """Headless Chromium through Playwright; closed, and Playwright stopped, on exit whatever the outcome."""
    _require_chromium()
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()


def _loaded_page(browser, url: str):
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(WAIT_MS)
    page.goto(url)
    page.wait_for_selector("#load-pack")
    return page


@pytest.fixture()
def running_app(tmp_path):
    """`python app.py` on a free port with a temp workspace; yields (url, workspace, seconds to first page, log path)."""
    with _served_app(tmp_path) as app:
        yield app


@pytest.fixture()
def browser():
    """Headless Chromium through Playwright; closed, and Playwright stopped, at teardown whatever the outcome."""
    with _chromium() as chromium:
        yield chromium


@pytest.fixture()
def studio_page(running_app, browser):
    """A page of the running app at `VIEWPORT`, loaded (`#load-pack` shown), waits of `WAIT_MS`."""
    return _loaded_page(browser, running_app[0])


@pytest.fixture(scope="module")
def module_app(tmp_path_factory):
    """`running_app` shared by the tests of one module (one start for several checks of the same state), with
    a calibration folder of its own (`TUTOR_CALIBRATION_DIR`: what it calibrates stays out of other tests)."""
    folder = tmp_path_factory.mktemp("module-app")
    with _served_app(folder, env={"TUTOR_CALIBRATION_DIR": str(folder / "calibration")}) as app:
        yield app


@pytest.fixture(scope="module")
def module_browser():
    """`browser` shared by the tests of one module."""
    with _chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def module_page(module_app, module_browser):
    """One page of `module_app` at `VIEWPORT`, loaded, shared by the tests of one module (each test leaves
    it on a tab of its choosing; the next opens the one it needs)."""
    return _loaded_page(module_browser, module_app[0])


def no_error_toast(page) -> None:
    """Raise AssertionError with the toasts' text when the app shows an error toast."""
    errors = page.locator(".toast-body.error")
    if errors.count():
        raise AssertionError("error shown in the app: " + " | ".join(errors.all_inner_texts()))


def wait_for_both_answers(page, timeout_s: float = 300) -> None:
    """Wait until Try shows the tuned tutor's and the base model's answers (`#tuned-feedback`,
    `#base-feedback`), failing at once on an error toast; AssertionError when either is still empty
    after `timeout_s` seconds."""
    tuned = page.locator("#tuned-feedback textarea").first
    base = page.locator("#base-feedback textarea").first
    deadline = time.time() + timeout_s
    while time.time() < deadline and not (tuned.input_value() and base.input_value()):
        no_error_toast(page)
        time.sleep(1)
    assert tuned.input_value().strip() and base.input_value().strip()


def wait_text(page, selector: str, pattern: str, timeout_s: float = 120) -> str:
    """Wait until the element's text (and its fields' values) matches `pattern` (regex); returns it.
    Fails early on an error toast, and with the last text seen after `timeout_s`."""
    deadline = time.time() + timeout_s
    text = ""
    while time.time() < deadline:
        no_error_toast(page)
        locator = page.locator(selector)
        if locator.count():
            fields = locator.first.locator("textarea, input")
            values = [fields.nth(i).input_value() for i in range(fields.count())]
            text = "\n".join([locator.first.inner_text(), *values])
            if re.search(pattern, text):
                return text
        time.sleep(0.5)
    raise AssertionError(f"{selector} never matched {pattern!r}; last text: {text!r}")


def calm(page, panel: str | None = None) -> str:
    """Check that no toast shows, no component is marked errored and, given a `panel` selector, that
    its text holds no literal backtick (Markdown rendered); returns that text ("" without a panel)."""
    assert page.locator(".toast-body").count() == 0, page.locator(".toast-body").all_inner_texts()
    assert page.locator(".error").count() == 0, "a component is marked errored"
    if panel is None:
        return ""
    text = page.locator(panel).inner_text()
    assert "`" not in text, f"Markdown not rendered: {text!r}"
    return text


def pick(page, elem_id: str, choice: str) -> None:
    """Pick `choice` in the Gradio dropdown `#elem_id` as a person does: open it, click the option."""
    page.locator(f"#{elem_id} input").first.click()
    page.get_by_role("option", name=choice, exact=True).click()


def open_accordion(page, title: str, inside: str) -> None:
    """Open the accordion titled `title` unless `inside` (a selector within it) already shows."""
    if not page.locator(inside).is_visible():
        page.get_by_text(title).click()
        page.wait_for_selector(inside, state="visible")


def tiny_model_and_sample_pack(page, *, model_timeout_s: float = 180, pack_timeout_s: float = 120) -> None:
    """The opening of most browser flows: click Create offline tiny test model, then Load the sample pack, and
    wait until the page says each is done (the model note names its random weights; 8 clips imported)."""
    page.click("#make-tiny")
    wait_text(page, "#model-note", r"random weights", timeout_s=model_timeout_s)
    page.click("#load-pack")
    wait_text(page, "#import-summary", r"Imported \*?\*?8", timeout_s=pack_timeout_s)


def open_tab(page, name: str) -> None:
    """Click the tab named `name` ("4 · Train") and give it 0.8 s to draw."""
    page.get_by_role("tab", name=name).click()
    time.sleep(0.8)


def shot(page, name: str) -> None:
    """A full-page screenshot to `artifacts/screenshots/NAME.png` (not committed)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def fill_number(page, elem_id: str, value: str) -> None:
    """Type `value` into the number box `#elem_id` and leave it (Tab), as a person does."""
    box = page.locator(f"#{elem_id} input").first
    box.fill(value)
    box.press("Tab")


def upload(page, elem_id: str, path: Path) -> None:
    """Upload `path` into the audio widget `#elem_id`, clearing what it holds first."""
    clear = page.locator(f"#{elem_id} button[aria-label='Clear']")
    if clear.count():
        clear.first.click()
        time.sleep(0.5)
    page.locator(f"#{elem_id} button[aria-label='Upload file']").click()
    page.locator(f"#{elem_id} input[type=file]").set_input_files(str(path))


def write_voice(path: Path, seconds: float = 2.0, pitch_hz: float = 150.0, noise: float = 0.05, seed: int = 0) -> Path:
    """A voiced-sounding test clip, 16 kHz 16-bit WAV at `path`: harmonics 1-5 of `pitch_hz` under a
    3 Hz syllable-rate envelope, plus white noise of std `noise` (seeded), peak-normalised to 0.4."""
    import numpy as np
    import soundfile

    rate = 16000
    t = np.arange(int(seconds * rate)) / rate
    voice = sum(np.sin(2 * np.pi * pitch_hz * k * t) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    signal = voice + noise * np.random.default_rng(seed).standard_normal(t.size) if noise else voice
    soundfile.write(str(path), (0.4 * signal / np.abs(signal).max()).astype(np.float32), rate, subtype="PCM_16")
    return path


TABS = ("1 · Samples", "2 · Dataset", "3 · Memory", "4 · Train", "5 · Try", "6 · Judge", "7 · Inbox")
"""The studio's tabs, as their buttons name them."""
ENGINEERS_WORDS = ("common.", "KeyError", "HF_HOME", "HF_TOKEN", "dBFS", "eval-", "job judge-", "p90", "AdamW",
                   "adapter rank", "activation memory", "eval split", "peak resident", "seed 42", "LoRA on Google")
"""What a teacher's main text never shows (issue 32's leftovers, items 9 and 10): raw i18n keys, Python
reprs, environment variables, build and job ids, the machine-learning terms; "Why?" and "Advanced" hold them."""


def watch_status_line(page) -> None:
    """Keep every text Gradio's screen-reader status line (`[role=status]`, shown for a second after each
    event) takes, in `window.__statusTexts`: `status_texts` reads them (a raw key such as "common.complete"
    came and went there)."""
    page.evaluate("""() => {
        window.__statusTexts = window.__statusTexts || [];
        if (window.__statusWatch) return;
        window.__statusWatch = new MutationObserver(() => {
            for (const el of document.querySelectorAll('[role=status]')) {
                const text = (el.textContent || '').trim();
                if (text) window.__statusTexts.push(text);
            }
        });
        window.__statusWatch.observe(document.body, {subtree: true, childList: true, characterData: true});
    }""")


def status_texts(page) -> list[str]:
    """What the status line said since `watch_status_line`."""
    return page.evaluate("() => window.__statusTexts || []")


def visible_tab_text(page, name: str) -> str:
    """The text a person sees on the tab `name` ("2 · Dataset"): the page's top (header, model note) and the
    tab's panel, without what closed "Why?", "Advanced" and accordions hide (`innerText` skips it)."""
    open_tab(page, name)
    panel = page.locator(f"#tab-{name.split(' · ')[1].lower()}").first
    deadline = time.time() + 60
    while "processing |" in panel.inner_text() and time.time() < deadline:  # what opening the tab refreshes
        time.sleep(0.5)
    top = page.locator("#header").first.inner_text() + "\n" + page.locator("#model-note").first.inner_text()
    return top + "\n" + panel.inner_text()


def teachers_words(page, tabs=TABS, words=ENGINEERS_WORDS) -> dict[str, str]:
    """Visit each of `tabs`; AssertionError naming the tab and the word when one shows any of `words` in its
    main text, or names itself ("2 · Dataset" saying "Dataset tab"). Returns each tab's text."""
    texts = {}
    for name in tabs:
        text = texts[name] = visible_tab_text(page, name)
        shown = [word for word in words if word in text]
        assert not shown, f"{name} shows {shown} outside Why?/Advanced:\n{text}"
        own = name.split(" · ")[1]
        assert f"{own} tab" not in text and f"{own}** tab" not in text, f"{name} sends the reader to itself:\n{text}"
    return texts
