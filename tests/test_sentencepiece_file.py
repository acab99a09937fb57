"""The stand-in's `tokenizer.model` (pipeline/model/sentencepiece_file.py): the same vocabulary as its
`tokenizer.json`, so llama.cpp (which reads the SentencePiece file for Gemma 3n) tokenizes as transformers does."""

from __future__ import annotations

import pytest


def test_the_gemma3n_stand_in_ships_a_sentencepiece_model_that_tokenizes_as_its_tokenizer(tiny_model_dir):
    import sentencepiece
    from transformers import AutoTokenizer

    from pipeline.model.tiny_model import _corpus

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = sentencepiece.SentencePieceProcessor(model_file=str(tiny_model_dir / "tokenizer.model"))
    assert model.vocab_size() == len(tokenizer)
    texts = _corpus() + ["Scores (0-10): accuracy 7\nWords to practise: BEAR 4/10", "  two  spaces", "naïve café 日本"]
    differ = [t for t in texts if model.encode(t) != tokenizer(t, add_special_tokens=False)["input_ids"]]
    assert not differ, differ[:3]
    for token in ("<bos>", "<end_of_turn>", "<audio_soft_token>"):
        assert model.is_control(tokenizer.convert_tokens_to_ids(token)), token
    assert model.is_unknown(tokenizer.convert_tokens_to_ids("<unk>"))
    assert model.is_byte(tokenizer.convert_tokens_to_ids("<0x41>"))


def test_a_tokenizer_without_byte_pieces_is_refused_by_name():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from pipeline.model.sentencepiece_file import sentencepiece_model_bytes

    bare = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")))
    with pytest.raises(ValueError, match="<0x00>"):
        sentencepiece_model_bytes(bare)


def test_the_llama_cpp_shaped_stand_in_has_the_shapes_llama_cpp_fixes():
    from pipeline.model.tiny_gemma3n import (LLAMA_CPP_KV_FROM_START, LLAMA_CPP_PER_LAYER_INPUT,
                                             LLAMA_CPP_SPARSE_LAYERS, llama_cpp_text_shapes)

    shapes = llama_cpp_text_shapes()
    layers = shapes["num_hidden_layers"]
    assert layers - shapes["num_kv_shared_layers"] == LLAMA_CPP_KV_FROM_START == 20
    assert shapes["hidden_size_per_layer_input"] == LLAMA_CPP_PER_LAYER_INPUT == 256
    assert [s > 0 for s in shapes["activation_sparsity_pattern"]] == [i < LLAMA_CPP_SPARSE_LAYERS for i in range(layers)]
    # the KV-shared layers reuse layers 18 (sliding) and 19 (full), as llama.cpp's `n_layer_kv_from_start - 2 / - 1`
    assert shapes["layer_types"][18:20] == ["sliding_attention", "full_attention"]


def test_the_gguf_export_finds_tokenizer_model_in_the_base_and_names_it_when_missing(tmp_path):
    from pipeline.errors import ExportError
    from pipeline.export.gguf import vocab_files
    from pipeline.model.catalog import FAMILIES

    base = tmp_path / "base"
    base.mkdir()
    gemma3n, gemma4 = FAMILIES["gemma3n"], FAMILIES["gemma4"]
    with pytest.raises(ExportError, match="tokenizer.model.*get-model"):
        vocab_files(str(base), gemma3n)
    (base / "tokenizer.model").write_bytes(b"spm")
    assert vocab_files(str(base), gemma3n) == {"tokenizer.model": base / "tokenizer.model"}
    assert vocab_files(str(base), gemma4) == {}  # Gemma 4's converter reads tokenizer.json
    old_stand_in = tmp_path / "old-tiny"
    old_stand_in.mkdir()
    (old_stand_in / "tiny_model.json").write_text('{"tiny_random_model": true}')
    with pytest.raises(ExportError, match="Make the stand-in again"):
        vocab_files(str(old_stand_in), gemma3n)
