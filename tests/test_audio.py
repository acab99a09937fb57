"""Audio ingest on generated audio: formats, microphone tuples, and every check with its message."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from pipeline.data.audio import (
    MAX_DURATION_S,
    TARGET_SAMPLE_RATE_HZ,
    Audio,
    load_audio,
    pcm16,
    wav_bytes,
)
from pipeline.errors import AudioError


def speech_like(seconds: float, rate: int, channels: int = 1, amplitude: float = 0.3, seed: int = 0) -> np.ndarray:
    """A 220 Hz tone with harmonics, syllable-rate amplitude modulation and a little noise; (n, channels)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    voice = sum(np.sin(2 * np.pi * 220 * k * t) / k for k in (1, 2, 3))
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4 * t)
    mono = amplitude * voice / 1.84 * envelope + 0.003 * rng.standard_normal(len(t))
    out = np.stack([mono * (1.0 - 0.1 * c) for c in range(channels)], axis=1)
    return out.astype(np.float32)


def to_int16(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)


def encode(x: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, x, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def encode_pyav(x: np.ndarray, rate: int, container: str, codec: str) -> bytes:
    """Encode mono float32 `x` with FFmpeg through PyAV (the same library a phone-export would need)."""
    import av

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = "mono"
        fmt = stream.codec_context.format.name
        frame_size = 1024
        pts = 0
        for start in range(0, len(x), frame_size):
            chunk = x[start : start + frame_size]
            if fmt == "fltp" or fmt == "flt":
                array = chunk[None, :].astype(np.float32)
            else:  # s16 / s16p
                array = to_int16(chunk)[None, :]
            frame = av.AudioFrame.from_ndarray(array, format=fmt, layout="mono")
            frame.sample_rate = rate
            frame.pts = pts
            pts += len(chunk)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


# --------------------------------------------------------------------------- decoding
FILE_CASES = [
    # (suffix, encoder) -> bytes of a 1.5 s clip at the given rate/channels
    ("wav-stereo-44k-int16", ".wav", lambda: encode(to_int16(speech_like(1.5, 44100, 2)), 44100, "WAV", "PCM_16"), 44100, 2),
    ("wav-mono-16k-float", ".wav", lambda: encode(speech_like(1.5, 16000), 16000, "WAV", "FLOAT"), 16000, 1),
    ("flac-22k", ".flac", lambda: encode(speech_like(1.5, 22050), 22050, "FLAC"), 22050, 1),
    ("ogg-vorbis-48k", ".ogg", lambda: encode(speech_like(1.5, 48000), 48000, "OGG", "VORBIS"), 48000, 1),
    ("mp3-44k", ".mp3", lambda: encode(speech_like(1.5, 44100), 44100, "MP3", "MPEG_LAYER_III"), 44100, 1),
    ("m4a-aac-44k", ".m4a", lambda: encode_pyav(speech_like(1.5, 44100)[:, 0], 44100, "ipod", "aac"), 44100, 1),
    ("aac-adts-32k", ".aac", lambda: encode_pyav(speech_like(1.5, 32000)[:, 0], 32000, "adts", "aac"), 32000, 1),
    ("ogg-opus-48k", ".opus", lambda: encode_pyav(speech_like(1.5, 48000)[:, 0], 48000, "ogg", "libopus"), 48000, 1),
    ("webm-opus-48k", ".webm", lambda: encode_pyav(speech_like(1.5, 48000)[:, 0], 48000, "webm", "libopus"), 48000, 1),
]


@pytest.mark.parametrize("case,suffix,make,rate,channels", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_files_decode_to_16k_mono(tmp_path, case, suffix, make, rate, channels):
    data = make()
    path = tmp_path / f"clip{suffix}"
    path.write_bytes(data)
    for source in (path, str(path), data):
        audio = load_audio(source)
        assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
        assert audio.report.source_rate_hz == rate
        assert audio.report.channels == channels
        # Lossy codecs add encoder delay/padding; the length stays close to 1.5 s.
        assert abs(audio.report.duration_s - 1.5) < 0.1, audio.report
        assert abs(len(audio.samples) / TARGET_SAMPLE_RATE_HZ - audio.report.duration_s) < 1e-9
        assert np.max(np.abs(audio.samples)) <= 1.0
        assert 0.05 < audio.report.rms < 0.5


def test_m4a_is_not_readable_by_libsndfile_but_loads(tmp_path):
    """The reason PyAV is needed: phone exports (m4a/AAC) are not libsndfile formats."""
    data = encode_pyav(speech_like(1.0, 44100)[:, 0], 44100, "ipod", "aac")
    with pytest.raises(Exception):
        sf.read(io.BytesIO(data))
    assert load_audio(data).report.source_rate_hz == 44100


def test_resampled_tone_keeps_its_frequency():
    rate = 44100
    t = np.arange(rate) / rate
    tone = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    audio = load_audio((rate, to_int16(tone)))
    spectrum = np.abs(np.fft.rfft(audio.samples))
    peak_hz = np.argmax(spectrum) * TARGET_SAMPLE_RATE_HZ / len(audio.samples)
    assert abs(peak_hz - 1000) < 2
    assert abs(audio.report.peak - 0.5) < 0.01


# --------------------------------------------------------------------------- microphone values
MIC_CASES = [
    ("int16-mono", lambda x: to_int16(x[:, 0]), 1),
    ("int16-frames-by-channels", lambda x: to_int16(x), 2),
    ("int16-channels-by-frames", lambda x: to_int16(x).T.copy(), 2),
    ("int32-stereo", lambda x: (x.astype(np.float64) * 2**31 * 0.999).astype(np.int32), 2),
    ("float32-stereo", lambda x: x, 2),
    ("float64-mono", lambda x: x[:, 0].astype(np.float64), 1),
]


@pytest.mark.parametrize("case,convert,channels", MIC_CASES, ids=[c[0] for c in MIC_CASES])
def test_microphone_tuple_48k(case, convert, channels):
    x = speech_like(2.0, 48000, channels=2)
    audio = load_audio((48000, convert(x)))
    assert audio.report.source_rate_hz == 48000
    assert audio.report.channels == channels
    assert len(audio.samples) == 32000
    reference = load_audio((48000, x[:, 0] if channels == 1 else x))
    assert np.max(np.abs(audio.samples - reference.samples)) < 1e-3


def test_microphone_axis_orders_agree():
    x = to_int16(speech_like(1.0, 48000, channels=2))
    a = load_audio((48000, x))
    b = load_audio((48000, x.T.copy()))
    np.testing.assert_array_equal(a.samples, b.samples)


def test_16k_int16_roundtrips_bit_exactly():
    x = to_int16(speech_like(1.0, 16000))[:, 0]
    audio = load_audio((16000, x))
    np.testing.assert_array_equal(pcm16(audio.samples), x)
    back, rate = sf.read(io.BytesIO(wav_bytes(audio.samples)), dtype="int16")
    assert rate == 16000
    np.testing.assert_array_equal(back, x)


def test_wav_bytes_is_16k_mono_pcm16():
    info = sf.info(io.BytesIO(wav_bytes(np.zeros(1600, dtype=np.float32))))
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
    with pytest.raises(AudioError, match="shape"):
        wav_bytes(np.zeros((10, 2), dtype=np.float32))


def test_audio_object_passes_through():
    audio = load_audio((16000, to_int16(speech_like(1.0, 16000))))
    assert load_audio(audio) is audio
    assert isinstance(audio, Audio)


# --------------------------------------------------------------------------- checks
def _nan_clip():
    x = speech_like(1.0, 16000)[:, 0]
    x[100] = np.nan
    return (16000, x)


def _inf_clip():
    x = speech_like(1.0, 16000)[:, 0]
    x[5] = np.inf
    return (16000, x)


def _clipped_clip():
    x = speech_like(1.0, 44100, amplitude=3.0)  # driven far past full scale
    return (44100, to_int16(np.clip(x, -1, 1)))


CHECK_CASES = [
    ("none", None, r"No audio received"),
    ("mic-none-array", (48000, None), r"No audio received"),
    ("silence", (16000, np.zeros(16000, dtype=np.int16)), r"silent: .*digital silence.*-50 dBFS"),
    ("near-silence-noise", (16000, (0.0005 * np.random.default_rng(1).standard_normal(16000)).astype(np.float32)),
     r"silent: .*-6\d\.\d dBFS"),
    ("clipped", _clipped_clip(), r"clipped: \d+\.\d% of samples .*Lower the input volume"),
    ("too-short-0.1s", (16000, to_int16(speech_like(0.1, 16000))), r"0\.10 s long; .*at least 0\.3 s"),
    ("too-long-31s", (16000, to_int16(speech_like(31.0, 16000))), r"31\.0 s; Gemma hears at most 30 s \(3n and 4 alike\)"),
    ("nan", _nan_clip(), r"1 NaN or infinite samples"),
    ("inf", _inf_clip(), r"1 NaN or infinite samples"),
    ("corrupt-bytes", b"RIFF\x10\x00\x00\x00WAVEfmt garbage" + bytes(range(256)) * 4, r"looks like a WAV file but cannot be decoded: it is damaged"),
    ("empty-bytes", b"", r"empty \(0 bytes\)"),
    ("unscaled-floats", (16000, (speech_like(1.0, 16000)[:, 0] * 32768)), r"expected values in \[-1, 1\]"),
    ("bad-shape", (16000, np.zeros((2, 2, 16000), dtype=np.int16)), r"shape \(2, 2, 16000\)"),
    ("bad-dtype", (16000, np.array(["a", "b"])), r"not audio"),
    ("bad-rate", ("fast", np.zeros(16000, dtype=np.int16)), r"sample rate 'fast'"),
    ("bad-type", 42, r"unsupported audio value of type int"),
]


@pytest.mark.parametrize("case,source,message", CHECK_CASES, ids=[c[0] for c in CHECK_CASES])
def test_checks_raise_with_measured_value(case, source, message):
    with pytest.raises(AudioError, match=message):
        load_audio(source)


def test_corrupt_and_missing_files(tmp_path):
    bad = tmp_path / "broken.m4a"
    bad.write_bytes(b"\x00\x00\x00\x20ftypM4A " + b"\xff" * 300)
    with pytest.raises(AudioError, match=r"`broken.m4a` looks like an MP4/M4A file but cannot be decoded"):
        load_audio(bad)
    with pytest.raises(AudioError, match="does not exist"):
        load_audio(tmp_path / "nope.wav")
    (tmp_path / "empty.wav").write_bytes(b"")
    with pytest.raises(AudioError, match=r"empty \(0 bytes\)"):
        load_audio(tmp_path / "empty.wav")


def test_trim_keeps_first_30_s():
    x = to_int16(speech_like(31.0, 8000))
    audio = load_audio((8000, x), trim=True)
    assert audio.report.trimmed
    assert len(audio.samples) == int(MAX_DURATION_S * TARGET_SAMPLE_RATE_HZ)
    assert audio.report.source_duration_s == pytest.approx(31.0)
    assert any("trimmed" in w for w in audio.report.warnings)
    assert any("low sample rate" in w for w in audio.report.warnings)


def test_a_file_that_states_no_length_is_decoded_no_further_than_the_cap():
    """A browser's recording (WebM written live: no duration in the container) of 2 minutes: refused as
    longer than 30 s after decoding about 30 s of it, not all of it; with a lower cap, that cap."""
    import av

    from pipeline.errors import ClipTooLongError

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="webm", options={"live": "1"}) as out:
        stream = out.add_stream("libopus", rate=48000)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(to_int16(speech_like(120.0, 48000)[:, 0])[None, :], format="s16", layout="mono")
        frame.sample_rate = 48000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    data = buffer.getvalue()
    with av.open(io.BytesIO(data)) as container:
        assert container.duration is None and container.streams.audio[0].duration is None
    with pytest.raises(ClipTooLongError, match="longer than 30 s") as caught:
        load_audio(data)
    assert 30.0 < caught.value.duration_s < 30.5  # a lower bound: decoding stopped past the cap
    with pytest.raises(ClipTooLongError, match="longer than 5 s") as caught:
        load_audio(data, max_duration_s=5.0)
    assert 5.0 < caught.value.duration_s < 5.5
    assert load_audio(data, trim=True).report.source_duration_s == pytest.approx(120.0, abs=0.1)  # trim counts it all


def test_quiet_and_slightly_clipped_pass_with_warnings():
    quiet = load_audio((16000, speech_like(1.0, 16000, amplitude=0.02)))
    assert any("quiet" in w for w in quiet.report.warnings)
    assert -50 < quiet.report.level_dbfs < -35
    x = speech_like(2.0, 16000, amplitude=0.3)[:, 0]
    x[:40] = 1.0  # 0.125 % of samples at full scale: warned, not refused
    mild = load_audio((16000, x))
    assert 0.001 < mild.report.clipped_fraction < 0.002
    assert any("slightly clipped" in w for w in mild.report.warnings)


def test_short_word_in_long_quiet_clip_is_not_silent():
    x = np.zeros(16000 * 10, dtype=np.float32)
    x[80000:84800] = speech_like(0.3, 16000)[:, 0]
    audio = load_audio((16000, x))
    assert audio.report.level_dbfs > -35


def test_real_speechocean_clips_pass_all_checks(speechocean_dir):
    paths = sorted((speechocean_dir / "WAVE").glob("*/*.WAV"))[:10]
    for path in paths:
        audio = load_audio(path)
        assert audio.report.source_rate_hz == 16000 and audio.report.channels == 1
        assert audio.report.warnings == []
        assert audio.report.to_dict()["duration_s"] == pytest.approx(len(audio.samples) / 16000, abs=1e-3)


@pytest.mark.parametrize("make", ["float_wav", "stereo_float_44k", "microphone_float"])
def test_over_range_float_audio_is_clipped_with_a_warning(tmp_path, make):
    """Issue 11 #6: float samples at 1.5 and -2.0 were clipped to [-1, 1] with `warnings: []`."""
    x = speech_like(2.0, 16000, amplitude=0.3)[:, 0]
    x[1000], x[2000], x[3000] = 1.5, -2.0, 1.2
    if make == "float_wav":
        path = tmp_path / "loud.wav"
        sf.write(str(path), x, 16000, subtype="FLOAT")
        source = path
    elif make == "stereo_float_44k":
        source = (44100, np.stack([x, x], axis=1))
    else:
        source = (16000, x)
    audio = load_audio(source)
    assert float(np.max(np.abs(audio.samples))) <= 1.0
    loud = [w for w in audio.report.warnings if "too loud" in w]
    assert len(loud) == 1 and "clipped" in loud[0] and "peak 2.00" in loud[0], audio.report.warnings


def test_resampling_overshoot_is_not_clipped_silently():
    rate = 44100
    t = np.arange(rate) / rate
    square = np.sign(np.sin(2 * np.pi * 440 * t)).astype(np.float32) * 0.98  # a square wave rings past 1 when resampled (Gibbs)
    square[: rate // 10] *= 0.3
    audio = load_audio((rate, square))
    assert float(np.max(np.abs(audio.samples))) <= 1.0
    assert any("past full scale" in w for w in audio.report.warnings), audio.report.warnings


def test_a_loud_microphone_clip_that_resampling_pushes_one_sample_past_full_scale_gets_no_warning():
    """Issue 32 item 8: every microphone clip got "near full scale: resampling to 16 kHz pushed 1 sample(s) past
    full scale" and a ⚠ beside "clipping 0.00 %": a few samples clipped by a hair are inaudible, nothing to act on."""
    from ui.samples_view import checks_markdown

    rate = 48000
    t = np.arange(2 * rate) / rate
    voice = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    signal = 0.9 * voice / np.abs(voice).max()
    top = int(np.argmax(signal))
    signal[top - 4:top + 4] = 0.995  # a loud plosive's top, no sample at full scale
    pcm = np.round(signal * 32767).astype(np.int16)
    import soxr

    assert np.count_nonzero(np.abs(soxr.resample(pcm / 32768, rate, 16000, quality="HQ")) > 1) >= 1, "the case itself"
    audio = load_audio((rate, pcm))
    assert float(np.max(np.abs(audio.samples))) <= 1.0 and audio.report.warnings == []
    checks = checks_markdown(audio.report)
    assert "⚠" not in checks and "none at full scale" in checks and "All checks passed" in checks


def test_a_saved_clips_length_has_one_rounding_in_the_status_its_checks_and_the_table():
    """Issue 32 rule 1: after Save the status said "Saved sample … (2.6 s)" above its checks' "duration 2.58 s"
    (and the library's 2.58): one length, two roundings on one screen."""
    import re

    from ui.samples_view import samples_frame, saved_markdown

    sample = {"id": "s-1", "duration_s": 2.58, "speaker": "me", "target_text": "WE CALL IT BEAR", "feedback": "Good.",
              "checks": {"duration_s": 2.58, "peak": 0.6, "level_dbfs": -14.0, "clipped_fraction": 0.0,
                         "warnings": [], "source_rate_hz": 16000, "channels": 1}}
    status = saved_markdown(sample)
    lengths = re.findall(r"\((\d+\.\d+) s\)", status) + re.findall(r"\| duration \| (\d+\.\d+) s", status)
    assert lengths == ["2.58", "2.58"], status
    assert samples_frame([sample])["seconds"].tolist() == ["2.58"]
    # a whole number of seconds keeps its decimals (the table showed "3" beside "2.58")
    assert samples_frame([{**sample, "duration_s": 3.0}])["seconds"].tolist() == ["3.00"]


def test_the_source_line_gives_the_rate_in_the_unit_it_becomes():
    """Issue 32 rule 1: "16000 Hz, 1 channel(s) → 16 kHz mono" gave one rate in two units on one line."""
    from ui.samples_view import checks_markdown

    report = {"duration_s": 2.0, "peak": 0.5, "level_dbfs": -15.0, "clipped_fraction": 0.0, "warnings": [],
              "source_rate_hz": 44100, "channels": 2}
    assert "| source | 44.1 kHz, 2 channels → 16 kHz mono |" in checks_markdown(report)
    assert "| source | 16 kHz, 1 channel → 16 kHz mono |" in checks_markdown({**report, "source_rate_hz": 16000,
                                                                             "channels": 1})
