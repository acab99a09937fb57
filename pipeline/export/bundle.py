"""A cloud job bundle: everything a GPU machine needs to train a run's settings without the workspace.

    NAME-bundle/
      README.md          the commands for a plain GPU VM and for a Vertex AI custom training job
      train.sh           finds the GPUs and runs `accelerate launch` with one process per GPU
                         (`--cpu`: on the CPU, for a test); writes OUTPUT/runs/NAME/
      config.json        the run's settings (`TrainConfig`; device `auto`)
      bundle.json        where it came from: run, base model (+ fingerprint), dataset fingerprint
      requirements.txt   the pinned packages training needs (this project's pins, without the app's)
      vertex_job.yaml    a Vertex AI CustomJobSpec: machine type, GPU, container, command
      dataset/           the built dataset as Parquet with the audio bytes (`pipeline.data.portable`)
      pipeline/          this project's `pipeline` package
      model/             the base model, only when it is a local folder (a hub id is downloaded there)
    NAME-bundle.tar.gz   the same folder as one file to upload

The bundle trains with the ordinary trainer: `python -m pipeline train --dataset dataset/ ...`
(the Parquet rows, no sample library), so its output is a run folder in the standard layout that
`python -m pipeline import-run` brings back. `python -m pipeline.export.bundle flags DIR DEVICE`
prints the train flags of a bundle's config.json, one per line (what train.sh runs).

This module writes files only; it starts no training and talks to no cloud.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from pipeline.errors import ExportError
from pipeline.export.staging import check_free_space, check_replaceable, folder_bytes, staged_file, staged_folder

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = REPO_ROOT / "pipeline"
APP_ONLY_PACKAGES = ("gradio", "pytest", "pytest-xdist", "playwright", "matplotlib")
"""Lines of requirements.txt the training job does not need (the app, its tests and plots)."""
SMALL_WEIGHTS_BYTES = 64 * 1024**2
"""Weight files up to this size are hashed whole in a model fingerprint; larger ones by size."""
BUNDLE_FORMAT = 1

VERTEX_MACHINE = {"machineType": "g2-standard-12", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 1}
"""One NVIDIA L4 (24 GB): Gemma 3n E2B with 4-bit LoRA needs well under that (`python -m pipeline estimate`)."""
VERTEX_IMAGE = "python:3.11"
"""Docker Hub's Python 3.11 image: `train.sh --install` pip-installs the pinned CUDA build of torch;
Vertex AI provides the NVIDIA driver."""


def model_fingerprint(model_id: str) -> dict[str, Any] | None:
    """Identify a base model from the files on this machine, without loading it.

    `config_sha256`: SHA-256 of its config.json; `weights_sha256`: SHA-256 over its weight files'
    names and sizes, and the bytes of those up to `SMALL_WEIGHTS_BYTES` (None when no weight file is
    here). Looks in the local folder, or the Hugging Face cache for a hub id; None when neither has
    the config.
    """
    from pipeline.model.hub import is_local_model

    if is_local_model(model_id):
        folder = Path(model_id).expanduser()
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(model_id, "config.json")
        except Exception:  # noqa: BLE001 - an odd id is simply not here
            found = None
        folder = Path(found).parent if isinstance(found, str) else None
    if folder is None or not (folder / "config.json").is_file():
        return None
    weights = hashlib.sha256()
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
    for file in files:
        size = file.stat().st_size
        weights.update(f"{file.name}\x1f{size}\x1e".encode())
        if size <= SMALL_WEIGHTS_BYTES:
            weights.update(hashlib.sha256(file.read_bytes()).digest())
    return {
        "config_sha256": hashlib.sha256((folder / "config.json").read_bytes()).hexdigest(),
        "weights_sha256": weights.hexdigest() if files else None,
    }


def model_differences(expected: dict | None, here: dict | None) -> list[str]:
    """What differs between two `model_fingerprint`s ([] when they match or one is unknown)."""
    if not expected or not here:
        return []
    out = []
    if expected.get("config_sha256") != here.get("config_sha256"):
        out.append("its config.json differs")
    if expected.get("weights_sha256") and here.get("weights_sha256") and expected["weights_sha256"] != here["weights_sha256"]:
        out.append("its weight files differ")
    return out


def training_requirements() -> str:
    """This project's pinned requirements.txt without the app-only packages, plus tensorboard at the
    installed version (Trainer writes TensorBoard events when it is there)."""
    from importlib import metadata

    lines, names = [], set()
    for line in (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        name = line.split("==")[0].split(">=")[0].strip().lower()
        if not line.strip() or line.lstrip().startswith("#") or name in APP_ONLY_PACKAGES:
            continue
        lines.append(line.strip())
        names.add(name)
    if "tensorboard" not in names:
        try:
            lines.append(f"tensorboard=={metadata.version('tensorboard')}")
        except metadata.PackageNotFoundError:
            pass
    header = "# The packages the training job needs, pinned as tested (the app's own are left out).\n"
    return header + "\n".join(lines) + "\n"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def train_flags(bundle_dir: str | os.PathLike, device: str) -> list[str]:
    """The `python -m pipeline train` flags of the bundle's config.json, with `--device device` and
    `--model` pointing at the bundle's `model/` folder when it has one."""
    from pipeline.config import TrainConfig
    from pipeline.training.runs import config_flags

    bundle = Path(bundle_dir).resolve()
    config = TrainConfig.from_dict(json.loads((bundle / "config.json").read_text(encoding="utf-8")))
    model = bundle / config.model
    if not os.path.isabs(config.model) and model.is_dir():
        config = config.replace(model=str(model))
    return config_flags(config.replace(device=device))


