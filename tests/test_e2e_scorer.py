"""End-to-end (issue 41 item 6): the Classical scorer (no fine-tuning) in the browser.

One app for the module (`module_app`), in order: the Dataset tab drafts feedback for a recording without any,
the teacher edits and accepts the draft, and the build trains on it; the Judge tab evaluates the scorer as a
row of its own and, once a run has an evaluation on the same build, its verdict says whether the run beats the
scorer; the practice page answers a student with the scorer chosen as the tutor in the Inbox tab.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from pipeline.data.samples import SampleLibrary
from tests.browser import WAIT_MS, open_tab, shot, tiny_model_and_sample_pack, wait_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NEW_CLIP = ("WAVE/SPEAKER0001/000010053.WAV", "SPEAKER0001")
"""A real clip that is not in the sample pack: added without feedback, for the scorer to draft."""


def test_draft_feedback_edit_accept_then_build(module_app, module_page, speechocean_dir):
    page = module_page
    _, workspace, _, _ = module_app
    tiny_model_and_sample_pack(page)
    texts = dict(line.split(maxsplit=1) for line in (speechocean_dir / "train" / "text").read_text().splitlines())
    sentence = texts["000010053"].strip()
    sample = SampleLibrary(workspace).add(speechocean_dir / NEW_CLIP[0], target_text=sentence, feedback="",
                                          speaker="new-learner")
    from pipeline.scoring.drafts import draft_all

    assert draft_all(workspace)["drafted"] == [sample.id]  # `score --draft` on the command line
    open_tab(page, "2 · Dataset")
    page.click("#dataset-drafts")  # the accordion: opened, it lists the drafts waiting, the command line's too
    page.wait_for_function(f"() => (document.querySelector('#draft-pick input') || {{}}).value?.startsWith('{sample.id}')",
                           timeout=WAIT_MS)
    page.click("#draft-feedback")
    wait_text(page, "#draft-status", r"Drafted feedback for 1 recording.*draft", timeout_s=120)
    box = page.locator("#draft-text textarea").first
    page.wait_for_function("(el) => el.value.startsWith('Scores (0-10):')", arg=box.element_handle(), timeout=WAIT_MS)
    assert "draft" in page.locator("#draft-text").inner_text().lower()  # marked as a draft until accepted
    edited = box.input_value().replace("Advice:", "Advice: Good start.", 1)
    box.fill(edited)
    shot(page, "2-dataset-draft")
    page.click("#accept-draft")
    wait_text(page, "#draft-status", r"Accepted the feedback of " + sample.id, timeout_s=60)
    assert SampleLibrary(workspace).get(sample.id).feedback == edited
    page.click("#build-dataset")
    wait_text(page, "#dataset-summary", r"\d+ to train on, \d+ to test", timeout_s=180)
    report = json.loads((workspace / "dataset" / "build_report.json").read_text(encoding="utf-8"))
    assert sample.id in report["row_ids"]["train"] + report["row_ids"]["eval"] and report["drafts"] == 0


def test_judge_shows_the_scorers_row_and_the_verdict_against_it(module_app, module_page):
    from pipeline.tutor import eval_jobs, evaluate as ev

    page = module_page
    _, workspace, _, _ = module_app
    open_tab(page, "6 · Judge")
    wait_text(page, "#judge-models", r"Classical scorer \(no fine-tuning\)", timeout_s=60)
    boxes = page.locator("#judge-models input[type=checkbox]")
    for index in range(boxes.count()):  # the scorer alone: no model to answer
        if boxes.nth(index).is_checked():
            boxes.nth(index).uncheck()
    page.locator("#judge-models").get_by_label("Classical scorer (no fine-tuning)").check()
    page.click("#judge-run")
    wait_text(page, "#judge-status", r"in the background", timeout_s=60)
    wait_text(page, "#judge-progress", r"done: Classical scorer \(no fine-tuning\) evaluated", timeout_s=300)
    wait_text(page, "#judge-headline", r"Classical scorer \(no fine-tuning\)", timeout_s=60)
    assert not eval_jobs.active_job(workspace)
    # A run's evaluation on the same build (as a finished evaluation job saves it): the verdict names the scorer.
    scorer = next(r for r in ev.saved_evaluations(workspace) if r["model"] == "classical-scorer")
    run_eval = dict(scorer, run="r1", model="google/gemma-3n-E2B-it")
    run_eval.pop("path")
    target = workspace / "runs" / "r1" / "eval" / f"{scorer['dataset_key']}.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(run_eval), encoding="utf-8")
    page.reload()
    page.wait_for_selector("#load-pack")
    open_tab(page, "6 · Judge")
    wait_text(page, "#judge-verdict", r"run · r1\W*: can't tell yet whether it beats the classical scorer[\s\S]*"
                                      r"against the base model: can't tell yet", timeout_s=60)
    shot(page, "6-judge-scorer")
    shutil.rmtree(workspace / "runs" / "r1")


def test_the_practice_page_answers_with_the_scorer_chosen(module_page, module_browser, speechocean_dir):
    page = module_page
    open_tab(page, "7 · Inbox")
    page.click("#practice-setup")
    page.locator("#practice-run input").first.click()
    page.get_by_role("option", name="Classical scorer (no fine-tuning)").click()
    page.locator("#practice-items textarea").first.fill("WE CALL IT BEAR\n")
    page.click("#practice-offer")
    status = wait_text(page, "#practice-setup-status", r"Offering 1 exercise with the Classical scorer \(no "
                                                         r"fine-tuning\)\. Students open http://\S+/", timeout_s=60)
    student = module_browser.new_page()
    student.set_default_timeout(WAIT_MS)
    student.goto(re.search(r"Students open (http://\S+/)", status).group(1))
    student.wait_for_selector("#practice-audio")
    student.locator("#practice-audio button[aria-label='Upload file']").click()
    student.locator("#practice-audio input[type=file]").set_input_files(
        str(speechocean_dir / "WAVE" / "SPEAKER0001" / "000010011.WAV"))
    student.wait_for_selector("#practice-audio audio, #practice-audio .waveform-container", state="attached")
    student.click("#practice-submit")
    box = student.locator("#practice-feedback textarea").first
    student.wait_for_function("(el) => el.value.startsWith('Scores (0-10):')", arg=box.element_handle(), timeout=120_000)
    assert "Words to practise:" in box.input_value()
    shot(student, "practice-scorer")
