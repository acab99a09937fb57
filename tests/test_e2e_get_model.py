"""End-to-end (issue 33): a teacher gets the gated model in the app, through the token box and the button,
watches the progress bar (bytes of total, speed, time left, file), reopens the page while it downloads and
finds it still going, cancels it and continues it with a second click, reads "ready: MODEL (SIZE) in
FOLDER", then trains on it.

The app talks to the hub on 127.0.0.1 of `tests/hub_server.py` (the tiny model served as the gated
google/gemma-3n-E2B-it, slowed so the download can be watched) through huggingface_hub's real download code
(`HF_ENDPOINT`), with its cache and its token in a temporary `HF_HOME`. Teardown stops the app, its runs and
its download (`tests/browser.py`).
"""

from __future__ import annotations

import pytest

from tests.browser import VIEWPORT, WAIT_MS, fill_number, free_port, launch_app, open_tab, page_served, shot, wait_text
from tests.hub_server import GOOD_TOKEN, SERVED_MODEL

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_get_the_model_with_the_token_box_and_the_button_then_train_on_it(fake_hub, browser, tmp_path):
    fake_hub.throttle_bytes_per_s = 192 * 2**10  # the 8 MiB of weights take 45 s: long enough to reload and cancel
    workspace, hf_home = tmp_path / "ws", tmp_path / "hf-home"
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    with launch_app(workspace, tmp_path / "app.log", "--port", str(port), ready=page_served(url),
                    env=fake_hub.env(hf_home)):
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(WAIT_MS)
        page.goto(url)
        page.wait_for_selector("#load-pack")

        # The first tab: the picked model is not here; its size, the free disk, the licence and the token box.
        status = wait_text(page, "#get-model-status", r"not on this computer yet", timeout_s=60)
        assert "8 MiB from Hugging Face" in status and "free" in status and "accept the licence" in status
        assert page.locator("#get-model-status a[href='https://huggingface.co/google/gemma-3n-E2B-it']").count()
        page.wait_for_selector("#hf-token input[type=password]")
        assert "Get the model" in page.locator("#model-note").inner_text()

        # Without a token: refused at once, in a teacher's words.
        page.click("#get-model")
        wait_text(page, "#get-model-status", r"gated model.*token box at the top of the app", timeout_s=60)

        # With the token: the bar shows bytes of total, speed, time left and the file.
        page.locator("#hf-token input").fill(GOOD_TOKEN)
        page.click("#get-model")
        bar = wait_text(page, "#get-model-progress", r"\d+ MiB of 8 MiB \(\d+ %\) · \d+ (KiB|MiB)/s · about .* left",
                        timeout_s=60)
        assert "Fetching model.safetensors" in bar, bar
        assert page.locator("#get-model-progress progress").count() == 1
        assert not page.locator("#hf-token input").is_visible(), "the token box leaves the page while it downloads"
        shot(page, "0-get-model-running")

        # Closing the tab does not stop it: a reopened page shows it still going.
        page.reload()
        page.wait_for_selector("#load-pack")
        wait_text(page, "#get-model-progress", r"MiB of 8 MiB.*\n.*Fetching model\.safetensors", timeout_s=60)

        # Cancel keeps what arrived; a second click continues from there (a `Range` request).
        page.click("#cancel-get-model")
        wait_text(page, "#get-model-progress", r"■ Cancelled: \d+ MiB of 8 MiB", timeout_s=60)
        fake_hub.throttle_bytes_per_s = None
        fake_hub.requests.clear()
        page.click("#get-model")
        ready = wait_text(page, "#get-model-progress", r"ready: google/gemma-3n-E2B-it \(8 MiB\) in \S+snapshots",
                          timeout_s=180)
        assert str(hf_home) in ready
        resumed = fake_hub.gets("model.safetensors")
        assert len(resumed) == 1 and resumed[0]["range"] not in (None, "bytes=0-"), resumed
        wait_text(page, "#get-model-status", r"On this computer", timeout_s=30)
        wait_text(page, "#model-note", r"random weights", timeout_s=30)  # the served stand-in says what it is
        shot(page, "0-get-model-ready")

        # The token is kept by huggingface_hub's login, and nowhere in the workspace or the app's log.
        assert (hf_home / "token").read_text().strip() == GOOD_TOKEN
        for path in [tmp_path / "app.log", *[p for p in workspace.rglob("*") if p.is_file()]]:
            assert GOOD_TOKEN not in path.read_text(errors="replace"), path

        # Then it trains on it: the sample pack, the dataset, a short run.
        page.click("#load-pack")
        wait_text(page, "#import-summary", r"Imported \*?\*?8", timeout_s=120)
        open_tab(page, "2 · Dataset")
        page.click("#build-dataset")
        wait_text(page, "#dataset-summary", r"\d+ to train on, \d+ to test", timeout_s=240)
        open_tab(page, "4 · Train")
        page.locator("#run-name input, #run-name textarea").first.fill("got-it")
        page.locator("#train-advanced").get_by_text("Advanced settings").click()
        fill_number(page, "max-steps", "2")
        page.click("#start-training")
        wait_text(page, "#train-status", r"Started")
        wait_text(page, "#train-progress", r"step 2 of 2 .*status: completed", timeout_s=420)
        result = (workspace / "runs" / "got-it" / "result.json").read_text()
        assert SERVED_MODEL in result and '"tiny_random_model": true' in result
        shot(page, "0-get-model-trained")