def _train_sh(run: str, hub_model: str | None = None) -> str:
    """train.sh; for a base model on the hub (`hub_model`), it is fetched first with `python -m pipeline get-model`
    (a run never downloads its model: `pipeline.model.local_copy.require_model_here`)."""
    get_model = "" if hub_model is None else (
        f'"$PYTHON" -m pipeline get-model --model {shlex.quote(hub_model)}  # the base model, once: resumable, '
        "checked against the hub's hashes (a gated model needs HF_TOKEN)\n")
    return f"""#!/usr/bin/env bash
# Train run `{run}` from this bundle: one process per visible NVIDIA GPU (accelerate launch, DDP).
#
#   ./train.sh [--install] [--cpu] [--processes N] [--output DIR] [--resume] [train flags...]
#
#   --install      pip install -r requirements.txt first (into the active Python; set PYTHON=... to choose it)
#   --cpu          train on the CPU (slow; one process, or N with --processes N through torchrun): a test
#   --processes N  processes to start (default: one per GPU; 1 with --cpu)
#   --output DIR   where the run folder goes: DIR/runs/{run}/ (default: ./output, or $OUTPUT_DIR)
#   --resume       continue the run from its last checkpoint in DIR/runs/{run}/
#   anything else goes to `python -m pipeline train`, after this bundle's settings (e.g. --max-steps 4)
#
# Stop cleanly: touch DIR/runs/{run}/STOP (saves a checkpoint and the adapter; --resume continues).
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
RUN="{run}"
OUTPUT="${{OUTPUT_DIR:-$HERE/output}}"
PYTHON="${{PYTHON:-python3}}"
DEVICE=auto; PROCESSES=""; INSTALL=0; RESUME=0; EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cpu) DEVICE=cpu; shift ;;
    --processes) PROCESSES="$2"; shift 2 ;;
    --output) OUTPUT="$2"; shift 2 ;;
    --install) INSTALL=1; shift ;;
    --resume) RESUME=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
if [[ $INSTALL == 1 ]]; then "$PYTHON" -m pip install -r "$HERE/requirements.txt"; fi
export PYTHONPATH="$HERE${{PYTHONPATH:+:$PYTHONPATH}}"
if [[ $DEVICE == auto ]]; then
  GPUS="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')"
  if [[ "$GPUS" -lt 1 ]]; then
    echo "train.sh: no CUDA GPU is visible (torch.cuda.device_count() is 0). Check the driver with nvidia-smi," \\
         "or run ./train.sh --cpu to train on the CPU (slow)." >&2
    exit 2
  fi
  PROCESSES="${{PROCESSES:-$GPUS}}"
  LAUNCH=(-m accelerate.commands.launch --num_machines 1 --num_processes "$PROCESSES" --mixed_precision no --dynamo_backend no)
  if [[ "$PROCESSES" -gt 1 ]]; then LAUNCH+=(--multi_gpu); fi
else
  PROCESSES="${{PROCESSES:-1}}"
  if [[ "$PROCESSES" -gt 1 ]]; then  # accelerate launch runs one CPU process unless MPI is set up
    LAUNCH=(-m torch.distributed.run --standalone --nproc_per_node "$PROCESSES")
  else
    LAUNCH=(-m accelerate.commands.launch --cpu --num_machines 1 --num_processes 1 --mixed_precision no --dynamo_backend no)
  fi
fi
FLAGS=()
if [[ $RESUME == 1 ]]; then
  FLAGS=(--resume)  # a resumed run keeps the settings saved in its config.json
else
  mapfile -t FLAGS < <("$PYTHON" -m pipeline.export.bundle flags "$HERE" "$DEVICE")
fi
{get_model}mkdir -p "$OUTPUT/runs/$RUN"
cp "$HERE/bundle.json" "$OUTPUT/runs/$RUN/bundle.json"
PROCESS_WORD=processes; [[ "$PROCESSES" == 1 ]] && PROCESS_WORD=process
echo "train.sh: $PROCESSES $PROCESS_WORD on $DEVICE; run folder $OUTPUT/runs/$RUN" >&2
exec "$PYTHON" "${{LAUNCH[@]}}" -m pipeline train --workspace "$OUTPUT" --run-name "$RUN" --dataset "$HERE/dataset" \\
  "${{FLAGS[@]}}" "${{EXTRA[@]}}"
"""


