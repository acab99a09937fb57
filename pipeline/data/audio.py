"""Audio ingest: every path (import, microphone, try-out) turns its input into 16 kHz mono float32 here.

`load_audio(source)` accepts a file path (wav, flac, ogg, mp3, m4a/aac, webm/opus), raw file bytes,
or a Gradio microphone value `(sample_rate_hz, ndarray)`, decodes it (`pipeline.data.audio_decode`:
libsndfile, or FFmpeg through PyAV for containers libsndfile cannot read: m4a/aac/webm, some mp3);
downmixes to mono by averaging channels, resamples with soxr (high quality), and runs the checks
below. Each failing check raises `AudioError` with the measured value and a fix.

Checks (constants below; levels are dBFS, 0 dBFS = full scale):
- unreadable/corrupt input, or no samples at all;
- NaN / infinite samples;
- too short: under `MIN_DURATION_S` (0.3 s);
- too long: over `MAX_DURATION_S` (30 s, the longest clip Gemma 3n's feature extractor hears: it
  silently truncates at 480,000 samples); refused unless `trim=True`, which keeps the first 30 s;
- clipped: more than `CLIPPED_FRACTION_MAX` (0.5 %) of the source samples at full scale
  (|x| >= `CLIP_LEVEL`); between `CLIPPED_FRACTION_WARN` (0.05 %) and that, a warning;
- over full scale: float input with samples beyond [-1, 1] (e.g. 1.5 or -2.0 in a float WAV) is
  clipped to [-1, 1] with a "too loud" warning naming how many samples and the peak; samples that
  only resampling pushed past full scale are clipped, with a warning when there are as many as make a
  source "slightly clipped" (a few, from a loud microphone clip, are inaudible: no warning);
- levels are measured without DC (mean removed, high-pass at 40 Hz): a constant offset is no sound.
  The mix is compared with each channel: when it measures more than `PHASE_CANCEL_DB` below its
  loudest channel, the channels cancel (out of phase) and that channel is kept alone, with a warning;
- silent: the loudest 0.25 s of the clip has an RMS level below `SILENCE_DBFS` (-50 dBFS).
  Reasoning for -50: speech recorded at a usable distance measures about -35 to -15 dBFS RMS
  over its loud parts, while a quiet room's noise floor through a laptop or phone microphone is
  about -70 to -55 dBFS, and digital silence is -inf. Using the loudest window (not the whole-clip
  RMS) keeps a short word inside a long, mostly quiet clip from being called silent. Between
  -50 and `QUIET_DBFS` (-35 dBFS) the clip passes with a "quiet" warning.

It deliberately does not do voice-activity detection, denoising or loudness normalization: the
model should hear what the learner recorded.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.data.audio_decode import (
    AUDIO_SUFFIXES,
    MAX_DURATION_S,
    TARGET_SAMPLE_RATE_HZ,
    source_frames,
)
from pipeline.errors import AudioError, ClipTooLongError
from pipeline.units import plural

__all__ = ["AUDIO_SUFFIXES", "MAX_DURATION_S", "TARGET_SAMPLE_RATE_HZ", "Audio", "AudioReport", "load_audio",
           "pcm16", "wav_bytes", "decode_wav"]

MIN_DURATION_S = 0.3
"""Shorter clips are refused (seconds)."""

SILENCE_DBFS = -50.0
"""Loudest-0.25 s RMS below this is "silent" (no speech energy); see the module docstring."""
QUIET_DBFS = -35.0
"""Loudest-0.25 s RMS below this (but above `SILENCE_DBFS`) passes with a warning."""
LOUDEST_WINDOW_S = 0.25
"""Length of the window whose RMS decides silence (about one stressed syllable)."""
CLIP_LEVEL = 0.999
"""|sample| at or above this fraction of full scale counts as clipped (int16: >= 32735)."""
CLIPPED_FRACTION_MAX = 0.005
"""More than this fraction of clipped source samples is refused as too loud."""
CLIPPED_FRACTION_WARN = 0.0005
"""More than this fraction of clipped source samples passes with a warning."""
FLOAT_SCALE_MAX = 2.0
"""Float input peaking above this is not [-1, 1] audio (probably unscaled integers): refused."""
LEVEL_HIGHPASS_HZ = 40.0
"""Levels are measured above this frequency, Hz (DC and drift removed; see `_without_dc`)."""
PHASE_CANCEL_DB = 10.0
"""A mix this many dB below its loudest channel means the channels cancel (out of phase): averaging
two equal channels never loses level, and a silent second channel loses 6 dB (half the amplitude)."""
DC_OFFSET_WARN = 0.01
"""A mean sample value beyond this (-40 dBFS) passes with a "DC offset" warning."""


@dataclass
class AudioReport:
    """What `load_audio` measured.

    Attributes:
        source_rate_hz: sample rate of the input, Hz.
        channels: channel count of the input.
        duration_s: duration of the returned 16 kHz audio, seconds (after any trim).
        source_duration_s: duration of the input, seconds.
        peak: max |sample| of the returned audio, fraction of full scale (0-1).
        rms: RMS of the returned audio, fraction of full scale.
        level_dbfs: RMS of the loudest `LOUDEST_WINDOW_S` window, dBFS (-inf for digital silence;
            stored as -120.0 so it stays JSON-safe).
        clipped_fraction: fraction of input samples (all channels) with |x| >= `CLIP_LEVEL`.
        trimmed: True when the input was longer than 30 s and cut because `trim=True`.
        warnings: human-readable notes on checks that passed with a caveat.
    """

    source_rate_hz: int
    channels: int
    duration_s: float
    source_duration_s: float
    peak: float
    rms: float
    level_dbfs: float
    clipped_fraction: float
    trimmed: bool = False
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict (rounded floats)."""
        out = asdict(self)
        for key in ("duration_s", "source_duration_s"):
            out[key] = round(float(out[key]), 3)
        for key in ("peak", "rms"):
            out[key] = round(float(out[key]), 5)
        out["level_dbfs"] = round(float(out["level_dbfs"]), 1)
        out["clipped_fraction"] = round(float(out["clipped_fraction"]), 6)
        out["warnings"] = list(out["warnings"])
        return out


