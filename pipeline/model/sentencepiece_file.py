"""A SentencePiece model file (`tokenizer.model`) for a stand-in's `GemmaTokenizer`: the same pieces, ids and
token types, in the file that Gemma 3n's own repository ships beside `tokenizer.json`.

Why: llama.cpp's converter reads Gemma 3n's vocabulary from `tokenizer.model` (`conversion/gemma.py`,
`Gemma3Model.set_vocab` -> `_set_vocab_sentencepiece`); without it, it falls back to a BPE path that knows a
tokenizer only by the hash of its pre-tokenizer and refuses the stand-in's. With this file the stand-in takes
the real model's path through the converter, and llama.cpp tokenizes with its SentencePiece (SPM)
tokenizer, as it does the real Gemma 3n.

How a BPE vocabulary becomes a SentencePiece BPE model (`sentencepiece_model.proto`, `ModelProto`): the
SentencePiece BPE encoder merges, at each step, the adjacent pair whose concatenation is the piece of
highest score (sentencepiece `bpe_model.cc`; llama.cpp `llm_tokenizer_spm`). The stand-in's trainer
(`pipeline.model.tiny_model.train_bpe_vocab`, HF `tokenizers` BpeTrainer) gives each learned piece the next
id in the order of its merges, so the score `-id` makes the earlier merge win, as the BPE merge ranks do.
Types: `<unk>` UNKNOWN, `<0xHH>` BYTE, the tokenizer's special tokens CONTROL, the rest NORMAL; the normalizer
is the identity with no dummy prefix (Gemma 3's `tokenizer.model`: spaces become "▁", nothing else changes).

Needs the `sentencepiece` package (pinned in requirements.txt: llama.cpp's converter imports it for Gemma 3n).
"""

from __future__ import annotations

import re
from pathlib import Path

SENTENCEPIECE_FILE = "tokenizer.model"
"""The file name llama.cpp's converter (and transformers' slow Gemma tokenizer) reads a SentencePiece model from."""

_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")


def sentencepiece_model_bytes(tokenizer) -> bytes:
    """The serialized `ModelProto` of `tokenizer` (a `GemmaTokenizer` with byte fallback and "▁" for spaces):
    one piece per id `0..len(tokenizer)-1`, in id order.

    Raises:
        ValueError: the ids are not contiguous from 0 (a hole would shift every later piece), or the
            tokenizer has no `<unk>` or not all 256 byte pieces (SentencePiece's byte fallback needs them).
        ModuleNotFoundError: `sentencepiece` is not installed (`pip install -r requirements.txt`).
    """
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    if any(p is None for p in pieces) or len(set(pieces)) != len(pieces):
        raise ValueError(f"the tokenizer's {len(tokenizer)} ids are not one piece each from 0; a SentencePiece "
                         "model lists its pieces by id with no holes.")
    if "<unk>" not in pieces or sum(bool(_BYTE_PIECE.fullmatch(p)) for p in pieces) != 256:
        raise ValueError("a SentencePiece model with byte fallback needs `<unk>` and the 256 pieces <0x00>..<0xFF>; "
                         "this tokenizer lacks some.")
    special = set(tokenizer.all_special_tokens) | {str(t) for t in tokenizer.added_tokens_decoder.values() if t.special}
    Piece = model_pb2.ModelProto.SentencePiece
    model = model_pb2.ModelProto()
    for index, text in enumerate(pieces):
        if text == "<unk>":
            kind = Piece.UNKNOWN
        elif _BYTE_PIECE.fullmatch(text):
            kind = Piece.BYTE
        elif text in special:
            kind = Piece.CONTROL
        else:
            kind = Piece.NORMAL
        model.pieces.add(piece=text, score=0.0 if kind != Piece.NORMAL else -float(index), type=kind)
    ids = tokenizer.convert_tokens_to_ids
    spec = model.trainer_spec
    spec.model_type = model_pb2.TrainerSpec.BPE
    spec.vocab_size = len(pieces)
    spec.byte_fallback = True
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = ids("<unk>"), ids("<bos>"), ids("<eos>"), ids("<pad>")
    spec.unk_piece, spec.bos_piece, spec.eos_piece, spec.pad_piece = "<unk>", "<bos>", "<eos>", "<pad>"
    normalizer = model.normalizer_spec
    normalizer.name = "identity"
    normalizer.add_dummy_prefix = False
    normalizer.remove_extra_whitespaces = False
    normalizer.escape_whitespaces = True
    return model.SerializeToString()


def write_sentencepiece_model(tokenizer, folder: str | Path) -> Path:
    """Write `tokenizer`'s SentencePiece model (`sentencepiece_model_bytes`) as `folder/tokenizer.model` and
    return its path. Raises what `sentencepiece_model_bytes` raises, and OSError when the folder is not writable."""
    from pipeline.fileio import atomic_write_bytes

    path = Path(folder) / SENTENCEPIECE_FILE
    atomic_write_bytes(path, sentencepiece_model_bytes(tokenizer))
    return path