def _vertex_yaml(run: str, hub_model: bool) -> str:
    machine = VERTEX_MACHINE
    env = ""
    if hub_model:
        env = (
            "      env:\n"
            "        - name: HF_TOKEN  # a read token of an account that accepted the Gemma license\n"
            "          value: HF_TOKEN_VALUE\n"
        )
    return f"""# Vertex AI custom training job for bundle `{run}`:
#   gcloud ai custom-jobs create --region=REGION --display-name=tutor-{run} --config=vertex_job.yaml
# Replace BUCKET_NAME (the bundle is read from, and the run written to, Cloud Storage through the
# /gcs/BUCKET_NAME mount Vertex AI provides){' and HF_TOKEN_VALUE' if hub_model else ''}.
# Two GPUs: machineType g2-standard-24 with acceleratorCount 2 (train.sh starts one process per GPU);
# A100s: machineType a2-highgpu-1g / a2-highgpu-2g with acceleratorType NVIDIA_TESLA_A100.
workerPoolSpecs:
  - machineSpec:
      machineType: {machine['machineType']}
      acceleratorType: {machine['acceleratorType']}
      acceleratorCount: {machine['acceleratorCount']}
    replicaCount: 1
    diskSpec:
      bootDiskType: pd-ssd
      bootDiskSizeGb: 200
    containerSpec:
      imageUri: {VERTEX_IMAGE}
      command: ["bash", "-c"]
      args:
        - >-
          tar xzf /gcs/BUCKET_NAME/bundles/{run}-bundle.tar.gz -C /tmp &&
          /tmp/{run}-bundle/train.sh --install --output /gcs/BUCKET_NAME/tutor-runs
{env}"""


