"""One builder for the tiny, randomly initialised stand-ins of every model family, and their marker.

A family's stand-in is a `TinySpec` (its small config, its chat template, its tokens and processor:
`pipeline.model.tiny_gemma3n.TINY_GEMMA3N`, `pipeline.model.tiny_gemma4.TINY_GEMMA4`); `build_stand_in(out_dir,
spec)` writes it as a checkpoint loads: `config.json`, `model.safetensors`, `generation_config.json`,
`tokenizer.json` / `tokenizer_config.json` (+ `tokenizer.model` where the family's repository ships one),
`processor_config.json` (+ feature-extractor settings), `chat_template.jinja` and `tiny_model.json`. `AutoProcessor.from_pretrained(OUT_DIR)` and the family's
`...ForConditionalGeneration.from_pretrained(OUT_DIR)` load it with no network access, so every code path
(chat template, audio tokens, quantization, LoRA, training, generation) runs offline on a CPU in seconds.

What every stand-in shares:
- the architecture is the family's real `...ForConditionalGeneration`, only with a few layers and
  hidden sizes of 32-128 (the spec's config);
- the tokenizer is a real `GemmaTokenizer` (BPE with byte fallback, spaces as "▁", like Gemma's
  SentencePiece model) whose text vocabulary is trained here on a small English corpus built in code
  (`train_bpe_vocab`); any text tokenizes (unknown characters fall back to UTF-8 bytes);
- the feature extractor is the family's real one with its defaults, so a clip takes as many audio
  tokens as on the real model.

The weights are random: outputs are meaningless text. `tiny_model.json` (`{"tiny_random_model": true,
...}`) marks the folder so the app and `infer` can say so (`is_tiny_random_model(path)`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pipeline.fileio import staged_folder
from pipeline.model.sentencepiece_file import write_sentencepiece_model

MARKER_FILE = "tiny_model.json"
"""File in the model folder that marks it as the random stand-in (read by `is_tiny_random_model`)."""
STAND_IN_MAKER = "`python -m pipeline make-tiny-model`"
"""What makes the stand-in, in the command line's words: `stand_in_note`'s default. The app words it as its
button (`ui.wording.app_wording` turns the command into **Create offline tiny test model**)."""


def stand_in_note(what: str = "its answers are", made_by: str = STAND_IN_MAKER) -> str:
    """The honesty note for answers from the random stand-in: "The model is the tiny random stand-in made by
    `made_by`: `what` meaningless." `what`: the subject and its verb ("this text is"); `made_by`: what made
    the stand-in in the reader's words (the command by default, which the app's wording renames)."""
    return f"The model is the tiny random stand-in made by {made_by}: {what} meaningless."

# Gemma 3n's fixed special tokens, in the order of their ids in the real tokenizer's first rows

_CORPUS_WORDS = """
the a an and or but of to in on at for with from by as is are was were be been being it this that
these those he she they we you i me him her them us my your his its our their what which who whom
when where why how all any both each few more most other some such no nor not only own same so than
too very can will just should now one two three four five six seven eight nine ten zero hundred
please read sentence say said word words sound sounds phone phones vowel vowels consonant stress
syllable syllables pronunciation pronounce pronounced mispronounced accuracy fluency prosody prosodic
completeness total score scores scored overall good great well clear clearly nice excellent
practice practise try again slowly carefully listen repeat heard instead expected learner tutor
teacher student speaker speech audio clip recording voice mouth tongue lips teeth open close
round short long stressed unstressed rhythm intonation pause pauses smooth natural fast slow
low high mostly almost correct incorrect wrong right missing extra deleted inserted replaced
advice tip focus work on next time keep going improve better best out of marked like
you are a helpful pronunciation tutor give feedback on how the learner read target text
english language learn learning native accent clarity
we call it bear mark is going to see him there is a dog the cat sat on the mat
it was the best of times it was the worst of times
i have a dream that one day this nation will rise up
she sells sea shells by the sea shore
the quick brown fox jumps over the lazy dog
grey gray red blue green yellow white black brown orange purple pink
today tomorrow yesterday morning evening night week month year
house home school work city country street road car bus train plane
water food bread milk coffee tea apple orange banana rice meat fish
think thought through though tough thumb three throw this that then there
ship sheep chip cheap live leave full fool pull pool bat bet bit but boot
very vest west wine vine light right lead read rice lice play pray
aa ae ah ao aw ay b ch d dh eh er ey f g hh ih iy jh k l m n ng ow oy p r s sh t th uh uw v w y z zh
""".split()


def _corpus() -> list[str]:
    """A small English corpus built in code: words, sentences and the feedback vocabulary.

    Covers the letters, digits and punctuation of English text and of the generated tutor feedback
    (e.g. "Accuracy 7/10", `/AH/`) so common text tokenizes into a few tokens per word.
    """
    lines = [" ".join(_CORPUS_WORDS[i : i + 12]) for i in range(0, len(_CORPUS_WORDS), 12)]
    lines += [w.capitalize() + "." for w in _CORPUS_WORDS] + [w.upper() for w in _CORPUS_WORDS]
    lines += [f"{label} {n}/10." for label in ("Accuracy", "Fluency", "Prosody", "Total") for n in range(11)]
    lines += [
        "Read this sentence aloud: \"We call it bear.\"",
        "Overall: accuracy 8/10, fluency 9/10, prosody 7/10, total 8/10.",
        "Words to work on: \"GREY\" (accuracy 3/10): /EY/ was heard as /AH/.",
        "Advice: open your mouth wider on the vowel and keep it long.",
        "0123456789 .,;:!?'\"()[]{}-_/\\+*=%&#@$<>|~^` \n\t",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz",
    ]
    try:  # the product's own instruction, so prompts take about as many tokens as with Gemma's 262k vocabulary
        from pipeline.conversation.messages import SYSTEM_PROMPT, user_prompt

        lines += [SYSTEM_PROMPT] * 4 + [user_prompt("We call it bear.")] * 4
    except ImportError:  # pragma: no cover - dataset.py is part of the package
        pass
    return lines


def train_bpe_vocab(specials: list[str], text_vocab: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-fallback BPE vocabulary of exactly `text_vocab` ids on `_corpus()`, SentencePiece
    style (spaces as "▁", merges within "▁word" pieces, never across a newline).

    Ids: `specials` first (in order), 256 byte-fallback tokens `<0x00>`..`<0xFF>`, the learned tokens,
    then `<unusedN>` fillers up to `text_vocab`. Returns `(vocab, merges)` for `GemmaTokenizer`.
    Shared by the tiny stand-ins of every family (`build_stand_in`).

    Raises:
        RuntimeError: the trainer learned more tokens than `text_vocab` holds.
    """
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer_model = Tokenizer(BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    trainer_model.normalizer = normalizers.Replace(" ", "▁")
    # Learn merges within "▁word" pieces only (like SentencePiece); GemmaTokenizer applies them as is.
    # and never across a newline, so `model\n` + answer keeps its token boundary as in Gemma's vocabulary.
    trainer_model.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(pattern="▁", behavior="merged_with_next"),
            pre_tokenizers.Split(pattern="\n", behavior="isolated"),
        ]
    )
    trainer = BpeTrainer(
        vocab_size=text_vocab,
        special_tokens=specials + byte_tokens,
        show_progress=False,
        min_frequency=1,
    )
    trainer_model.train_from_iterator(_corpus(), trainer=trainer)
    trained = json.loads(trainer_model.to_str())["model"]
    vocab: dict[str, int] = dict(trained["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    # Pad the text block to exactly T ids so the layout is fixed whatever the trainer learned.
    next_id = max(vocab.values()) + 1
    if next_id > text_vocab:
        raise RuntimeError(f"tiny tokenizer learned {next_id} tokens, more than the text block {text_vocab}")
    for i in range(next_id, text_vocab):
        vocab[f"<unused{i}>"] = i
    return vocab, merges




@dataclass(frozen=True)
class TinySpec:
    """What one family's stand-in is made of; `build_stand_in` does the rest the same for every family.

    Tokens (ids in this order: `specials`, 256 byte-fallback tokens, the learned tokens and fillers up to
    `text_vocab`, then each of `multimodal_blocks` with `multimodal_vocab` ids):
        specials: the special tokens with the first ids (pad 0, eos 1, bos 2, unk 3, mask 4, ...).
        text_vocab: the text block's size T.
        named_tokens: the processor's named tokens (`image_token`, `boa_token`, ...) -> token.
        control_tokens: the other control tokens (turns, ...), all special: never split, skipped by
            `decode(skip_special_tokens=True)`.
        multimodal_blocks: `(block, first tokens)` per block after the text ids (Gemma 3n's image and
            audio embedder rows; the rest of a block is `<BLOCK_reservedK>`); () for none.
        multimodal_vocab: ids per multimodal block.
        controls_listed: also list the control tokens among the tokenizer's extra special tokens, before
            and after the processor is made (Gemma 4: llama.cpp's converter types tokens CONTROL by
            `all_special_ids`, and `Gemma4Processor`'s constructor replaces the list); False: only added
            as special tokens (Gemma 3n).
    Model and processor:
        model_class: the transformers class name (`Gemma3nForConditionalGeneration`).
        config: `config(ids, spec) -> ...Config`, `ids` the tokenizer's `convert_tokens_to_ids`.
        processor: `processor(tokenizer, spec) -> ...Processor` with `spec.chat_template`.
        chat_template: the family's chat template (jinja).
        prepare: `prepare(model)`, run under `torch.no_grad()` on the freshly drawn weights (None: none).
        sentencepiece_model: also write `tokenizer.model`, the same vocabulary as a SentencePiece model
            (`pipeline.model.sentencepiece_file`), as the family's repository ships it (Gemma 3n: llama.cpp's
            converter reads its vocabulary from that file).
    Marker:
        family: the `ModelFamily.name`; stands_in_for: the hub id it stands in for.
    """

    family: str
    stands_in_for: str
    specials: tuple[str, ...]
    text_vocab: int
    named_tokens: dict[str, str]
    control_tokens: tuple[str, ...]
    model_class: str
    config: Callable[[Callable[[str], int], "TinySpec"], Any]
    processor: Callable[[Any, "TinySpec"], Any]
    chat_template: str
    multimodal_blocks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    multimodal_vocab: int = 0
    controls_listed: bool = False
    prepare: Callable[[Any], None] | None = field(default=None)
    sentencepiece_model: bool = False


FINAL_NORM_SCALE = 8.0
"""Weight of a stand-in's final norm (`model.language_model.norm`, ones by default) where its answers are compared
with llama.cpp's (the Gemma 4 stand-in; Gemma 3n's with llama.cpp's shapes): it scales the logits. With ones, a
random 128-wide model's top logits lie within hundredths of each other, so greedy decoding turns on differences
of a few 1e-3 between implementations (llama.cpp's fp16 GELU table, its own log-mel features) and the GGUF
proofs (`tests/gguf_proof.py`) could not compare llama.cpp's tokens with transformers'. 8x keeps the logits well
under the 30 softcap and the top-2 margins around tenths."""


def tiny_decoder(ids: Callable[[str], int], turn_end: str) -> dict:
    """The text decoder every stand-in shares, as `...TextConfig` keywords (the family adds its own):
    hidden 128, MLP 256, 4 layers of 2 query heads and 1 KV head of size 64, per-layer inputs of 64,
    sliding / full / sliding / full attention with the last two reusing the first two's KV (as E2B's
    last layers do), and the token ids (`token_ids`).

    Widths are multiples of 64 like the real sizes (256, 64): bitsandbytes' CPU 4-bit kernel packs blocks
    of 32 output rows x 64 inputs."""
    return dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        hidden_size_per_layer_input=64,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        num_kv_shared_layers=2,
        sliding_window=128,
        max_position_embeddings=4096,
        **token_ids(ids, turn_end),
    )


def token_ids(ids: Callable[[str], int], turn_end: str) -> dict:
    """`pad_token_id`, `bos_token_id` and `eos_token_id` (`<eos>` and the turn's end, `turn_end`) as
    config keywords, from the tokenizer's `convert_tokens_to_ids` (`ids`)."""
    return dict(pad_token_id=ids("<pad>"), bos_token_id=ids("<bos>"), eos_token_id=[ids("<eos>"), ids(turn_end)])


def media_token_ids(ids: Callable[[str], int], spec: TinySpec) -> dict:
    """The image and audio marker ids a multimodal config names, from the spec's `named_tokens`:
    `boi_token_id`, `eoi_token_id`, `image_token_id`, `boa_token_id`, `audio_token_id` (the audio end's
    keyword differs by family: the family adds it)."""
    named = spec.named_tokens
    return dict(boi_token_id=ids(named["boi_token"]), eoi_token_id=ids(named["eoi_token"]),
                image_token_id=ids(named["image_token"]), boa_token_id=ids(named["boa_token"]),
                audio_token_id=ids(named["audio_token"]))


def build_stand_in(out_dir: str | Path, spec: TinySpec, *, seed: int = 0) -> Path:
    """Write `spec`'s tiny random checkpoint + processor to `out_dir` and return its path.

    Args:
        out_dir: folder to write (created, or replaced whole; written beside it and swapped in once complete,
            `pipeline.fileio.staged_folder`, so a killed write never leaves a half-written model there).
        spec: the family's stand-in (`TinySpec`).
        seed: torch seed for the random weights (the same seed gives the same weights).

    Returns:
        `Path(out_dir)`, loadable offline with `AutoProcessor.from_pretrained` and the family's
        `...ForConditionalGeneration.from_pretrained`.

    Raises:
        ConfigError: `out_dir` is a file, or a folder holding other things than an earlier stand-in.
        ModelLoadError: a package the family's stand-in needs is missing (from `spec.config`).
        RuntimeError: the tokenizer learned more tokens than `spec.text_vocab` holds.
    """
    import torch
    import transformers

    out = Path(out_dir)
    _check_replaceable(out)
    tokenizer = _build_tokenizer(spec)
    config = spec.config(tokenizer.convert_tokens_to_ids, spec)
    torch.manual_seed(seed)
    model = getattr(transformers, spec.model_class)(config).eval()
    if spec.prepare is not None:
        with torch.no_grad():
            spec.prepare(model)
    processor = spec.processor(tokenizer, spec)
    if spec.controls_listed:  # the processor's constructor replaced the list: add the control tokens back
        processor.tokenizer.add_special_tokens({"extra_special_tokens": list(spec.control_tokens)},
                                               replace_extra_special_tokens=False)
    return _save(out, model, config.text_config, processor, spec, seed)


def _check_replaceable(out: Path) -> None:
    """Refuse to write a stand-in over anything but nothing, an empty folder or an earlier stand-in (its marker):
    the stand-in replaces its folder whole, and a teacher's folder given by mistake would be lost.

    Raises:
        ConfigError: `out` is a file, or a folder holding other things (named, with what to do)."""
    from pipeline.errors import ConfigError

    if out.is_file() or out.is_symlink() and not out.is_dir():
        raise ConfigError(f"`{out}` is a file: the tiny stand-in is a folder. Give a new folder's path.")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER_FILE).is_file():
        raise ConfigError(f"`{out}` already holds files and is not a tiny stand-in (no {MARKER_FILE}); writing the "
                          "stand-in there would replace them. Give a new or empty folder, or move them away first.")


