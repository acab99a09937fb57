"""A model path typed for another system is recognised, never sent to the hub as an id (issue 21 #12b)."""

from __future__ import annotations

import pytest

from pipeline.errors import ModelLoadError
from pipeline.model.hub import is_local_model

FOREIGN = [
    r"C:\Users\teacher\models\gemma-3n-E2B-it",
    "D:/models/gemma-3n-E2B-it",
    r"\\school-nas\models\gemma-3n-E2B-it",
    r"models\gemma-3n-E2B-it",
    "~nosuchuser-i21/models/gemma-3n-E2B-it",
    "/Users/teacher/models/gemma-3n-E2B-it",
    "file:///C:/Users/teacher/models/gemma-3n-E2B-it",
]


@pytest.mark.parametrize("typed", FOREIGN)
def test_a_path_from_another_system_is_named_as_one_not_taken_for_a_hub_id(typed):
    from pipeline.model.loading import load_processor

    assert is_local_model(typed)
    with pytest.raises(ModelLoadError) as caught:
        load_processor(typed)
    message = str(caught.value)
    assert "cannot see it" in message and typed in message
    assert "huggingface.co/" not in message and "license" not in message


@pytest.mark.parametrize("typed", FOREIGN[:2])
def test_the_model_box_says_this_computer_cannot_see_the_path(typed, tmp_path):
    from ui.state import AppState

    note = AppState(tmp_path / "ws").describe_model(typed)
    assert "cannot see it" in note and "hub" not in note.split("cannot see it")[0]


def test_hub_ids_and_folders_of_this_computer_are_not_foreign(tmp_path):
    from pipeline.model.hub import foreign_path_reason

    assert all(foreign_path_reason(typed) for typed in FOREIGN)
    assert foreign_path_reason("google/gemma-3n-E2B-it") is None and not is_local_model("google/gemma-3n-E2B-it")
    assert foreign_path_reason(str(tmp_path)) is None and is_local_model(str(tmp_path))
    # a missing folder under a folder this computer has is this computer's path, simply missing
    assert foreign_path_reason(str(tmp_path / "missing")) is None and is_local_model(str(tmp_path / "missing"))
