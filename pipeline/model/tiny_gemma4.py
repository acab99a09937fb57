"""Gemma 4's tiny stand-in: its small config, chat template and tokens (`TINY_GEMMA4`), built by
`pipeline.model.tiny_model.build_stand_in`; it loads like `google/gemma-4-E2B-it`.

`python -m pipeline make-tiny-model --family gemma4 OUT_DIR` writes `config.json`, `model.safetensors`,
`generation_config.json`, `tokenizer.json` / `tokenizer_config.json`, `processor_config.json`,
`chat_template.jinja` and `tiny_model.json`; `AutoProcessor.from_pretrained(OUT_DIR)` and
`Gemma4ForConditionalGeneration.from_pretrained(OUT_DIR)` load it offline, so every code path (the
chat template, audio tokens by clip length, quantization, LoRA on the clippable audio linears,
training, generation, the GGUF export and llama.cpp) runs on a CPU in seconds.

What is real and what is small:
- The architecture is the real `Gemma4ForConditionalGeneration` (per-layer embeddings, KV sharing,
  sliding and full attention with their own head sizes, the double-wide MLP of the KV-sharing
  layers, the conformer audio encoder with `Gemma4ClippableLinear`s, a vision encoder), with 4 text
  layers of hidden 128 and a 2-block audio encoder of hidden 64.
- What llama.cpp hard-codes is kept as in the real model (its `tools/mtmd/models/gemma4a.cpp` graph
  and `mtmd-audio.cpp`): 128 mel bins, 16 kHz, the audio attention's chunk 12 / left context 13 /
  right 0, conv kernel 5, residual weight 0.5, and the first subsampling convolution's 128 channels
  (its frequency axis, 128 / 4, sets the input projection's width).
- The feature extractor is the real `Gemma4AudioFeatureExtractor` with its defaults, so a clip
  takes as many audio tokens as on the real model (`pipeline.model.gemma4.audio_tokens`).
- The tokenizer is a real `GemmaTokenizer` (BPE with byte fallback, spaces as "▁") with Gemma 4's
  control tokens (`<|turn>`, `<turn|>`, `<|audio>`, `<|audio|>`, `<audio|>`, ...) and a vocabulary of
  2,048 trained here on a small English corpus (`pipeline.model.tiny_model.train_bpe_vocab`); every
  id has a per-layer embedding (`vocab_size_per_layer_input` = `vocab_size`, as on the real model).
- The chat template is Gemma 4's (`GEMMA4_CHAT_TEMPLATE`), reduced to what the tutor sends.
- Weights are random but scaled so that the answer depends on the clip: the audio embedder's
  projection is drawn with a larger spread (`AUDIO_PROJECTION_STD`), otherwise random audio
  embeddings vanish next to the text and every clip would get the same answer.

The text is meaningless; `tiny_model.json` marks the folder (`pipeline.model.tiny_model.is_tiny_random_model`).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.model.tiny_model import FINAL_NORM_SCALE, TinySpec, build_stand_in, media_token_ids, tiny_decoder, token_ids

TEXT_VOCAB = 2048
"""Vocabulary size of the tiny tokenizer (every id has a per-layer embedding)."""

CONTROL_TOKENS = [
    "<|turn>", "<turn|>",
    "<|audio>", "<audio|>", "<|audio|>",
    "<|image>", "<image|>", "<|image|>", "<|video|>",
    "<|channel>", "<channel|>", "<|think|>",
    "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>',
]
"""Gemma 4's control tokens (the chat template's and the processor's; transformers 5.24
`models/gemma4/processing_gemma4.py`, llama.cpp `models/templates/google-gemma-4-31B-it.jinja`)."""

_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", *CONTROL_TOKENS)

AUDIO_PROJECTION_STD = 1.0
"""Spread of the tiny model's audio embedder projection (`embed_audio.embedding_projection`): its
input is RMS-normalised, so with std 1 each audio position's embedding is about as large as a
scaled text embedding (sqrt(hidden) x 0.02 x sqrt(hidden) ~ 2.6 at hidden 128) and the answer depends
on the clip; with the default 0.02 it would not."""

# Gemma 4's chat template (google/gemma-4-*-it `chat_template.jinja`; the copy in llama.cpp's
# `models/templates/google-gemma-4-31B-it.jinja`), reduced to what the tutor renders: `<bos>`, a
# system turn of its own, `<|turn>ROLE\n` ... `<turn|>\n` with assistant rendered as `model`, audio
# and image items as their placeholders, text items trimmed, and the generation prompt with the
# empty thought channel the real template writes when thinking is off. Tools and thinking are left out.
GEMMA4_CHAT_TEMPLATE = """{{- bos_token -}}
{%- set loop_messages = messages -%}
{%- if messages[0]['role'] in ['system', 'developer'] -%}
    {{- '<|turn>system\n' -}}
    {%- if messages[0]['content'] is string -%}
        {{- messages[0]['content'] | trim -}}
    {%- else -%}
        {%- for item in messages[0]['content'] -%}
            {%- if item['type'] == 'text' -%}{{- item['text'] | trim -}}{%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{- '<turn|>\n' -}}
    {%- set loop_messages = messages[1:] -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{- '<|turn>' + role + '\n' -}}
    {%- if message['content'] is string -%}
        {{- message['content'] | trim -}}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{- item['text'] | trim -}}
            {%- elif item['type'] == 'audio' -%}
                {{- '<|audio|>' -}}
            {%- elif item['type'] == 'image' -%}
                {{- '<|image|>' -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{- '<turn|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|turn>model\n' -}}
    {%- if not enable_thinking | default(false) -%}
        {{- '<|channel>thought\n<channel|>' -}}
    {%- endif -%}
{%- endif -%}
"""

def _config(ids, spec: TinySpec):
    """Tiny `Gemma4Config` whose token ids are the tokenizer's (`ids`; see the module docstring)."""
    from transformers import (
        Gemma4AudioConfig,
        Gemma4Config,
        Gemma4TextConfig,
        Gemma4VisionConfig,
    )

    text_config = Gemma4TextConfig(
        vocab_size=spec.text_vocab,
        vocab_size_per_layer_input=spec.text_vocab,
        use_double_wide_mlp=True,  # as E2B: the KV-sharing layers' MLPs are twice as wide
        global_head_dim=128,  # full-attention layers have their own head size, as E2B's 512 vs 256
        final_logit_softcapping=30.0,
        **tiny_decoder(ids, "<turn|>"),
    )
    audio_config = Gemma4AudioConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        subsampling_conv_channels=[128, 8],
        output_proj_dims=128,
    )
    vision_config = Gemma4VisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        position_embedding_size=64,
    )
    return Gemma4Config(
        text_config=text_config,
        audio_config=audio_config,
        vision_config=vision_config,
        video_token_id=ids("<|video|>"),
        eoa_token_index=ids(spec.named_tokens["eoa_token"]),
        **media_token_ids(ids, spec),
        **token_ids(ids, "<turn|>"),
    )


