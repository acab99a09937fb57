"""The key/value cache of a batch of answers that join and leave at different times.

Continuous batching (Orca, OSDI 2022; vLLM's scheduler) lets a new question join answers that are
already being generated: the question is read alone (its prefill), then its cache is put beside the
running rows' caches and every row advances one token per forward. A transformers `DynamicCache`
holds, per layer, keys and values of shape `(rows, kv_heads, positions, head_dim)`, with every row
at the same number of positions. Rows of different lengths are aligned on the right (their newest
token in the same column) by padding on the left, and the padding columns are masked out in the
2-D attention mask that goes with the cache (0 = padding). Masked columns weigh exactly 0 after the
softmax, and each row's positions for the rotary embedding count its own tokens only
(`attention_mask.cumsum(-1) - 1`, as `generate` computes them), so a row's answer is the one it has
alone, up to float rounding in the larger matrix products (greedy answers are checked equal to
solo ones by `tests/test_batching.py`).

Layers handled (transformers 5.24 `cache_utils`): `DynamicLayer` (full attention: every position
kept), `DynamicSlidingWindowLayer` (the last `sliding_window - 1` positions kept, and
`cumulative_length` counting all of them, which sizes the sliding mask) and `DummyLayer` (a layer that
reuses another layer's keys, Gemma 3n's KV sharing: nothing stored). `batchable` says whether a
cache holds only those; a model whose cache holds others is answered one question at a time.

It deliberately knows nothing of prompts, tokens or scheduling (`pipeline.tutor.batching` does).
"""

from __future__ import annotations

from typing import Any

import torch

_FULL = "DynamicLayer"
_SLIDING = "DynamicSlidingWindowLayer"
_DUMMY = "DummyLayer"


def _kind(layer: Any) -> str | None:
    """`_FULL`, `_SLIDING`, `_DUMMY`, or None for a layer this module cannot pad or join."""
    name = type(layer).__name__
    return name if name in (_FULL, _SLIDING, _DUMMY) else None


def batchable(cache: Any) -> bool:
    """True when every layer of `cache` (a transformers `Cache` after a forward) is one this module
    can pad, join and cut; False for any other cache (a static, quantized or linear-attention one)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(_kind(layer) is not None for layer in layers)


def _stored(layer: Any) -> int:
    """Positions the layer holds (0 before its first update)."""
    keys = getattr(layer, "keys", None)
    return 0 if keys is None or keys.numel() == 0 else int(keys.shape[-2])


def _pad_left(tensor: torch.Tensor, columns: int) -> torch.Tensor:
    """`tensor` (rows, heads, positions, dim) with `columns` zero positions put before the first."""
    if columns <= 0:
        return tensor
    shape = (*tensor.shape[:-2], columns, tensor.shape[-1])
    return torch.cat([tensor.new_zeros(shape), tensor], dim=-2)


def cache_argument(model: Any) -> str:
    """The keyword a model's forward takes its cache by: `cache` (transformers 5.24 names it so; the
    old `past_key_values` still works there, with a deprecation warning) or `past_key_values`.
    `model` may be a peft `PeftModel` (its base model is asked)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return "past_key_values"


def returned_cache(output: Any) -> Any:
    """The cache a forward with `use_cache=True` returned (`output.cache`, or the older `past_key_values`)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def join(first: Any, first_mask: torch.Tensor, second: Any, second_mask: torch.Tensor) -> torch.Tensor:
    """Put the rows of `second` after the rows of `first`, in place in `first`; returns the joined mask.

    Both caches come from the same model (one layer kind per index). The shorter batch is padded on
    the left to the longer one's positions, in its keys, values and mask, so every row's newest
    position lands in the same last column.

    Args:
        first, second: `DynamicCache`s (`batchable`), `first` modified in place.
        first_mask, second_mask: their 2-D attention masks, long or bool, shape (rows, positions),
            1 for a real token, 0 for padding.

    Returns:
        The joined mask, shape (rows of both, max positions), the dtype of `first_mask`.

    Raises:
        ValueError: the caches are not `batchable` or their layers differ.
    """
    if not (batchable(first) and batchable(second)) or len(first.layers) != len(second.layers):
        raise ValueError("These caches cannot be joined: a layer is not a dynamic, sliding-window or shared one.")
    total = max(first_mask.shape[1], second_mask.shape[1])
    for mine, theirs in zip(first.layers, second.layers):
        kind = _kind(mine)
        if kind != _kind(theirs):
            raise ValueError(f"Cache layers differ ({type(mine).__name__} and {type(theirs).__name__}).")
        if kind == _DUMMY or (_stored(mine) == 0 and _stored(theirs) == 0):
            continue
        keep = total if kind == _FULL else min(total, mine.sliding_window - 1)
        keys, values = [], []
        for layer in (mine, theirs):
            keys.append(_pad_left(layer.keys, keep - _stored(layer)))
            values.append(_pad_left(layer.values, keep - _stored(layer)))
        mine.keys, mine.values = torch.cat(keys, dim=0), torch.cat(values, dim=0)
        if kind == _SLIDING:
            mine.cumulative_length = total
    masks = [torch.cat([m.new_zeros((m.shape[0], total - m.shape[1])), m], dim=1) for m in (first_mask, second_mask)]
    return torch.cat([masks[0], masks[1].to(first_mask.dtype)], dim=0)


def keep_rows(cache: Any, mask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """Keep only `rows` (indices, in the order given) of the batch, in place in `cache`, then drop the
    leading columns that are padding in every kept row. Returns the kept rows' mask, shorter by those
    columns.

    Args:
        cache: a `batchable` `DynamicCache`.
        mask: its 2-D attention mask (rows, positions).
        rows: the row indices to keep (at least one).
    """
    index = torch.tensor(rows, dtype=torch.long, device=mask.device)
    mask = mask.index_select(0, index)
    for layer in cache.layers:
        if _kind(layer) != _DUMMY and _stored(layer):
            layer.keys = layer.keys.index_select(0, index.to(layer.keys.device))
            layer.values = layer.values.index_select(0, index.to(layer.values.device))
    real = mask.bool().any(dim=0)
    drop = int(torch.argmax(real.to(torch.int8)).item()) if bool(real.any()) else 0
    if drop == 0:
        return mask
    total = mask.shape[1] - drop
    for layer in cache.layers:
        kind = _kind(layer)
        if kind == _DUMMY or not _stored(layer):
            continue
        keep = total if kind == _FULL else min(total, layer.sliding_window - 1)
        cut = _stored(layer) - keep
        if cut > 0:  # the dropped columns are padding in every kept row
            layer.keys, layer.values = layer.keys[..., cut:, :], layer.values[..., cut:, :]
        if kind == _SLIDING:
            layer.cumulative_length = total
    return mask[:, drop:]


def holds_all(cache: Any, positions: int) -> bool:
    """True when `cache` is `batchable` and every layer that stores keys holds all `positions` of the
    prompt it read (a sliding-window layer shorter than the prompt has dropped some: such a cache is
    not reused as a prompt's start, `pipeline.tutor.batching.PrefixCache`)."""
    return batchable(cache) and all(_kind(layer) == _DUMMY or _stored(layer) == positions for layer in cache.layers)


def copy_cache(cache: Any) -> Any:
    """A copy of `cache` that a forward can extend without changing `cache` (keys and values copied: a
    prompt start's ~100 positions are ~1 MB on the mid-size stand-in, ~3 MB on E2B)."""
    import copy

    return copy.deepcopy(cache)
