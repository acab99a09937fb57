"""Audio ingest: every path (import, microphone, try-out) turns its input into 16 kHz mono float32 here.

`load_audio(source)` accepts a file path (wav, flac, ogg, mp3, m4a/aac, webm/opus), raw file bytes,
or a Gradio microphone value `(sample_rate_hz, ndarray)`, decodes it with libsndfile (`soundfile`)
or, for containers libsndfile cannot read (m4a/aac/webm, some mp3), with FFmpeg through PyAV (`av`);
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
import logging
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import AudioError, ClipTooLongError

TARGET_SAMPLE_RATE_HZ = 16000
MIN_DURATION_S = 0.3
MAX_DURATION_S = 30.0

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

# libsndfile cannot read these containers; go straight to PyAV (FFmpeg).
_PYAV_FIRST_SUFFIXES = {".m4a", ".aac", ".mp4", ".webm", ".weba", ".opus", ".3gp", ".amr", ".wma", ".mka"}
AUDIO_SUFFIXES = frozenset(
    {".wav", ".flac", ".ogg", ".oga", ".mp3", ".aif", ".aiff", ".au"} | _PYAV_FIRST_SUFFIXES
)
"""File name endings (lower case) treated as audio by folder importers."""


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


@dataclass
class _Decoded:
    """What a decoder read: `frames` float32 (n, channels) at `rate_hz`, at most the frames asked for,
    and `source_frames`, the length of the whole file in frames (from the container, or counted)."""

    frames: np.ndarray
    rate_hz: int
    source_frames: int


def _keep_frames(rate_hz: int) -> int:
    """Frames decoded at most: 30 s (`MAX_DURATION_S`, the most any clip keeps) and one more, which
    tells a longer file from one of exactly 30 s."""
    return int(math.ceil(MAX_DURATION_S * rate_hz)) + 1


def _decode_soundfile(data: Any, trim: bool) -> _Decoded:
    """Decode with libsndfile, at most `_keep_frames`; a file the header says is longer than 30 s
    is not decoded at all without `trim` (its frame count is what `load_audio` refuses)."""
    import soundfile as sf

    with sf.SoundFile(data) as handle:
        rate, total = int(handle.samplerate), int(handle.frames)
        keep = _keep_frames(rate)
        if total > keep and not trim:
            return _Decoded(np.zeros((0, handle.channels), np.float32), rate, total)
        samples = handle.read(frames=min(total, keep) if total > 0 else keep, dtype="float32", always_2d=True)
        counted = len(samples)
        if total <= 0 and counted == keep:  # the header gives no length: count the rest, keeping none
            while len(block := handle.read(frames=rate, dtype="float32", always_2d=True)):
                counted += len(block)
    return _Decoded(samples, rate, max(total, counted))


def _pyav_duration_s(container: Any, stream: Any) -> float | None:
    """The audio stream's duration from the container (stream duration, else the container's), s."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / 1_000_000  # av.time_base: microseconds
    return None


