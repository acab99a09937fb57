"""Where each part of Gemma 3n is placed while it loads: the device map that keeps the per-layer
embedding table and an unused vision tower off the accelerator from the first byte.

Without it, `from_pretrained(device_map={"": "cuda"})` puts every weight on the GPU and only then can
the table be moved to host RAM or the vision tower freed, so the load peaks at all the weights
(E2B: 3.75 GiB of per-layer embeddings + 0.55 GiB of vision tower above what training keeps).

* `host_modules(device, ple_on_cpu=, vision_tower=)`: the module paths that go to host RAM.
* `placement_device_map(model, device, host)`: a device map naming every parameter and buffer,
  the host modules on "cpu", everything else on `device`, with no "" entry (accelerate's root hook
  would otherwise pull every tensor, the host ones included, onto the device while dispatching).
* `empty_model(model_id)`: the model built on the meta device, whose names the map is made from.
* `settle_placements(model)`: after loading with such a map, transformers has dispatched the model
  with accelerate hooks that treat the host modules as CPU-offloaded (weights on `meta`, copied to
  the GPU at every forward). Removing the hooks puts those weights back in host RAM as plain
  tensors; `keep_per_layer_embeddings_on_host` then wraps the table in `HostEmbedding` and
  `drop_vision_tower` frees the vision tower, so the training step sees the same model as before,
  with nothing of either on the GPU (`pipeline.model.loading.load_model` calls them).

Module paths come from the model's family (`ModelFamily.per_layer_embedding_module`, `vision_module`). What this module
deliberately does not do: offload anything the step needs on the device (no accelerate CPU-offload
at run time: each forward would copy the whole table to the GPU).
"""

from __future__ import annotations

import torch

from pipeline.model.catalog import DEFAULT_FAMILY, model_family
from pipeline.model.family import ModelFamily


def host_modules(device: str, *, ple_on_cpu: bool, vision_tower: bool, family: ModelFamily = DEFAULT_FAMILY) -> list[str]:
    """Module paths to place in host RAM at load on `device` (cuda, mps or cpu): the per-layer
    table with `ple_on_cpu` on CUDA (where it stays, behind `HostEmbedding`), and the vision tower
    when it is not wanted (freed right after loading). On CPU everything is host RAM already: []."""
    if device == "cpu":
        return []
    host = []
    if ple_on_cpu and device == "cuda":
        host.append(family.per_layer_embedding_module)
    if not vision_tower:
        host.append(family.vision_module)
    return host


def placement_device_map(model: torch.nn.Module, device: str, host: list[str]) -> dict[str, str]:
    """A `from_pretrained` device map placing the modules `host` on "cpu" and all else on `device`.

    Args:
        model: the model (e.g. built on the meta device by `empty_model`); only its names are read.
        device: where everything else goes ("cuda", "mps", or any torch device string).
        host: module paths (e.g. the family's `per_layer_embedding_module`) to keep in host RAM.
    Returns:
        `{"": device}` when `host` is empty; otherwise a map whose keys are the host modules, every
        sibling module along the path to them, and the direct parameters and buffers (persistent or
        not) of the modules on that path, so every tensor name resolves (transformers places a name
        the map does not cover on "cpu"), with no "" key (see the module doc).
    Raises:
        ValueError: a path in `host` is not a module of `model`.
    """
    if not host:
        return {"": device}
    modules = dict(model.named_modules())
    missing = [path for path in host if path not in modules]
    if missing:
        raise ValueError(f"no module {missing} in {type(model).__name__}; cannot place it in host RAM")
    device_map: dict[str, str] = {}

    def visit(module: torch.nn.Module, prefix: str) -> None:
        for name, _ in list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False)):
            device_map[f"{prefix}.{name}" if prefix else name] = device
        for name, child in module.named_children():
            path = f"{prefix}.{name}" if prefix else name
            if path in host:
                device_map[path] = "cpu"
            elif any(h.startswith(path + ".") for h in host):
                visit(child, path)
            else:
                device_map[path] = device

    visit(model, "")
    return device_map


