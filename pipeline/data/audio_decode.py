"""Audio decoding: a file path, file bytes or a microphone value -> float32 frames at the source's rate.

`source_frames(source, label, trim, max_s)` is what `pipeline.data.audio.load_audio` checks next. Files
are decoded with libsndfile (`soundfile`) or, for containers it cannot read (m4a/aac/webm, some mp3),
with FFmpeg through PyAV (`av`); never past `max_s` seconds (and one frame more, which tells a longer
file), so a WebM that does not state its length is not decoded to its end. A file that cannot be
decoded is an `AudioError` that says what it looks like instead (text, an image, a video...) and which
formats are accepted.
"""

from __future__ import annotations

import io
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import AudioError

# libsndfile cannot read these containers; go straight to PyAV (FFmpeg).
_PYAV_FIRST_SUFFIXES = {".m4a", ".aac", ".mp4", ".webm", ".weba", ".opus", ".3gp", ".amr", ".wma", ".mka"}
AUDIO_SUFFIXES = frozenset(
    {".wav", ".flac", ".ogg", ".oga", ".mp3", ".aif", ".aiff", ".au"} | _PYAV_FIRST_SUFFIXES
)
"""File name endings (lower case) treated as audio by folder importers."""

TARGET_SAMPLE_RATE_HZ = 16000
"""The rate every clip is resampled to (Hz): what Gemma's audio feature extractors take."""
MAX_DURATION_S = 30.0
"""The longest clip kept (seconds): Gemma 3n's feature extractor silently truncates at 480,000 samples."""


@dataclass
class _Decoded:
    """What a decoder read: `frames` float32 (n, channels) at `rate_hz`, at most the frames asked for,
    and `source_frames`, the file's length in frames (from the container, or counted; a lower bound
    when not `length_known`: decoding stopped at the cap of a file not stating its length)."""

    frames: np.ndarray
    rate_hz: int
    source_frames: int
    length_known: bool = True


def _keep_frames(rate_hz: int, max_s: float = MAX_DURATION_S) -> int:
    """Frames decoded at most: `max_s` seconds (at most 30 s) and one more, which tells a longer file."""
    return int(math.ceil(max_s * rate_hz)) + 1


def _decode_soundfile(data: Any, trim: bool, max_s: float = MAX_DURATION_S) -> _Decoded:
    """Decode with libsndfile, at most `_keep_frames`; a file the header says is longer than `max_s` is not
    decoded without `trim` (its frame count is what `load_audio` refuses), nor counted to its end."""
    import soundfile as sf

    with sf.SoundFile(data) as handle:
        rate, total = int(handle.samplerate), int(handle.frames)
        keep = _keep_frames(rate, max_s)
        if total > keep and not trim:
            return _Decoded(np.zeros((0, handle.channels), np.float32), rate, total)
        samples = handle.read(frames=min(total, keep) if total > 0 else keep, dtype="float32", always_2d=True)
        counted = len(samples)
        if total <= 0 and counted == keep:  # the header gives no length: only `trim` counts the rest
            if not trim:
                return _Decoded(samples, rate, counted, length_known=False)
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


def _decode_pyav(data: Any, trim: bool, max_s: float = MAX_DURATION_S) -> _Decoded:
    """Decode the first audio stream with FFmpeg (PyAV), at most `_keep_frames`: a stream the
    container says is longer than `max_s` is not decoded at all without `trim`; past the kept frames
    decoding stops, also when the container states no duration (a browser's WebM) unless `trim`
    asks to count the frames to the end, keeping none."""
    import av

    with av.open(data, mode="r") as container:
        if not container.streams.audio:
            raise ValueError("the file has no audio stream")
        stream = container.streams.audio[0]
        duration_s = _pyav_duration_s(container, stream)
        rate = int(stream.rate or stream.codec_context.sample_rate or 0)
        if duration_s is not None and rate and not trim and duration_s * rate > _keep_frames(rate, max_s):
            return _Decoded(np.zeros((0, stream.channels or 1), np.float32), rate, int(round(duration_s * rate)))
        chunks = []
        kept = counted = 0
        channels = None
        stopped = False
        for frame in container.decode(stream):
            rate, channels = frame.sample_rate, len(frame.layout.channels)
            keep = _keep_frames(rate, max_s)
            if kept >= keep and (duration_s is not None or not trim):
                stopped = True  # the container says how long the rest is, or the rest is not wanted
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
    total = max(counted, int(round(duration_s * rate))) if stopped and duration_s is not None else counted
    return _Decoded(np.ascontiguousarray(merged.T), int(rate), int(total), length_known=not (stopped and duration_s is None))


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


def _decode_file_or_bytes(source: Any, label: str, trim: bool = False, max_s: float = MAX_DURATION_S) -> _Decoded:
    """Decode a path or bytes: libsndfile first (PyAV first for m4a/aac/webm), then the other.

    A decoder that fails, or finds no samples (a header that says its data is empty while audio
    follows it: a recorder cut off before rewriting it), hands over to the other one. At most `max_s`
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
            decoded = (_decode_soundfile if decoder == "soundfile" else _decode_pyav)(data, trim, max_s)
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


def source_frames(source: Any, label: str, trim: bool, max_s: float = MAX_DURATION_S) -> tuple[np.ndarray, int, int, bool]:
    """Decode `source` (a path, file bytes, or a microphone value `(rate, samples)` in either order) into
    `(frames, rate_hz, source_frames, length_known)` (see `_Decoded`): float32 (n, channels), the
    source's rate, the frames the source holds (more than n for a file over `max_s`).
    Raises `AudioError`: nothing received, an unsupported value, a file that cannot be decoded."""
    if source is None:
        raise AudioError(
            "No audio received: nothing was recorded or the upload had not finished. "
            "Record or upload the clip, wait until it shows, then try again."
        )
    if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        decoded = _decode_file_or_bytes(source, label, trim, max_s)
        return decoded.frames, decoded.rate_hz, decoded.source_frames, decoded.length_known
    if isinstance(source, (tuple, list)) and len(source) == 2:
        first, second = source
        if isinstance(first, np.ndarray) and not isinstance(second, np.ndarray):
            first, second = second, first  # (ndarray, rate) order
        if second is None:
            raise AudioError("No audio received: the recording is empty. Record the clip again.")
        frames, rate = _from_array(first, second, label)
        return frames, rate, len(frames), True
    raise AudioError(
        f"{label}: unsupported audio value of type {type(source).__name__}; expected a file path, "
        "file bytes or a microphone value (sample_rate_hz, samples)."
    )
