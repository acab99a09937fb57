"""Issue 11 #4: answers come from the model they are labelled with, under any concurrency.

Tuned and base answers share one cached model whose adapter is switched off for the base answer.
With two browser tabs clicking Try (the app allows several events at once), 29 of 51 "tuned"
answers came from the base model: one thread switched the adapter off while another generated.
"""

from __future__ import annotations

import threading

import pytest

from tests.training_data import real_workspace, trained_run

CLIP = "WAVE/SPEAKER0001/000010011.WAV"
TARGET = "WE CALL IT BEAR"
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def tuned_ws(tmp_path_factory, speechocean_dir, tiny_model_dir):
    ws = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    return trained_run(ws, tiny_model_dir, "loud", quantization="none", lora_alpha=32, learning_rate=5e-2, seed=5)


@pytest.mark.slow
def test_concurrent_compare_answers_keep_their_labels(tuned_ws, speechocean_dir):
    from pipeline.data.audio import load_audio
    from pipeline.tutor.infer import compare_feedback, load_tutor

    clip = load_audio(speechocean_dir / CLIP)
    tutor = load_tutor(run="loud", workspace=tuned_ws)
    tuned_alone = tutor.feedback(clip, TARGET, max_new_tokens=NEW_TOKENS).text
    base_alone = tutor.feedback(clip, TARGET, max_new_tokens=NEW_TOKENS, use_adapter=False).text
    assert tuned_alone != base_alone, "the adapter must change the answer for this test to mean anything"

    answers: list[tuple[str, str, str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def click(kind: str) -> None:
        try:
            start.wait()
            for _ in range(2):
                if kind == "compare":
                    result = compare_feedback(clip, TARGET, run="loud", workspace=tuned_ws, max_new_tokens=NEW_TOKENS)
                    answers.append(("tuned", result["tuned"]["text"], result["tuned"]["run"]))
                    answers.append(("base", result["base"]["text"], result["base"]["run"]))
                else:  # a tab asking the base answer only, on the same cached model
                    result = tutor.feedback(clip, TARGET, max_new_tokens=NEW_TOKENS, use_adapter=kind == "tuned")
                    answers.append((kind, result.text, result.run))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=click, args=(kind,)) for kind in ("compare", "compare", "base", "tuned")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    assert len(answers) == 2 * 2 * 2 + 2 + 2
    wrong = [(kind, text) for kind, text, _ in answers if text != (tuned_alone if kind == "tuned" else base_alone)]
    assert not wrong, f"{len(wrong)} of {len(answers)} answers came from the other model: {wrong[:4]}"
    assert all((run == "loud") == (kind == "tuned") for kind, _, run in answers)


@pytest.mark.slow
def test_concurrent_loads_share_one_model(tuned_ws, monkeypatch):
    """Two first clicks at once load the model once, not twice (memory), and get the same tutor."""
    import pipeline.model.loading as model_module
    import pipeline.tutor.infer as infer

    monkeypatch.setattr(infer, "_CACHE", {})
    loads = []
    real = model_module.load_model
    monkeypatch.setattr(model_module, "load_model", lambda *a, **k: loads.append(a) or real(*a, **k))
    tutors = []
    threads = [threading.Thread(target=lambda: tutors.append(infer.load_tutor(run="loud", workspace=tuned_ws)))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert len(loads) == 1 and len(tutors) == 3 and len({id(t) for t in tutors}) == 1