def _readme(run: str, info: dict, config: dict, bundled_model: bool) -> str:
    model = info["model"]["id"]
    splits = info["dataset"].get("splits", {})
    token = "" if bundled_model else (
        f"\n`{model}` is downloaded from the Hugging Face hub on the GPU machine; Gemma is gated, so first "
        "`export HF_TOKEN=hf_...` (a read token of an account that accepted the license at "
        f"https://huggingface.co/{model}).\n")
    return f"""# Cloud job bundle: run `{run}`

Trains run `{run}`'s settings on any machine with NVIDIA GPUs, without the workspace it came from:
base model `{model}`{' (included in model/)' if bundled_model else ''}, {config['quantization']} base, LoRA r={config['lora_rank']},
batch {config['batch_size']} x grad accum {config['grad_accum']} per GPU, {splits.get('train', 0)} train / {splits.get('eval', 0)} eval rows
(dataset/, Parquet with the audio). Every setting is in config.json; edit it before training to change one.
{token}
`train.sh` starts one training process per GPU (`accelerate launch`, PyTorch DDP); with N GPUs the
global batch is N times the one above. The memory estimate of the app is per process: every GPU
needs that much.

## On a GPU VM (any cloud, or your own machine)

Linux with an NVIDIA driver (`nvidia-smi` lists the GPUs) and Python 3.10 or newer:

```bash
tar xzf {run}-bundle.tar.gz && cd {run}-bundle
python3 -m venv .venv && . .venv/bin/activate
./train.sh --install                  # installs requirements.txt, then trains on every GPU
./train.sh --cpu --max-steps 4        # or first a quick test on the CPU
```

The run folder is `output/runs/{run}/`: `progress.jsonl` (one line per step), `train.log`,
TensorBoard events when tensorboard is installed (`tensorboard --logdir output/runs/{run}`),
`checkpoints/`, `adapter/`, `result.json`. Stop it with `touch output/runs/{run}/STOP` (it saves and
ends as `stopped`); `./train.sh --resume` continues it.

## As a Vertex AI custom training job

```bash
BUCKET=my-tutor-bucket REGION=us-central1
gcloud storage buckets create gs://$BUCKET --location=$REGION          # once
gcloud storage cp {run}-bundle.tar.gz gs://$BUCKET/bundles/
sed -i "s/BUCKET_NAME/$BUCKET/g" vertex_job.yaml{'' if bundled_model else '; sed -i "s/HF_TOKEN_VALUE/$HF_TOKEN/" vertex_job.yaml'}
gcloud ai custom-jobs create --region=$REGION --display-name=tutor-{run} --config=vertex_job.yaml
gcloud ai custom-jobs stream-logs JOB_ID --region=$REGION               # JOB_ID: printed by create
```

`vertex_job.yaml` runs the container `{VERTEX_IMAGE}` on machine type `{VERTEX_MACHINE['machineType']}` with
{VERTEX_MACHINE['acceleratorCount']} x `{VERTEX_MACHINE['acceleratorType']}` (24 GB), unpacks the bundle from Cloud Storage (mounted at
`/gcs/$BUCKET`) and writes the run to `gs://$BUCKET/tutor-runs/runs/{run}/`. For more GPUs change the
machine type and `acceleratorCount` (the comments in the file list some); train.sh uses them all.

## Bring the run back

```bash
gcloud storage cp -r gs://$BUCKET/tutor-runs/runs/{run} .               # or: scp -r VM:{run}-bundle/output/runs/{run} .
python -m pipeline import-run --workspace WS --source {run}             # a folder or a .tar.gz
```

`import-run` checks the base model and the dataset build against your workspace and says what
differs; the run then appears in the app's Train and Try tabs like one trained there.
"""


