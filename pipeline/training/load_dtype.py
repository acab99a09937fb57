"""Loading in the checkpoint's dtype, then casting: how a CPU that computes in fp32 loads a bf16 checkpoint.

`pipeline.training.model.load_model` asks `from_pretrained` for the stored dtype when this machine
computes in fp32 on CPU (`pipeline.calibration.precision`) and the checkpoint is bf16, then casts the
floating-point weights itself (`cast_floating_weights`), one tensor at a time.
"""

from __future__ import annotations

import torch


def checkpoint_torch_dtype(model_id: str) -> torch.dtype | None:
    """The dtype `model_id`'s config.json says its weights are stored in (`dtype` / `torch_dtype`, top
    level or `text_config`), or None when it does not say or cannot be read."""
    from pipeline.memory.shape import load_model_config  # noqa: PLC0415
    from pipeline.memory.terms import checkpoint_dtype  # noqa: PLC0415

    try:
        config = load_model_config(model_id)
    except Exception:  # noqa: BLE001 - unknown: load as asked
        return None
    if not any((c or {}).get(k) for c in (config, config.get("text_config")) for k in ("dtype", "torch_dtype")):
        return None
    return getattr(torch, checkpoint_dtype(config))


def cast_floating_weights(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Cast every floating-point parameter and buffer not already in `dtype` to it, one tensor at a time
    (quantized weights, stored as integers, are left alone). Returns the tensors cast.

    Why not `from_pretrained(dtype=torch.float32)` on CPU: on full-size E2B with NF4 that load was
    killed at 23.2 GiB of anonymous memory with 61 % of the weights read (2026-12-01, AMD EPYC, 24 GiB),
    where the fp32 weights are ~14 GiB. Loaded as stored (bf16, memory-mapped) and cast here, each
    weight's fp32 copy is the only new memory, and the bf16 pages it was read from are file pages the
    caller hands back (`pipeline.training.checkpoint_pages`)."""
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