def empty_model(model_id: str) -> torch.nn.Module:
    """`model_id`'s architecture built on the meta device (no weights read, no memory used), for
    `placement_device_map`. The Auto classes resolve Gemma 3n's `model_type` to the class
    `pipeline.model.loading.load_model` loads."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from pipeline.model.hub import from_pretrained_cached_first, translate_load_errors

    with translate_load_errors(str(model_id), "config"):
        config = from_pretrained_cached_first(AutoConfig.from_pretrained, str(model_id))
    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(config)


def settle_placements(model: torch.nn.Module) -> int:
    """Remove the accelerate dispatch hooks a mixed device map left on `model` (in place); returns
    the number of modules that had one.

    `accelerate.hooks.remove_hook_from_module` gives every offloaded module its weights back from the
    hook's weights map on their original device (host RAM), restores each module's own `forward`, and
    drops the `to`/`cuda` guards `dispatch_model` put on the model. `hf_device_map` is removed as
    well, so the model looks as it does after a single-device load (`transformers.Trainer` and
    `accelerate` then treat it as one model on one device).
    """
    from accelerate.hooks import SequentialHook, remove_hook_from_module

    hooked = 0
    for module in model.modules():
        hook = getattr(module, "_hf_hook", None)
        if hook is None:
            continue
        hooked += 1
        for one in hook.hooks if isinstance(hook, SequentialHook) else (hook,):
            if getattr(one, "offload", False) and getattr(one, "weights_map", None) is not None:
                # Detaching restores what the weights map holds (the checkpoint's tensors, in host RAM).
                # A non-persistent buffer (e.g. the table's `embed_scale`) is not in it: it was moved to the
                # execution device with its value and stays there until its module moves or is freed.
                one.original_devices = {name: dev for name, dev in one.original_devices.items()
                                        if name in one.weights_map}
    remove_hook_from_module(model, recurse=True)
    if "hf_device_map" in model.__dict__:
        del model.hf_device_map
    return hooked


def _tensor_bytes(module: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in list(module.parameters()) + list(module.buffers()))


def drop_vision_tower(model: torch.nn.Module) -> int:
    """Free Gemma 3n's vision tower; returns the bytes it held (0 when already gone).

    The tutor's inputs are audio and text: `Gemma3nModel.forward` calls the vision tower only for
    `pixel_values`, and the vision soft-token embedder (`embed_vision`, kept) is all text-only rows
    need. On E2B/E4B the tower is MobileNetV5-300M: 294,126,912 parameters, 0.55 GiB in bf16
    (`pipeline.memory.VISION_TOWER_PARAMS`). Passing images to a model without it raises TypeError.
    """
    inner = model_family(model).inner(model)
    tower = getattr(inner, "vision_tower", None)
    if tower is None:
        return 0
    freed = _tensor_bytes(tower)
    inner.vision_tower = None
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # give the freed blocks back so the training step can use them
    return freed


class HostEmbedding(torch.nn.Module):
    """An embedding table kept in host (CPU) RAM, looked up there, with its rows sent to the
    device of the ids.

    Input: ids (any shape) int64 on any device. Output: `table(ids)` (ids shape + (dim,)), same dtype
    as the table, on the ids' device. The table is held outside the module tree (not a registered
    submodule, parameter or buffer), so `model.to(device)` (e.g. by `transformers.Trainer`) cannot
    move it back to the GPU and `state_dict()` does not include it. It is frozen (no gradient).
    """

    def __init__(self, table: torch.nn.Module) -> None:
        super().__init__()
        table.requires_grad_(False)
        self._host = (table.to("cpu"),)  # a tuple hides it from nn.Module's registry

    @property
    def table(self) -> torch.nn.Module:
        """The host-side embedding module (e.g. `Gemma3nTextScaledWordEmbedding`)."""
        return self._host[0]

    @property
    def weight(self) -> torch.Tensor:
        return self.table.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.table(input_ids.to("cpu")).to(input_ids.device, non_blocking=True)


def keep_per_layer_embeddings_on_host(model: torch.nn.Module) -> int:
    """Move Gemma 3n's per-layer embedding table (`language_model.embed_tokens_per_layer`, on E2B
    262,144 x (30 x 256) = 2.01 B parameters, 3.75 GiB in bf16) to host RAM behind a
    `HostEmbedding`; returns the bytes taken off the device (0 when the table was loaded into host
    RAM directly, `pipeline.model.placement`, or is already wrapped). A model entirely in host RAM
    (CPU training) is left as it is.

    Each forward then gathers the batch's rows on the CPU and copies only those (tokens x 7,680 x 2
    bytes, ~15 KB per token on E2B) to the GPU. The table is frozen in LoRA training, so nothing flows
    back. Source of the idea: the per-layer embeddings are designed to be cached off-accelerator
    (Gemma 3n model card, "Per-Layer Embedding (PLE) caching").
    """
    language_model = model_family(model).inner(model).language_model
    table = language_model.embed_tokens_per_layer
    if isinstance(table, HostEmbedding):
        return 0
    if table.weight.device.type == "cpu" and language_model.embed_tokens.weight.device.type == "cpu":
        return 0  # the whole model is in host RAM (CPU training): nothing to separate
    moved = _tensor_bytes(table) if table.weight.device.type != "cpu" else 0  # 0: loaded there directly
    if hasattr(table, "_hf_hook"):  # an accelerate dispatch hook would move the ids back to the GPU
        from accelerate.hooks import remove_hook_from_module

        remove_hook_from_module(table)
    language_model.embed_tokens_per_layer = HostEmbedding(table)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return moved