def _prepare(model) -> None:
    """Scale the drawn weights so the answer depends on the clip and greedy decoding has margins:
    the audio embedder's projection (`AUDIO_PROJECTION_STD`) and the final norm (`FINAL_NORM_SCALE`)."""
    model.model.embed_audio.embedding_projection.weight.normal_(0.0, AUDIO_PROJECTION_STD)
    model.model.language_model.norm.weight.fill_(FINAL_NORM_SCALE)


def _processor(tokenizer, spec: TinySpec):
    """The real `Gemma4Processor` around `tokenizer`, with its audio feature extractor, image and video
    processors at their defaults."""
    from transformers import (
        Gemma4AudioFeatureExtractor,
        Gemma4ImageProcessor,
        Gemma4Processor,
        Gemma4VideoProcessor,
    )

    return Gemma4Processor(
        feature_extractor=Gemma4AudioFeatureExtractor(),
        image_processor=Gemma4ImageProcessor(),
        tokenizer=tokenizer,
        video_processor=Gemma4VideoProcessor(),
        chat_template=spec.chat_template,
    )


TINY_GEMMA4 = TinySpec(
    family="gemma4",
    stands_in_for="google/gemma-4-E2B-it",
    specials=_SPECIALS,
    text_vocab=TEXT_VOCAB,
    named_tokens={
        "image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
        "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>",
    },
    control_tokens=tuple(CONTROL_TOKENS),
    controls_listed=True,  # a GGUF marks them CONTROL (llama.cpp's converter types by `all_special_ids`)
    model_class="Gemma4ForConditionalGeneration",
    config=_config,
    processor=_processor,
    chat_template=GEMMA4_CHAT_TEMPLATE,
    prepare=_prepare,
)
"""The tiny random Gemma 4: about 2 M parameters (8 MB in fp32)."""


def make_tiny_gemma4(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write the tiny random Gemma 4 checkpoint + processor to `out_dir` and return its path
    (`build_stand_in(out_dir, TINY_GEMMA4, seed=seed)`; raises what it raises)."""
    return build_stand_in(out_dir, TINY_GEMMA4, seed=seed)
