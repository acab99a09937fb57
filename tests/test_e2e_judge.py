"""End-to-end (issue 20 #2, #3, #7): an evaluation survives a page reload, in the browser.

A teacher loads the sample pack, builds the dataset, ticks the base model in the Judge tab and presses
Evaluate; the page is reloaded while the evaluation runs (it is a background job: its own process). The
reopened page re-attaches to it, shows its progress, and it finishes with the results shown: the
headline table with each figure's meaning, and the clips table, whose header words stay whole at
1280 px (it read "disag/reeme/nt"). Uses `tests/test_e2e.py`'s app fixture (a real `python app.py` on a
free port, torn down afterwards with every job process it started).
"""

from __future__ import annotations

import pytest

from tests.test_e2e import CHROMIUM, CHROMIUM_ARGS, _shot, _tab, _wait_text, running_app  # noqa: F401

pytestmark = pytest.mark.e2e

LINES_OF_WORD = """(word) => {
    const cells = [...document.querySelectorAll('#judge-clips [role=columnheader], #judge-clips th')]
        .filter((el) => el.textContent.includes(word) && el.getClientRects().length);
    if (!cells.length) return -1;
    const walker = document.createTreeWalker(cells[0], NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode()) && !node.textContent.includes(word)) {}
    if (!node) return -2;
    const range = document.createRange();
    const start = node.textContent.indexOf(word);
    range.setStart(node, start);
    range.setEnd(node, start + word.length);
    return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
}"""
"""How many lines a header word of the clips table is drawn on (1 = whole), -1 when there is no such header."""


def test_judge_survives_a_reload_and_finishes_with_results_shown(running_app):
    from playwright.sync_api import sync_playwright

    from pipeline.tutor import eval_jobs

    url, workspace, _, _ = running_app
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(url)
        page.wait_for_selector("#load-pack")
        page.click("#make-tiny")
        _wait_text(page, "#model-note", r"random weights", timeout_s=180)
        page.click("#load-pack")
        _wait_text(page, "#import-summary", r"Imported \*?\*?8", timeout_s=120)
        _tab(page, "2 · Dataset")
        page.click("#build-dataset")
        _wait_text(page, "#dataset-summary", r"train \d+, eval \d+", timeout_s=180)

        _tab(page, "6 · Judge")
        _wait_text(page, "#judge-models", r"base · tiny-gemma3n", timeout_s=60)
        base_box = page.locator("#judge-models").get_by_label("base · tiny-gemma3n")
        _wait_text(page, "#judge-status", r"No evaluation", timeout_s=60)
        if not base_box.is_checked():
            base_box.check()
        slider = page.locator("#judge-max-tokens input[type=number]").first
        slider.fill("128")
        slider.press("Enter")
        page.click("#judge-run")
        _wait_text(page, "#judge-status", r"in the background", timeout_s=60)
        job = eval_jobs.active_job(workspace)
        assert job, "no evaluation job process is running after Evaluate"

        page.reload()  # the tab closed and reopened while the evaluation runs
        page.wait_for_selector("#load-pack")
        _tab(page, "6 · Judge")
        assert eval_jobs.job_status(workspace, job)["alive"], "the job ended before the page came back"
        _wait_text(page, "#judge-progress", r"of (\?|\d+) answers .*(starting|loading|answered|waiting)", timeout_s=60)
        _shot(page, "6-judge-reattached")
        _wait_text(page, "#judge-progress", r"(\d+) of \1 answers .* done", timeout_s=600)
        _wait_text(page, "#judge-headline", r"base · tiny-gemma3n[\s\S]*what it means", timeout_s=60)
        _wait_text(page, "#judge-headline", r"rise and fall with the experts")
        _wait_text(page, "#judge-status", r"1 saved evaluation")
        _wait_text(page, "#judge-clips", r"disagreement[\s\S]*base · tiny-gemma3n: answer")
        _shot(page, "6-judge-after-reload")
        assert page.evaluate(LINES_OF_WORD, "disagreement") == 1, "the clips table breaks its header word"
        browser.close()
    assert eval_jobs.job_status(workspace, job)["state"] == "completed"