@dataclass
class Audio:
    """Decoded, checked audio: `samples` float32 of shape (n,), values in [-1, 1], at 16 kHz."""

    samples: np.ndarray
    report: AudioReport
    sample_rate_hz: int = TARGET_SAMPLE_RATE_HZ

    @property
    def duration_s(self) -> float:
        """Length in seconds (`len(samples) / 16000`)."""
        return len(self.samples) / self.sample_rate_hz


def _describe(source: Any, name: str | None) -> str:
    if name:
        return str(name)
    if isinstance(source, (str, os.PathLike)):
        return Path(source).name
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"uploaded audio ({len(source)} bytes)"
    return "recording"


def _without_dc(signal: np.ndarray, rate: int) -> np.ndarray:
    """`signal` float (n,) without its DC offset and sub-audio drift, float64 (n,): the mean removed,
    then a 2nd-order Butterworth high-pass at `LEVEL_HIGHPASS_HZ` (started in its steady state, so
    the first samples ring no transient). The same kind of filter as the first stage (RLB, a
    high-pass near 38 Hz) of the loudness measure of ITU-R BS.1770-4; speech has no energy there."""
    out = signal.astype(np.float64) - float(np.mean(signal, dtype=np.float64)) if len(signal) else signal.astype(np.float64)
    if len(out) < 2 or rate <= 4 * LEVEL_HIGHPASS_HZ:
        return out
    from scipy.signal import butter, sosfilt, sosfilt_zi

    sos = butter(2, LEVEL_HIGHPASS_HZ, btype="highpass", fs=rate, output="sos")
    filtered, _ = sosfilt(sos, out, zi=sosfilt_zi(sos) * out[0])
    return filtered


def _channel_levels(frames: np.ndarray, mono: np.ndarray, rate: int) -> tuple[float, list[float]]:
    """The mix's and each channel's loudest-window level, dBFS, all measured without DC
    (`_without_dc`): `frames` float32 (n, channels), `mono` their mix (n,)."""
    mix = _loudest_window_dbfs(_without_dc(mono, rate), rate)
    if frames.shape[1] == 1:
        return mix, [mix]
    return mix, [_loudest_window_dbfs(_without_dc(frames[:, c], rate), rate) for c in range(frames.shape[1])]


