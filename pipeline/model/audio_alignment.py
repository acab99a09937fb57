"""A padded batch's clips made exactly what each is alone: the one audio alignment for training
(`pipeline.training.collate.ChatCollator`) and for answers (`pipeline.tutor.infer`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

def align_audio_masks(batch: dict, clips: Sequence[np.ndarray], feature_extractor: Any) -> None:
    """Make each clip of a padded batch exactly what it is alone (in place): its frame mask, and zeros
    in the padding frames after it. The one alignment for training and for answers: the collator
    (`ChatCollator`) and inference (`pipeline.tutor.infer`, a dialogue's clips) both call it.

    Two things differ when clips are padded to the longest one in a batch, and both are undone here:
    - the mask: `Gemma3nAudioFeatureExtractor` marks mel frame i valid when its first sample is a
      real sample (`attention_mask[::hop_length]`), so a shorter clip's partial trailing frames,
      which reach into the padding and do not exist when the clip is processed alone, count as valid
      (transformers 5.24: 256 valid frames alone, 258 in a batch; 211 against 213 for a dialogue
      clip). Each row's mask is replaced by the extractor's own mask for the clip alone, and every
      later frame is marked padding;
    - the padding frames: they hold the log-mel of zero samples (the floor, about -11.5), but the
      audio encoder's first convolution looks ahead past a clip's last frame (reverse-causal
      padding), and alone it finds zeros there (the convolution's own padding). Those frames are set
      to zeros, so the last audio token equals the one alone (the difference was up to 0.53; with
      zeros it is float rounding, ~5e-7).
    The frames a clip has alone are bit-identical in the batch (same samples), so nothing else changes.

    Args:
        batch: processor output with `input_features` (C, F, 128) float and `input_features_mask`
            (C, F) bool; both modified in place.
        clips: the C clips in batch order (row by row, each row's clips in order), 16 kHz mono float32.
        feature_extractor: the processor's audio feature extractor.
    """
    mask = batch["input_features_mask"]
    features = batch.get("input_features")
    if len(clips) < 2:
        return
    for row, clip in enumerate(clips):
        alone = np.asarray(feature_extractor([clip], return_tensors="np")["input_features_mask"][0], dtype=bool)
        frames = min(alone.shape[0], mask.shape[1])
        mask[row, :frames] = torch.from_numpy(alone[:frames]).to(mask.dtype)
        mask[row, frames:] = False
        if features is not None:
            features[row, frames:] = 0
