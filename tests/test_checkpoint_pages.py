"""`pipeline.model.checkpoint_pages`: the pages of a memory-mapped `.safetensors` file are handed back
after loading, and what is read again afterwards is unchanged (MADV_PAGEOUT never discards data)."""

from __future__ import annotations

import mmap
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

from pipeline.model.checkpoint_pages import release_checkpoint_pages


def test_a_mapped_checkpoints_pages_are_handed_back_and_read_again_unchanged(tmp_path):
    path = tmp_path / "model.safetensors"
    weights = {"w": np.arange(1 << 20, dtype=np.float32)}  # 4 MiB
    save_file(weights, str(path))
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        before = bytes(mapped[:])  # every page read: resident, as after loading
        advised = release_checkpoint_pages()
        if sys.platform.startswith("linux"):
            assert advised == 0 or advised >= len(before), advised  # 0 only where the kernel refuses the advice
        else:
            assert advised == 0
        assert bytes(mapped[:]) == before
    np.testing.assert_array_equal(load_file(str(path))["w"], weights["w"])
