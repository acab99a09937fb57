"""Issue 11 #2: an adapter on the wrong base gives one typed error that says what differs.

A run's adapter was loaded onto a model folder that later held other weights: with the same shapes
it was applied silently, with other sizes peft raised a raw `size mismatch` traceback.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import TrainerCallback

from pipeline.config import TrainConfig
from pipeline.errors import BaseModelMismatchError
from pipeline.training.train import train
from tests.training_data import copy_workspace, real_workspace


class StopAfterFirstStep(TrainerCallback):
    def __init__(self, stop_file):
        self.stop_file = stop_file

    def on_step_end(self, args, state, control, **kwargs):
        self.stop_file.write_text("stop")


def _replace_weights(folder, *, seed=None, intermediate=None):
    """Overwrite the checkpoint in `folder` with other random weights: the same architecture with
    another seed, or another MLP width (`intermediate`), keeping the processor files."""
    from transformers import AutoConfig, Gemma3nForConditionalGeneration

    config = AutoConfig.from_pretrained(folder)
    if intermediate is not None:
        text = config.text_config
        text.intermediate_size = [intermediate] * text.num_hidden_layers
    torch.manual_seed(seed if seed is not None else 1234)
    model = Gemma3nForConditionalGeneration(config).to(torch.bfloat16)
    for path in folder.glob("*.safetensors*"):
        path.unlink()
    model.save_pretrained(folder)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, speechocean_dir, tiny_model_dir):
    """A stopped run (adapter + checkpoint-1) trained on a private copy of the tiny model."""
    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    root = tmp_path_factory.mktemp("base-identity")
    ws = copy_workspace(shared, root / "ws")
    base = root / "base-model"
    shutil.copytree(tiny_model_dir, base)
    config = TrainConfig(model=str(base), device="cpu", quantization="none", lora_rank=4, lora_alpha=8, batch_size=1,
                         grad_accum=1, max_steps=3, eval_steps=0, save_steps=0, seed=2)
    result = train(config, ws, "r1", callbacks=[StopAfterFirstStep(ws / "runs" / "r1" / "STOP")])
    assert result["status"] == "stopped", result
    return ws, base


@pytest.mark.slow
def test_an_adapter_on_the_wrong_base_is_one_typed_error(stopped_run, tmp_path):
    from pipeline.tutor.infer import load_tutor

    ws, base = stopped_run
    run_dir = ws / "runs" / "r1"
    recorded = json.loads((run_dir / "adapter" / "base_model.json").read_text())
    assert recorded["model"] == str(base) and recorded["weights_sha256"] and recorded["config_sha256"]
    assert json.loads((run_dir / "base_model.json").read_text()) == recorded
    load_tutor(run="r1", workspace=ws, use_cache=False)  # the right base loads

    original = tmp_path / "original"
    shutil.copytree(base, original)
    try:
        # Same shapes, other weights: applied silently before.
        _replace_weights(base, seed=7)
        with pytest.raises(BaseModelMismatchError, match=r"(?s)trained on a different base.*weights fingerprint.*train a new run") as same:
            load_tutor(run="r1", workspace=ws, use_cache=False)
        assert "other weights, same shapes" in str(same.value)
        # A resumed run checks its base too: its checkpoint would continue on other weights.
        with pytest.raises(BaseModelMismatchError, match=r"Run `r1` was trained on a different base"):
            train(None, ws, "r1", resume=True)

        # Other sizes: a raw `size mismatch` traceback before; now the config value that differs.
        _replace_weights(base, intermediate=384)
        with pytest.raises(BaseModelMismatchError, match=r"intermediate_size`: trained \[256.*now \[384"):
            load_tutor(run="r1", workspace=ws, use_cache=False)

        # An adapter saved before identities were recorded: the size mismatch is still the typed error.
        (run_dir / "adapter" / "base_model.json").unlink()
        with pytest.raises(BaseModelMismatchError, match=r"tensors do not fit this model's shapes.*size mismatch"):
            load_tutor(run="r1", workspace=ws, use_cache=False)
    finally:
        shutil.rmtree(base)
        shutil.copytree(original, base)
        (run_dir / "adapter" / "base_model.json").write_text(json.dumps(recorded))
    load_tutor(run="r1", workspace=ws, use_cache=False)  # and the restored base loads again


@pytest.mark.slow
def test_a_moved_base_is_the_same_base(stopped_run, tmp_path):
    """Issue 21 #8: a run is tied to its base's identity, not to the path it was loaded from. The base
    folder moved (/models/base-a -> /models/base-b): `--model base-b` was refused by comparing path
    strings; now it loads (the identity is compared), and without it the message names the missing
    folder. A resume on the moved folder continues and records where the base is now."""
    from pipeline.errors import ModelLoadError
    from pipeline.tutor.infer import load_tutor

    ws, base = stopped_run
    moved = base.with_name("base-model-moved")
    base.rename(moved)
    try:
        with pytest.raises(ModelLoadError, match=r"(?s)`" + str(base) + r"`, which is no longer there.*same weights"):
            load_tutor(run="r1", workspace=ws, use_cache=False)
        tutor = load_tutor(str(moved), run="r1", workspace=ws, use_cache=False)
        assert tutor.model_id == str(moved) and tutor.adapter_dir
        # export and import-run meet the moved base the same way
        from pipeline.export.import_run import import_run
        from pipeline.export.tutor import export_merged

        with pytest.raises(ModelLoadError, match="no longer there"):
            export_merged(ws, "r1", tmp_path / "out")
        assert export_merged(ws, "r1", tmp_path / "out", model=str(moved))["base_model"] == str(moved)
        imported = import_run(tmp_path / "ws-import", ws / "runs" / "r1", model=str(moved))
        assert json.loads((tmp_path / "ws-import" / "runs" / "r1" / "config.json").read_text())["model"] == str(moved)
        assert any("becomes" in note for note in imported["notes"])
        # the same refusal and the same acceptance when the run is resumed (on a copy of the workspace)
        other = copy_workspace(ws, tmp_path / "ws")
        with pytest.raises(ModelLoadError, match="no longer there"):
            train(None, other, "r1", resume=True)
        saved = json.loads((other / "runs" / "r1" / "config.json").read_text())
        resumed = train(TrainConfig.from_dict(dict(saved, model=str(moved))), other, "r1", resume=True)
        assert resumed["status"] == "completed", resumed
        assert json.loads((other / "runs" / "r1" / "config.json").read_text())["model"] == str(moved)
        # another base under the old name is still refused, by identity
        _replace_weights(shutil.copytree(moved, base), seed=7)
        with pytest.raises(BaseModelMismatchError):
            load_tutor(str(base), run="r1", workspace=ws, use_cache=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        moved.rename(base)


def test_identity_ignores_how_the_model_was_loaded(tiny_model_dir):
    """The fingerprint is the same at 4-bit and bf16 (what is quantized is never read)."""
    from pipeline.model.base_identity import describe_base, differences
    from pipeline.model.loading import load_model

    plain, _ = load_model(str(tiny_model_dir), device="cpu", quantization="none")
    quantized, _ = load_model(str(tiny_model_dir), device="cpu", quantization="4bit")
    a, b = describe_base(plain, str(tiny_model_dir)), describe_base(quantized, str(tiny_model_dir))
    assert a["weights_sha256"] == b["weights_sha256"] and a["config_sha256"] == b["config_sha256"]
    assert differences(a, b) == []
    changed = dict(b, config={**b["config"], "text_config.hidden_size": 999})
    assert differences(a, changed) == ["`text_config.hidden_size`: trained 128, now 999"]