def _loudest_window_dbfs(mono: np.ndarray, rate: int) -> float:
    """RMS in dBFS of the loudest `LOUDEST_WINDOW_S` window (10 ms hop); -120.0 for digital silence.
    `mono` (n,) as given: callers remove the DC first (`_without_dc`)."""
    hop = max(1, rate // 100)
    n_frames = len(mono) // hop
    if n_frames == 0:
        energy = float(np.mean(np.square(mono, dtype=np.float64))) if len(mono) else 0.0
    else:
        frames = mono[: n_frames * hop].astype(np.float64).reshape(n_frames, hop)
        frame_energy = np.mean(np.square(frames), axis=1)
        width = max(1, min(n_frames, int(round(LOUDEST_WINDOW_S * 100))))
        cumulative = np.concatenate(([0.0], np.cumsum(frame_energy)))
        energy = float(np.max(cumulative[width:] - cumulative[:-width]) / width)
    if energy <= 1e-12:
        return -120.0
    return 10.0 * math.log10(energy)


def _over_full_scale_warnings(frames: np.ndarray, samples: np.ndarray) -> list[str]:
    """Warnings for samples beyond full scale that `load_audio` is about to clip to [-1, 1].

    Args:
        frames: the input (after any trim), float32 (n, channels), full scale = 1.0.
        samples: the 16 kHz mono result before clipping, float32 (m,).

    Returns one "too loud" warning when the input itself has samples with |x| > 1 (only float
    input can: integer input is scaled into [-1, 1)), else one warning when resampling alone pushed
    more than `CLIPPED_FRACTION_WARN` of the samples past full scale (the same share that makes a
    source "slightly clipped"), else none: resampling a loud microphone clip overshoots full scale by
    a few samples, and clipping those is inaudible, nothing a person could act on.
    """
    over = int(np.count_nonzero(np.abs(frames) > 1.0))
    if over:
        peak = float(np.max(np.abs(frames)))
        return [
            f"too loud: {plural(over, 'sample')} {'was' if over == 1 else 'were'} louder than a recording can hold and were clipped; lower the "
            f"recording level and export again (peak {peak:.2f} of full scale = {20 * math.log10(peak):+.1f} dBFS)"
        ]
    overshoot = int(np.count_nonzero(np.abs(samples) > 1.0))
    if overshoot > CLIPPED_FRACTION_WARN * max(1, samples.size):
        return [f"near full scale: resampling to 16 kHz pushed {plural(overshoot, 'sample')} past full scale; they were clipped to [-1, 1]"]
    return []


def _resample(mono: np.ndarray, rate: int) -> np.ndarray:
    if rate == TARGET_SAMPLE_RATE_HZ:
        return mono
    import soxr

    return soxr.resample(mono, rate, TARGET_SAMPLE_RATE_HZ, quality="HQ").astype(np.float32, copy=False)


def load_audio(source: Any, *, name: str | None = None, trim: bool = False, max_duration_s: float = MAX_DURATION_S) -> Audio:
    """Decode, downmix, resample and check one clip.

    Args:
        source: a path (`str`/`os.PathLike`), raw file bytes, a Gradio microphone value
            `(sample_rate_hz, ndarray)` (int16/int32/uint8/float, mono or multi-channel in either
            axis order), a Gradio file dict with a `"path"` key, an `Audio` (returned as is), or
            `None` (nothing recorded).
        name: how to call the clip in messages (defaults to the file name).
        trim: when the clip is longer than `max_duration_s`, keep its start instead of refusing it.
        max_duration_s: the longest clip taken, seconds (default and at most 30 s, a larger value counts
            as 30 s); no more is ever decoded, so a server bounds audio without decoding what it refuses.

    Returns:
        `Audio` with `samples` float32 of shape (n,), in [-1, 1], at 16 kHz, and its `AudioReport`.

    Raises:
        AudioError: no audio, unreadable/corrupt (the message says what the file holds instead and
            lists `ACCEPTED_FORMATS`), NaN/inf, shorter than 0.3 s, clipped, or silent; the message
            gives the measured value and a fix.
        ClipTooLongError: (an `AudioError`) longer than `max_duration_s` without `trim` (its
            `duration_s` a lower bound when the file does not state its length).
    """
    max_duration_s = min(float(max_duration_s), MAX_DURATION_S)
    if isinstance(source, Audio):
        return source
    if isinstance(source, dict) and "path" in source:
        source = source["path"]
    label = _describe(source, name)
    frames, rate, n_source, length_known = source_frames(source, label, trim, max_duration_s)
    channels = frames.shape[1]
    source_duration_s = _check_source(frames, rate, n_source, label, trim, max_duration_s, length_known)
    warnings: list[str] = []
    trimmed = source_duration_s > max_duration_s  # only with `trim`: `_check_source` refuses it otherwise
    if trimmed:
        frames = frames[: int(max_duration_s * rate)]
        warnings.append(f"trimmed from {source_duration_s:.1f} s to the first {max_duration_s:g} s")
    clipped_fraction = _check_clipping(frames, label, warnings)
    mono, level_dbfs = _downmix(frames, rate, warnings)
    _check_level(mono, level_dbfs, rate, label, warnings)
    samples = _resample(mono, rate)
    warnings.extend(_over_full_scale_warnings(frames, samples))
    np.clip(samples, -1.0, 1.0, out=samples)
    report = AudioReport(
        source_rate_hz=int(rate),
        channels=int(channels),
        duration_s=len(samples) / TARGET_SAMPLE_RATE_HZ,
        source_duration_s=source_duration_s,
        peak=float(np.max(np.abs(samples))) if len(samples) else 0.0,
        rms=float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))) if len(samples) else 0.0,
        level_dbfs=level_dbfs,
        clipped_fraction=clipped_fraction,
        trimmed=trimmed,
        warnings=warnings,
    )
    return Audio(samples=samples, report=report)