def _decode_pyav(data: Any, trim: bool) -> _Decoded:
    """Decode the first audio stream with FFmpeg (PyAV), at most `_keep_frames`: a stream the
    container says is longer than 30 s is not decoded at all without `trim`; past the kept frames
    decoding stops (or, when the container gives no duration, goes on counting frames, keeping none)."""
    import av

    with av.open(data, mode="r") as container:
        if not container.streams.audio:
            raise ValueError("the file has no audio stream")
        stream = container.streams.audio[0]
        duration_s = _pyav_duration_s(container, stream)
        rate = int(stream.rate or stream.codec_context.sample_rate or 0)
        if duration_s is not None and rate and not trim and duration_s * rate > _keep_frames(rate):
            return _Decoded(np.zeros((0, stream.channels or 1), np.float32), rate, int(round(duration_s * rate)))
        chunks = []
        kept = counted = 0
        channels = None
        stopped = False
        for frame in container.decode(stream):
            rate, channels = frame.sample_rate, len(frame.layout.channels)
            keep = _keep_frames(rate)
            if kept >= keep and duration_s is not None:
                stopped = True  # the container says how long the rest is
                break
            counted += frame.samples
            if kept >= keep:
                continue  # no duration in the container: count the frames, keep none
            # Planar float keeps the channel layout and rate: to_ndarray() is (channels, n).
            array = frame.to_ndarray()
            if not frame.format.is_planar:
                array = array.reshape(-1, channels).T
            array = array[:, : keep - kept]
            if np.issubdtype(array.dtype, np.integer):
                info = np.iinfo(array.dtype)
                if info.min == 0:  # unsigned 8-bit
                    array = (array.astype(np.float32) - 128.0) / 128.0
                else:
                    array = array.astype(np.float32) / float(-info.min)
            chunks.append(np.asarray(array, dtype=np.float32))
            kept += array.shape[1]
        if not chunks or channels is None:
            return _Decoded(np.zeros((0, 1), np.float32), rate or TARGET_SAMPLE_RATE_HZ, 0)
    merged = np.concatenate(chunks, axis=1) if len(chunks) > 1 else chunks[0]
    total = max(counted, int(round(duration_s * rate))) if stopped else counted
    return _Decoded(np.ascontiguousarray(merged.T), int(rate), int(total))


ACCEPTED_FORMATS = "wav, flac, ogg, mp3, m4a/aac, webm/opus"
"""The audio formats named in messages (what libsndfile and FFmpeg decode here)."""

# File signatures (magic numbers) of the audio containers we decode: (name in words, test on the first bytes).
_AUDIO_SIGNATURES = (
    ("a WAV", lambda h: h[:4] in (b"RIFF", b"RIFX", b"RF64") and h[8:12] == b"WAVE"),
    ("a FLAC", lambda h: h[:4] == b"fLaC"),
    ("an Ogg", lambda h: h[:4] == b"OggS"),
    ("an MP3", lambda h: h[:3] == b"ID3"),
    ("an MP4/M4A", lambda h: h[4:8] == b"ftyp"),
    ("a WebM/Matroska", lambda h: h[:4] == b"\x1a\x45\xdf\xa3"),
    ("an AIFF", lambda h: h[:4] == b"FORM" and h[8:12] in (b"AIFF", b"AIFC")),
)


def _mp3_frame_sync(head: bytes) -> bool:
    """An MP3 frame header without an ID3 tag: 11 set sync bits and a valid layer. A weak signature
    (a UTF-16 byte-order mark passes it), so it is tried after text and other file kinds."""
    return len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and (head[1] >> 1) & 0x3 != 0


# Common files that are not audio, by signature, in words.
_OTHER_SIGNATURES = (
    ("an image (PNG)", lambda h: h[:8] == b"\x89PNG\r\n\x1a\n"),
    ("an image (JPEG)", lambda h: h[:3] == b"\xff\xd8\xff"),
    ("an image (GIF)", lambda h: h[:4] == b"GIF8"),
    ("a PDF document", lambda h: h[:5] == b"%PDF-"),
    ("a ZIP archive (or an Office document)", lambda h: h[:4] == b"PK\x03\x04"),
    ("a compressed archive (gzip)", lambda h: h[:2] == b"\x1f\x8b"),
    ("a program or library", lambda h: h[:4] == b"\x7fELF" or h[:2] == b"MZ"),
)


