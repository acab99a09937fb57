"""Loading in the checkpoint's dtype, then casting: how a CPU that computes in fp32 loads a bf16 checkpoint.

`pipeline.model.loading.load_model` asks `from_pretrained` for the stored dtype when this machine
computes in fp32 on CPU (`pipeline.calibration.precision`) and the checkpoint is bf16, then casts the
floating-point weights itself (`cast_floating_weights`), one tensor at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from pipeline.model.catalog import stated_checkpoint_dtype


def checkpoint_torch_dtype(model_id: str) -> torch.dtype | None:
    """The dtype `model_id`'s config.json says its weights are stored in
    (`pipeline.model.catalog.stated_checkpoint_dtype`), or None when it does not say or cannot be read. A
    local folder's file is read directly; a hub id's through the cache first (`pipeline.model.hub`)."""
    local = Path(str(model_id)) / "config.json"
    try:
        if local.is_file():
            config = json.loads(local.read_text(encoding="utf-8"))
        else:
            from transformers import AutoConfig  # noqa: PLC0415

            from pipeline.model.hub import from_pretrained_cached_first  # noqa: PLC0415

            config = from_pretrained_cached_first(AutoConfig.from_pretrained, str(model_id)).to_dict()
    except Exception:  # noqa: BLE001 - unknown: load as asked
        return None
    stated = stated_checkpoint_dtype(config)
    return getattr(torch, stated) if stated else None


def cast_floating_weights(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Cast every floating-point parameter and buffer not already in `dtype` to it, one tensor at a time
    (quantized weights, stored as integers, are left alone). Returns the tensors cast.

    Why not `from_pretrained(dtype=torch.float32)` on CPU: on full-size E2B with NF4 that load was
    killed at 23.2 GiB of anonymous memory with 61 % of the weights read (2026-12-01, AMD EPYC, 24 GiB),
    where the fp32 weights are ~14 GiB. Loaded as stored (bf16, memory-mapped) and cast here, each
    weight's fp32 copy is the only new memory, and the bf16 pages it was read from are file pages the
    caller hands back (`pipeline.model.checkpoint_pages`)."""
    cast = 0
    with torch.no_grad():
        for module in model.modules():
            for name, param in list(module._parameters.items()):
                if param is not None and param.dtype.is_floating_point and param.dtype != dtype:
                    param.data = param.data.to(dtype)
                    cast += 1
            for name, buffer in list(module._buffers.items()):
                if buffer is not None and buffer.dtype.is_floating_point and buffer.dtype != dtype:
                    module._buffers[name] = buffer.to(dtype)
                    cast += 1
    return cast
