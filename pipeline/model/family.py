"""The model family: the one small interface behind which a base model's family is known.

Everything that depends on which family a checkpoint belongs to (its Python class, which modules are
quantized or wrapped with LoRA, where its per-layer table and towers sit, its chat turns, what a clip
costs in tokens, its `config.json` keys and parameter counts, its offline stand-in) is a member of a
`ModelFamily`. The rest of the pipeline asks the family of the model at hand, never a constant of its
own:

`pipeline.model.catalog` finds the family of a model (`family_for`, `family_of`) among the families
it lists: Gemma 3n (`pipeline.model.gemma3n.GEMMA3N`) and Gemma 4 (`pipeline.model.gemma4.GEMMA4`), each
made by `pipeline.model.gemma.gemma_family` from what the family declares and what every Gemma shares.
A new family is one module of what differs, its stand-in's `TinySpec` and one more entry in
`catalog.FAMILIES` (docs/ARCHITECTURE.md, "Adding a model family").

Torch-free at import: the estimate and the app read families without loading a model library.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class ModelFamily:
    """What one model family decides; each family is one instance (see `FAMILIES`).

    Identity and catalogue:
        name: short id used in files and flags ("gemma3n").
        label: the family's name for people ("Gemma 3n").
        model_types: `config.json` `model_type` values of the family's checkpoints.
        models: hub ids the app and the CLI offer, the family's default first.
        shipped_configs: hub id -> file name in `assets/` (a copy of its `config.json`).
        licence_url: where a person accepts the licence of a gated checkpoint ("" when not gated).
        tiny_dir_name: the folder name of the offline stand-in under the app's `models/`.
    Audio:
        max_audio_s: seconds of a clip the feature extractor keeps (the rest is cut).
        audio_tokens: `audio_tokens(seconds) -> int`, positions one clip of that length takes.
    Chat turns (the supervised span, `pipeline.model.tokens`):
        turn_start, turn_end: the control tokens that open and close a turn.
        model_turn_header: the text between `turn_start` and a model turn's answer.
    Modules, by full path from the top-level model:
        quantization_skip_modules: regexes kept unquantized (`load_model`).
        int8_extra_skip_modules: also kept with 8-bit quantization.
        audio_tower_module: the audio encoder (dropped from the skip list with `quantize_audio_encoder`).
        language_lora_regex, audio_lora_regex: LoRA targets (peft full-matches module names).
        per_layer_embedding_module, vision_module: what placement may keep in host RAM.
    Functions:
        inner(model) -> the multimodal model inside a `...ForConditionalGeneration` (or a PeftModel of one).
        audio_blocks(model) -> the audio encoder's blocks (gradient checkpointing with audio LoRA).
        part_of(module_name) -> "language", "audio" or "other" (LoRA counts per part).
        shape(config) -> `pipeline.model.shape.ModelShape` (raises `ModelLoadError` naming a missing key).
        part_params(shape) -> parameters per part (`pipeline.model.shape.PartParams`).
        make_tiny(out_dir, seed) -> Path: writes the family's tiny random stand-in with its processor.
        model_class() -> the transformers class `load_model` loads.
        audio_span(processor, seconds) -> str: the text one clip of that length becomes in the rendered
            conversation (markers and audio placeholders; `pipeline.model.tokens.TokenCounter`).
    Export:
        gguf_audio: whether llama.cpp / Ollama run the family's audio (its GGUF export keeps the audio
            projector, `pipeline.export.gguf`); False: a GGUF of it is text only.
        gguf_vocab_files: files of the base's repository that llama.cpp's converter reads for the vocabulary and
            `save_pretrained` does not write again (Gemma 3n: `tokenizer.model`, read by the converter's
            SentencePiece path); the GGUF export copies them from the base into the merged folder.
        gguf_placeholder_tensors(config) -> {name: shape}: tensors llama.cpp's loader requires that the saved
            model lacks and that llama.cpp never reads (Gemma 3n's KV-shared layers' k/v projections); the GGUF
            export adds them as zeros. None: none.
        gguf_misfit(config) -> why llama.cpp cannot load a GGUF of a model of that config, or None (Gemma 3n:
            llama.cpp fixes E2B's per-layer width and KV-sharing start); None: every config loads.
    Chat template:
        system_turn: whether the template has a system turn of its own (Gemma 4); False: it folds the system
            prompt into the first user turn (Gemma 3n), as the GGUF export's Ollama template must too.
    Around a clip:
        clip_marker_tokens: tokens `audio_span` adds around the audio positions (markers, blank lines).
    Thinking:
        thought_channel: the control tokens that open and close a thought channel (Gemma 4's `<|channel>`,
            `<channel|>`), never part of an answer (`pipeline.model.tokens.answer_text`); () when none.
    Support:
        estimate_only: hub ids of `models` that are priced but not a supported training target (never
            trained or measured here); `plan` marks their rows "estimate only".
    """

    name: str
    label: str
    model_types: tuple[str, ...]
    models: tuple[str, ...]
    shipped_configs: dict[str, str]
    licence_url: str
    tiny_dir_name: str
    max_audio_s: float
    audio_tokens: Callable[[float], int]
    turn_start: str
    turn_end: str
    model_turn_header: str
    quantization_skip_modules: tuple[str, ...]
    int8_extra_skip_modules: tuple[str, ...]
    audio_tower_module: str
    language_lora_regex: str
    audio_lora_regex: str
    per_layer_embedding_module: str
    vision_module: str
    inner: Callable[[Any], Any]
    audio_blocks: Callable[[Any], list]
    part_of: Callable[[str], str]
    shape: Callable[[dict], Any]
    part_params: Callable[[Any], dict]
    make_tiny: Callable[..., Path]
    model_class: Callable[[], type]
    audio_span: Callable[[Any, float], str]
    gguf_audio: bool
    clip_marker_tokens: int = 2
    gguf_vocab_files: tuple[str, ...] = ()
    system_turn: bool = True
    gguf_placeholder_tensors: Callable[[dict], dict] | None = None
    gguf_misfit: Callable[[dict], str | None] | None = None
    thought_channel: tuple[str, ...] = ()
    estimate_only: tuple[str, ...] = ()

    @property
    def default_model(self) -> str:
        """The hub id the family offers first."""
        return self.models[0]

    def clip_tokens(self, seconds: float) -> int:
        """Tokens one clip of `seconds` takes in a row: its audio positions (`audio_tokens`) plus the
        markers around them (`clip_marker_tokens`)."""
        return self.audio_tokens(seconds) + self.clip_marker_tokens

    def clip_tokens_text(self) -> str:
        """What one clip costs in tokens, as every screen says it: "~192" for a family whose clips cost
        the same whatever their length (Gemma 3n: 188 + 4), else the cost per second of audio and the
        cap ("~25 per second of audio, at most 752" for Gemma 4). Computed from `clip_tokens` only."""
        shortest, longest = self.clip_tokens(1.0), self.clip_tokens(self.max_audio_s)
        if shortest == longest:
            return f"~{longest}"
        per_second = round((self.clip_tokens(10.0) - self.clip_tokens(0.0)) / 10)
        return f"~{per_second} per second of audio, at most {longest}"