def _looks_like_text(head: bytes) -> str | None:
    """'a web page (HTML)' / 'text' when `head` (a file's first bytes) decodes as text, else None."""
    for bom, encoding in ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if head.startswith(bom):
            head, forced = head[len(bom):], encoding
            break
    else:
        forced = None
    if not forced and b"\x00" in head:
        return None
    try:
        text = head.decode(forced or "utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 4:  # not just a character cut at the end of `head`
            return None
        text = head[: error.start].decode(forced or "utf-8")
    if not text.strip():
        return None
    printable = sum(ch.isprintable() or ch in "\r\n\t" for ch in text)
    if printable < 0.95 * len(text):
        return None
    lowered = text.lstrip().lower()
    if lowered.startswith(("<!doctype html", "<html")):
        return "a web page (HTML)"
    return "text"


def _not_decodable(label: str, head: bytes, problems: list[str]) -> AudioError:
    """The error for a file no decoder could read: says what the bytes look like, never the decoders'
    internals (temporary paths, errno numbers; those go to the debug log)."""
    logging.getLogger(__name__).debug("cannot decode %s: %s", label, "; ".join(problems))
    accepted = f"Accepted audio formats: {ACCEPTED_FORMATS}."
    container = next((name for name, test in _AUDIO_SIGNATURES if test(head)), None)
    kind = None if container else (
        _looks_like_text(head) or next((name for name, test in _OTHER_SIGNATURES if test(head)), None))
    if kind:
        return AudioError(f"`{label}` is not audio: it holds {kind}, whatever its name says. {accepted} "
                          "Pick the recording itself.")
    if any("no audio stream" in problem for problem in problems):
        return AudioError(f"`{label}` holds no sound track (only video or pictures). {accepted} "
                          "Pick the recording itself, or save its sound as WAV or FLAC.")
    container = container or ("an MP3" if _mp3_frame_sync(head) else None)
    if container:
        return AudioError(f"`{label}` looks like {container} file but cannot be decoded: it is damaged or cut "
                          "short (a copy or a recording that did not finish). Record or export it again.")
    return AudioError(f"`{label}` is not in an audio format this app can read (it may be damaged, or another "
                      f"kind of file renamed). {accepted} Re-export the clip as WAV or FLAC.")


def _decode_file_or_bytes(source: Any, label: str, trim: bool = False) -> _Decoded:
    """Decode a path or bytes: libsndfile first (PyAV first for m4a/aac/webm), then the other.

    A decoder that fails, or finds no samples (a header that says its data is empty while audio
    follows it: a recorder cut off before rewriting it), hands over to the other one. At most 30 s
    (and one frame) is decoded; a file whose container says it is longer is not decoded without
    `trim` (see `_decode_soundfile`, `_decode_pyav`).

    When neither can, the `AudioError` says what the file is (text, an image, a damaged WAV...)
    and which formats are accepted. An `ImportError` (a decoder's package missing from this Python)
    is raised as is: it says nothing about the file (`pipeline.errors.missing_package_message`)."""
    is_path = isinstance(source, (str, os.PathLike))
    if is_path:
        path = Path(source)
        if not path.exists():
            raise AudioError(f"Audio file `{path}` does not exist; check the path or file name.")
        if path.is_dir():
            raise AudioError(f"`{path}` is a folder, not an audio file; pick a file inside it.")
        if path.stat().st_size == 0:
            raise AudioError(f"Audio file `{label}` is empty (0 bytes); record or export it again.")
        suffix = path.suffix.lower()
        order = ("pyav", "soundfile") if suffix in _PYAV_FIRST_SUFFIXES else ("soundfile", "pyav")
    else:
        if len(source) == 0:
            raise AudioError(f"{label} is empty (0 bytes); record or upload the clip again.")
        order = ("soundfile", "pyav")
    problems = []
    empty = None
    for decoder in order:
        data = str(source) if is_path else io.BytesIO(bytes(source))
        try:
            decoded = (_decode_soundfile if decoder == "soundfile" else _decode_pyav)(data, trim)
        except ImportError:
            raise  # this Python lacks the package: not a fault of the file
        except Exception as error:  # noqa: BLE001 - any decoder failure means "try the next one"
            problems.append(f"{decoder}: {str(error).strip()[:160] or type(error).__name__}")
            continue
        if decoded.source_frames > 0 and decoded.frames.shape[1] > 0:
            return decoded
        empty = decoded
        problems.append(f"{decoder}: no samples")
    if is_path:
        try:
            with open(source, "rb") as handle:
                head = handle.read(4096)
        except OSError:
            head = b""
    else:
        head = bytes(source[:4096])
    if empty is not None and (any(test(head) for _, test in _AUDIO_SIGNATURES) or _mp3_frame_sync(head)):
        # An audio file that holds no samples (FFmpeg also "reads" some other files as empty audio).
        raise AudioError(f"`{label}` contains no audio samples; record or export it again.")
    raise _not_decodable(label, head, problems)


def _from_array(rate: Any, data: Any, label: str) -> tuple[np.ndarray, int]:
    """A microphone value `(sample_rate_hz, ndarray)` -> (frames, channels) float32 and Hz.

    Integer data is scaled by its type's full scale (int16: /32768, int32: /2**31, uint8: (x-128)/128);
    float data is taken as [-1, 1]. 2-D data may be (frames, channels) or (channels, frames): the
    shorter axis, when it has at most 8 entries, is the channel axis.
    """
    try:
        rate = int(rate)
    except (TypeError, ValueError):
        raise AudioError(
            f"{label}: the sample rate {rate!r} is not a number; expected (sample_rate_hz, samples)."
        ) from None
    if rate <= 0:
        raise AudioError(f"{label}: the sample rate {rate} Hz is not positive; expected e.g. 48000.")
    array = np.asarray(data)
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        raise AudioError(f"{label}: samples of type {array.dtype} are not audio; expected int16 or float.")
    if array.ndim == 1:
        array = array[:, None]
    elif array.ndim == 2:
        rows, cols = array.shape
        if rows <= 8 and cols > rows:  # (channels, frames)
            array = array.T
    else:
        raise AudioError(
            f"{label}: samples have shape {array.shape}; expected (frames,) or (frames, channels)."
        )
    if np.issubdtype(array.dtype, np.integer):
        info = np.iinfo(array.dtype)
        if info.min == 0:
            mid = (info.max + 1) / 2.0
            floats = (array.astype(np.float64) - mid) / mid
        else:
            floats = array.astype(np.float64) / float(-info.min)
        return floats.astype(np.float32), rate
    return array.astype(np.float32, copy=False), rate


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
            f"too loud: {over} sample(s) beyond full scale (peak {peak:.2f} = {20 * math.log10(peak):+.1f} dBFS) "
            "were clipped to [-1, 1]; lower the level to at most 0 dBFS and export again"
        ]
    overshoot = int(np.count_nonzero(np.abs(samples) > 1.0))
    if overshoot > CLIPPED_FRACTION_WARN * max(1, samples.size):
        return [f"near full scale: resampling to 16 kHz pushed {overshoot} sample(s) past full scale; they were clipped to [-1, 1]"]
    return []