def export_bundle(workspace, run: str, out_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Write `OUT/NAME-bundle/` and `OUT/NAME-bundle.tar.gz` for run `run` (see the module docstring).

    The run needs only its config.json (a run that ran out of memory here can be bundled); the
    workspace needs a built dataset. A base model given as a local folder is copied into `model/`.

    Returns:
        `{"format": "bundle", "run", "path" (the folder), "archive" (the .tar.gz), "bytes" (archive),
        "base_model", "model_bundled", "dataset" (dataset.json dict), "notes"}`.

    Raises:
        ExportError: no such run, or not enough free disk. DatasetError: no built dataset.
    """
    from pipeline.config import TrainConfig
    from pipeline.data.portable import write_portable_dataset
    from pipeline.export.tutor import default_out_dir, read_run
    from pipeline.fileio import atomic_write_json, atomic_write_text
    from pipeline.model.hub import is_local_model
    from pipeline.workspace import Workspace

    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    info = read_run(ws, run, need_adapter=False)
    config = TrainConfig.from_dict(info["settings"])
    out = Path(out_dir) if out_dir is not None else default_out_dir(ws, run)
    model_id = str(config.model)
    local_model = is_local_model(model_id)
    if local_model and not Path(model_id).expanduser().is_dir():
        raise ExportError(f"Run `{run}` was trained on the local model folder `{model_id}`, which is gone; put it back "
                          "(the bundle carries a local base model in its model/ folder).")
    needed = folder_bytes(ws.dataset_dir) + (folder_bytes(Path(model_id).expanduser()) if local_model else 0) + 5_000_000
    check_free_space(out, 2 * needed, f"the bundle of run `{run}` (folder and .tar.gz)")
    name = f"{run}-bundle"
    replaced = check_replaceable(out / name, "bundle.json")
    with staged_folder(out / name, record="bundle.json") as staging:
        dataset = write_portable_dataset(ws, staging / "dataset")
        if local_model:
            shutil.copytree(Path(model_id).expanduser(), staging / "model",
                            ignore=shutil.ignore_patterns(".cache", "__pycache__"))
        shutil.copytree(PACKAGE_DIR, staging / "pipeline", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        bundle_config = config.replace(device="auto", model="model" if local_model else model_id)
        atomic_write_json(staging / "config.json", bundle_config.to_dict())
        meta = {
            "format": BUNDLE_FORMAT,
            "run": run,
            "created_at": round(time.time(), 3),
            "source_workspace": str(ws.root),
            "model": {"id": model_id, "bundled": local_model, "fingerprint": model_fingerprint(model_id)},
            "dataset": dataset,
            "settings": info["settings"],
            "pipeline_commit": _git_commit(),
        }
        atomic_write_json(staging / "bundle.json", meta)
        atomic_write_text(staging / "requirements.txt", training_requirements())
        atomic_write_text(staging / "train.sh", _train_sh(run, None if local_model else model_id))
        atomic_write_text(staging / "vertex_job.yaml", _vertex_yaml(run, hub_model=not local_model))
        atomic_write_text(staging / "README.md", _readme(run, meta, config.to_dict(), local_model))
        (staging / "train.sh").chmod(0o755)
        with staged_file(out / f"{name}.tar.gz") as archive:
            with tarfile.open(archive, "w:gz") as tar:
                tar.add(staging, arcname=name, filter=_tar_member)
    archive_path = out / f"{name}.tar.gz"
    notes = [] if local_model else [f"The GPU machine downloads `{model_id}` from the hub (set HF_TOKEN there)."]
    notes += [replaced] if replaced else []
    return {"format": "bundle", "run": run, "path": str(out / name), "archive": str(archive_path),
            "bytes": archive_path.stat().st_size, "base_model": model_id, "model_bundled": local_model,
            "dataset": dataset, "notes": notes}


def _tar_member(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """Archive entries readable by anyone who unpacks them, owned by nobody in particular."""
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    member.mode = 0o755 if member.isdir() or member.name.endswith("train.sh") else member.mode | 0o644
    return member


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline.export.bundle flags BUNDLE_DIR DEVICE`: print the bundle's train flags,
    one per line (train.sh reads them)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 3 or argv[0] != "flags":
        print("usage: python -m pipeline.export.bundle flags BUNDLE_DIR auto|cuda|cpu", file=sys.stderr)
        return 2
    print("\n".join(train_flags(argv[1], argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