def _check_source(frames: np.ndarray, rate: int, n_source: int, label: str, trim: bool,
                  max_s: float = MAX_DURATION_S, length_known: bool = True) -> float:
    """The source's duration in seconds (`n_source / rate`), once it is checked: samples there, not over
    `max_s` unless `trim` (else `ClipTooLongError`), finite, floats within `FLOAT_SCALE_MAX`,
    at least `MIN_DURATION_S` (else `AudioError`, with the measured value and a fix)."""
    if n_source == 0 or frames.shape[1] == 0:
        raise AudioError(f"`{label}` contains no audio samples; record or export it again.")
    source_duration_s = n_source / rate
    if source_duration_s > max_s and not trim:  # from the container: nothing was decoded (or up to the cap)
        length = f"{source_duration_s:.1f} s" if length_known else f"longer than {max_s:g} s (it does not state its length)"
        limit = f"Gemma hears at most {MAX_DURATION_S:.0f} s (3n and 4 alike)" if max_s >= MAX_DURATION_S else f"at most {max_s:g} s is taken here"
        raise ClipTooLongError(f"`{label}` is {length}; {limit}. Trim it or split it into shorter clips.", source_duration_s)
    bad = int(np.count_nonzero(~np.isfinite(frames)))
    if bad:
        raise AudioError(
            f"`{label}` has {bad} NaN or infinite samples out of {frames.size}; the recording is "
            "corrupt. Record or export it again."
        )
    source_peak = float(np.max(np.abs(frames)))
    if source_peak > FLOAT_SCALE_MAX:
        raise AudioError(
            f"`{label}` has float samples up to {source_peak:.1f}; expected values in [-1, 1]. "
            "Pass integer (int16) samples or divide the floats by 32768."
        )
    if source_duration_s < MIN_DURATION_S:
        raise AudioError(
            f"`{label}` is {source_duration_s:.2f} s long; a clip needs at least {MIN_DURATION_S} s. "
            "Record the whole sentence (start recording before speaking)."
        )
    return source_duration_s


def _check_clipping(frames: np.ndarray, label: str, warnings: list[str]) -> float:
    """The fraction of samples (every channel) at full scale (|x| >= `CLIP_LEVEL`): over
    `CLIPPED_FRACTION_MAX` an `AudioError` (too loud), over `CLIPPED_FRACTION_WARN` a warning."""
    clipped_fraction = float(np.count_nonzero(np.abs(frames) >= CLIP_LEVEL)) / frames.size
    if clipped_fraction > CLIPPED_FRACTION_MAX:
        raise AudioError(
            f"`{label}` is clipped: {clipped_fraction:.1%} of samples are at full scale (at most "
            f"{CLIPPED_FRACTION_MAX:.1%} allowed); it was recorded too loud. Lower the input volume "
            "or move the microphone away and record again."
        )
    if clipped_fraction > CLIPPED_FRACTION_WARN:
        warnings.append(f"slightly clipped ({clipped_fraction:.2%} of samples at full scale)")
    return clipped_fraction