def _resample(mono: np.ndarray, rate: int) -> np.ndarray:
    if rate == TARGET_SAMPLE_RATE_HZ:
        return mono
    import soxr

    return soxr.resample(mono, rate, TARGET_SAMPLE_RATE_HZ, quality="HQ").astype(np.float32, copy=False)


def load_audio(source: Any, *, name: str | None = None, trim: bool = False) -> Audio:
    """Decode, downmix, resample and check one clip.

    Args:
        source: a path (`str`/`os.PathLike`), raw file bytes, a Gradio microphone value
            `(sample_rate_hz, ndarray)` (int16/int32/uint8/float, mono or multi-channel in either
            axis order), a Gradio file dict with a `"path"` key, an `Audio` (returned as is), or
            `None` (nothing recorded).
        name: how to call the clip in messages (defaults to the file name).
        trim: when the clip is longer than 30 s, keep its first 30 s instead of refusing it.

    Returns:
        `Audio` with `samples` float32 of shape (n,), in [-1, 1], at 16 kHz, and its `AudioReport`.

    Raises:
        AudioError: no audio, unreadable/corrupt (the message says what the file holds instead and
            lists `ACCEPTED_FORMATS`), NaN/inf, shorter than 0.3 s, clipped, or silent; the message
            gives the measured value and a fix.
        ClipTooLongError: (an `AudioError`) longer than 30 s without `trim`.
    """
    if isinstance(source, Audio):
        return source
    if isinstance(source, dict) and "path" in source:
        source = source["path"]
    label = _describe(source, name)
    frames, rate, n_source = _source_frames(source, label, trim)
    channels = frames.shape[1]
    source_duration_s = _check_source(frames, rate, n_source, label, trim)
    warnings: list[str] = []
    trimmed = source_duration_s > MAX_DURATION_S  # only with `trim`: `_check_source` refuses it otherwise
    if trimmed:
        frames = frames[: int(MAX_DURATION_S * rate)]
        warnings.append(f"trimmed from {source_duration_s:.1f} s to the first {MAX_DURATION_S:.0f} s")
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


