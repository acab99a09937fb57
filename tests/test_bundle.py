"""The cloud job bundle: what it holds, and the whole trip on the tiny model: bundle a run, unpack
it into an empty folder with the workspace gone, train 4 steps on the CPU through its own train.sh,
bring the run back with import-run, and let `infer --run` answer with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pipeline.config import TrainConfig
from pipeline.export.bundle import export_bundle, train_flags
from pipeline.export.import_run import import_run
from pipeline.fileio import extract_tar
from pipeline.training.run_folder import read_progress
from pipeline.training.train import train
from pipeline.tutor.cli import infer_main
from tests.training_data import copy_workspace, real_workspace

REPO_ROOT = Path(__file__).resolve().parents[1]
CLIP = "WAVE/SPEAKER0001/000010011.WAV"


def _private_workspace(tmp_path, tmp_path_factory, speechocean_dir, tiny_model_dir) -> tuple[Path, Path]:
    """A workspace copy that holds its own base model (WS/models/tiny, as the README's try-out does),
    so deleting the workspace deletes the model too."""
    shared = real_workspace(tmp_path_factory, speechocean_dir, tiny_model_dir, keep=6, eval_fraction=0.34)
    ws = copy_workspace(shared, tmp_path / "ws")
    shutil.rmtree(ws / "runs", ignore_errors=True)
    model = ws / "models" / "tiny"
    shutil.copytree(tiny_model_dir, model)
    return ws, model


def test_bundle_holds_data_settings_code_and_commands(tmp_path, tmp_path_factory, speechocean_dir, tiny_model_dir):
    ws, model = _private_workspace(tmp_path, tmp_path_factory, speechocean_dir, tiny_model_dir)
    config = TrainConfig(model=str(model), device="cpu", quantization="4bit", lora_rank=8, max_steps=5)
    (ws / "runs" / "planned").mkdir(parents=True)  # a run that never started here (e.g. it did not fit) is enough
    (ws / "runs" / "planned" / "config.json").write_text(json.dumps(config.to_dict()))
    result = export_bundle(ws, "planned")
    folder, archive = Path(result["path"]), Path(result["archive"])
    assert folder == ws / "exports" / "runs" / "planned" / "planned-bundle" and archive.name == "planned-bundle.tar.gz"
    assert result["model_bundled"] is True and result["dataset"]["splits"] == {"train": 4, "eval": 2}
    for name in ("README.md", "train.sh", "config.json", "bundle.json", "requirements.txt", "vertex_job.yaml",
                 "dataset/train.parquet", "dataset/eval.parquet", "dataset/build_report.json",
                 "pipeline/training/train.py", "pipeline/export/bundle.py", "model/config.json"):
        assert (folder / name).is_file(), name
    assert os.access(folder / "train.sh", os.X_OK)
    assert not list(folder.rglob("__pycache__"))
    requirements = (folder / "requirements.txt").read_text().splitlines()
    pinned = [line for line in requirements if line and not line.startswith("#")]
    assert all("==" in line for line in pinned) and any(line.startswith("torch==") for line in pinned)
    assert not any(line.startswith(("gradio", "pytest", "playwright")) for line in pinned)
    saved = json.loads((folder / "config.json").read_text())
    assert saved["model"] == "model" and saved["device"] == "auto" and saved["max_steps"] == 5
    meta = json.loads((folder / "bundle.json").read_text())
    assert meta["model"]["id"] == str(model) and meta["model"]["fingerprint"]["config_sha256"]
    assert "accelerate.commands.launch" in (folder / "train.sh").read_text()
    readme = (folder / "README.md").read_text()
    assert "gcloud ai custom-jobs create" in readme and "gcloud storage cp planned-bundle.tar.gz" in readme
    job = (folder / "vertex_job.yaml").read_text()
    assert "machineType: g2-standard-12" in job and "acceleratorType: NVIDIA_L4" in job and "imageUri: python:3.11" in job
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "planned-bundle/train.sh" in names and "planned-bundle/dataset/train.parquet" in names

    flags = train_flags(folder, "cpu")
    assert flags[flags.index("--model") + 1] == str((folder / "model").resolve())
    assert flags[flags.index("--device") + 1] == "cpu" and flags[flags.index("--max-steps") + 1] == "5"


@pytest.mark.slow
def test_a_bundle_trains_without_the_workspace_and_comes_back(tmp_path, tmp_path_factory, speechocean_dir,
                                                              tiny_model_dir, launched, capsys):
    ws, model = _private_workspace(tmp_path, tmp_path_factory, speechocean_dir, tiny_model_dir)
    config = TrainConfig(model=str(model), device="cpu", quantization="4bit", lora_rank=8, lora_alpha=16, batch_size=1,
                         grad_accum=1, max_steps=1, eval_steps=0, save_steps=100, learning_rate=1e-2, warmup_ratio=0.0)
    assert train(config, ws, "tiny1")["status"] == "completed"
    result = export_bundle(ws, "tiny1", tmp_path / "exports")

    job = tmp_path / "job"  # an empty folder, as on the GPU machine
    job.mkdir()
    with tarfile.open(result["archive"]) as tar:
        extract_tar(tar, job)  # as a GPU machine unpacks it, on any Python 3.11
    hidden = tmp_path / "elsewhere"
    shutil.move(str(ws), str(hidden))  # the workspace, with its base model, is gone while the bundle trains
    env = dict(os.environ, PYTHON=sys.executable, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PYTHONPATH", None)  # the bundle's own pipeline package, not this checkout's
    log_path = tmp_path / "train-sh.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([str(job / "tiny1-bundle" / "train.sh"), "--cpu", "--max-steps", "4"], cwd=job,
                                   env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    launched.append(process)
    try:
        code = process.wait(timeout=1500)
    except subprocess.TimeoutExpired:
        pytest.fail(f"train.sh did not finish: {log_path.read_text()[-4000:]}")
    assert code == 0, log_path.read_text()[-4000:]
    output = job / "tiny1-bundle" / "output"
    run_dir = output / "runs" / "tiny1"
    done = json.loads((run_dir / "result.json").read_text())
    assert done["status"] == "completed" and done["steps"] == 4, done
    assert [p["step"] for p in read_progress(output, "tiny1") if p["kind"] == "train"] == [1, 2, 3, 4]
    assert json.loads((run_dir / "config.json").read_text())["model"] == str(job / "tiny1-bundle" / "model")
    assert (run_dir / "adapter" / "adapter_model.safetensors").exists() and (run_dir / "bundle.json").exists()

    shutil.move(str(hidden), str(ws))  # back home
    imported = import_run(ws, output, name="cloud")
    assert imported["model"] == str(model) and imported["dataset_matches"] is True and imported["differences"] == []
    assert json.loads((ws / "runs" / "cloud" / "config.json").read_text())["model"] == str(model)
    assert infer_main(["--workspace", str(ws), "--run", "cloud", "--audio", str(speechocean_dir / CLIP),
                       "--text", "WE CALL IT BEAR", "--max-new-tokens", "4", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["run"] == "cloud" and answer["adapter_dir"] == str(ws / "runs" / "cloud" / "adapter")
    assert answer["new_tokens"] >= 1