def _downmix(frames: np.ndarray, rate: int, warnings: list[str]) -> tuple[np.ndarray, float]:
    """`(mono, level_dbfs)`: the channels of `frames` (n, channels) averaged, float32 (n,), and its
    loudest-window level without DC; a mix more than `PHASE_CANCEL_DB` below its loudest channel
    (channels out of phase) keeps that channel alone, with a warning."""
    channels = frames.shape[1]
    mono = frames[:, 0] if channels == 1 else frames.mean(axis=1, dtype=np.float32)
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    # Levels without DC (a constant offset is no sound), the mix compared with its channels.
    level_dbfs, channel_dbfs = _channel_levels(frames, mono, rate)
    loudest = int(np.argmax(channel_dbfs))
    if channels > 1 and channel_dbfs[loudest] - level_dbfs > PHASE_CANCEL_DB:
        warnings.append(
            f"the channels cancel each other in the mix (out of phase: the mix measures {level_dbfs:.1f} dBFS, "
            f"channel {loudest + 1} alone {channel_dbfs[loudest]:.1f} dBFS); channel {loudest + 1} was kept alone. "
            "Check the microphone's wiring or record in mono")
        mono = np.ascontiguousarray(frames[:, loudest], dtype=np.float32)
        level_dbfs = channel_dbfs[loudest]
    return mono, level_dbfs


def _check_level(mono: np.ndarray, level_dbfs: float, rate: int, label: str, warnings: list[str]) -> None:
    """Check the clip can be heard: `AudioError` when silent (loudest `LOUDEST_WINDOW_S` below
    `SILENCE_DBFS`); warnings for a DC offset (>= `DC_OFFSET_WARN`), a quiet clip (< `QUIET_DBFS`), a
    source rate under 16 kHz."""
    offset = float(np.mean(mono, dtype=np.float64)) if len(mono) else 0.0
    if abs(offset) >= DC_OFFSET_WARN:
        warnings.append(f"DC offset of {offset:+.3f} (a constant the recorder adds; levels are measured without it)")
    if level_dbfs < SILENCE_DBFS:
        level_text = "digital silence" if level_dbfs <= -120.0 else f"{level_dbfs:.1f} dBFS"
        raise AudioError(
            f"`{label}` is silent: nothing in it is loud enough to be speech. Check the microphone is selected "
            f"and unmuted, then speak closer to it. (Its loudest {LOUDEST_WINDOW_S} s measures {level_text}, below "
            f"the {SILENCE_DBFS:.0f} dBFS speech threshold.)"
        )
    if level_dbfs < QUIET_DBFS:
        warnings.append(f"quiet: speak closer to the microphone ({level_dbfs:.1f} dBFS at its loudest)")
    if rate < TARGET_SAMPLE_RATE_HZ:
        warnings.append(f"low sample rate ({rate} Hz, upsampled to 16 kHz; detail above {rate // 2} Hz is missing)")


def pcm16(samples: np.ndarray) -> np.ndarray:
    """float32 (n,) in [-1, 1] -> int16 (n,): x * 32768, rounded, clipped to [-32768, 32767].

    The scale 32768 is the inverse of libsndfile's int16 -> float read (x / 32768), so a 16 kHz
    mono int16 WAV goes through `load_audio` and back bit-exactly (same content hash).
    """
    array = np.asarray(samples, dtype=np.float32)
    if array.ndim != 1:
        raise AudioError(f"Expected mono samples of shape (n,), got shape {array.shape}.")
    return np.clip(np.round(array.astype(np.float64) * 32768.0), -32768, 32767).astype(np.int16)


def wav_bytes(samples: np.ndarray, sample_rate_hz: int = TARGET_SAMPLE_RATE_HZ) -> bytes:
    """Encode mono float32 samples (n,) in [-1, 1] as a PCM16 WAV file (16 kHz by default); returns bytes."""
    import soundfile as sf

    buffer = io.BytesIO()
    sf.write(buffer, pcm16(samples), sample_rate_hz, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def decode_wav(data: bytes):
    """A row's `audio_wav` bytes -> float32 numpy array (n,), 16 kHz mono in [-1, 1].

    Decoded with soundfile (libsndfile), no torchcodec / FFmpeg. Raises `AudioError` on bad bytes.
    """
    import soundfile

    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=False)
    except (RuntimeError, soundfile.LibsndfileError) as error:
        raise AudioError(f"A dataset row's audio is not a readable WAV ({error}); rebuild the dataset.") from error
    if rate != 16000 or samples.ndim != 1:
        raise AudioError(f"A dataset row's audio is {rate} Hz with shape {samples.shape}; expected 16 kHz mono. Rebuild the dataset.")
    return np.ascontiguousarray(samples, dtype=np.float32)