def _source_frames(source: Any, label: str, trim: bool) -> tuple[np.ndarray, int, int]:
    """Decode `source` (a path, file bytes, or a microphone value `(rate, samples)` in either order) into
    `(frames, rate_hz, source_frames)`: float32 (n, channels), the source's rate, and the frames the
    source holds (more than n for a file over `MAX_DURATION_S`, decoded in part or not at all).
    Raises `AudioError`: nothing received, an unsupported value, a file that cannot be decoded."""
    if source is None:
        raise AudioError(
            "No audio received: nothing was recorded or the upload had not finished. "
            "Record or upload the clip, wait until it shows, then try again."
        )
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        decoded = _decode_file_or_bytes(source, label, trim)
        return decoded.frames, decoded.rate_hz, decoded.source_frames
    if isinstance(source, (tuple, list)) and len(source) == 2:
        first, second = source
        if isinstance(first, np.ndarray) and not isinstance(second, np.ndarray):
            first, second = second, first  # (ndarray, rate) order
        if second is None:
            raise AudioError("No audio received: the recording is empty. Record the clip again.")
        frames, rate = _from_array(first, second, label)
        return frames, rate, len(frames)
    raise AudioError(
        f"{label}: unsupported audio value of type {type(source).__name__}; expected a file path, "
        "file bytes or a microphone value (sample_rate_hz, samples)."
    )


def _check_source(frames: np.ndarray, rate: int, n_source: int, label: str, trim: bool) -> float:
    """The source's duration in seconds (`n_source / rate`), once it is checked: samples there, not over
    `MAX_DURATION_S` unless `trim` (else `ClipTooLongError`), finite, floats within `FLOAT_SCALE_MAX`,
    at least `MIN_DURATION_S` (else `AudioError`, with the measured value and a fix)."""
    if n_source == 0 or frames.shape[1] == 0:
        raise AudioError(f"`{label}` contains no audio samples; record or export it again.")
    source_duration_s = n_source / rate
    if source_duration_s > MAX_DURATION_S and not trim:  # from the container: nothing was decoded
        raise ClipTooLongError(
            f"`{label}` is {source_duration_s:.1f} s; Gemma 3n hears at most {MAX_DURATION_S:.0f} s. "
            "Trim it or split it into shorter clips.",
            source_duration_s,
        )
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
            f"`{label}` is silent: its loudest {LOUDEST_WINDOW_S} s measures {level_text}, below the "
            f"{SILENCE_DBFS:.0f} dBFS speech threshold. Check the microphone is selected and unmuted, "
            "then speak closer to it."
        )
    if level_dbfs < QUIET_DBFS:
        warnings.append(f"quiet ({level_dbfs:.1f} dBFS at its loudest; speak closer to the microphone)")
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