def _build_tokenizer(spec: TinySpec):
    """Train the BPE vocabulary (`train_bpe_vocab`), append the multimodal blocks, and wrap it in a real
    `GemmaTokenizer` whose control tokens are special (see `TinySpec`)."""
    from transformers import GemmaTokenizer

    vocab, merges = train_bpe_vocab(list(spec.specials), spec.text_vocab)
    multimodal = []
    for block, first_tokens in spec.multimodal_blocks:
        multimodal += list(first_tokens) + [f"<{block}_reserved{k}>" for k in range(spec.multimodal_vocab - len(first_tokens))]
    for offset, token in enumerate(multimodal):
        vocab[token] = spec.text_vocab + offset
    tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, extra_special_tokens=dict(spec.named_tokens),
                               padding_side="left", add_bos_token=True, add_eos_token=False)
    control = [t for t in (*spec.control_tokens, *multimodal) if t not in spec.named_tokens.values()]
    if spec.controls_listed:
        tokenizer.add_special_tokens({"extra_special_tokens": control}, replace_extra_special_tokens=False)
    else:
        tokenizer.add_tokens(control, special_tokens=True)
    return tokenizer


def _save(out: Path, model, token_config, processor, spec: TinySpec, seed: int) -> Path:
    """Save a tiny random model as a checkpoint loads: greedy generation settings with the ids of
    `token_config` (bos/eos/pad), the weights, `processor`, and the marker (`MARKER_FILE`: random
    weights, its family, what it stands in for, its parameter count, text vocabulary and seed), all into a
    staging folder swapped in whole for `out` (`pipeline.fileio.staged_folder`). Returns `out`."""
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        bos_token_id=token_config.bos_token_id,
        eos_token_id=token_config.eos_token_id,
        pad_token_id=token_config.pad_token_id,
        do_sample=False,
    )
    marker = {
        "tiny_random_model": True,
        "family": spec.family,
        "note": f"Random weights: a structural stand-in for {spec.stands_in_for}; its text is meaningless.",
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "text_vocab_size": spec.text_vocab,
        "seed": seed,
    }
    with staged_folder(out) as staging:  # killed half-way, no half-written model is ever taken for one
        model.save_pretrained(staging)
        processor.save_pretrained(staging)
        if spec.sentencepiece_model:
            write_sentencepiece_model(processor.tokenizer, staging)
        (staging / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return Path(out)


def is_tiny_random_model(model: str | Path) -> bool:
    """True when `model` holds the marker `build_stand_in` writes (random weights): a local folder, or a hub id
    whose files in the Hugging Face cache include it (a stand-in served from a hub, as the download tests do)."""
    from pipeline.model.hub import model_file

    marker = model_file(model, MARKER_FILE)
    if marker is None:
        return False
    try:
        return bool(json.loads(marker.read_text(encoding="utf-8")).get("tiny_random_model"))
    except (OSError, ValueError):
        return False