"""Benchmark: import and build 500 real-sounding clips; prints clips per second.

Makes 500 distinct clips from the speechocean762 subset (each real clip in several variants with a
small gain change, and for most a small speed change by resampling with soxr, so the content hashes
differ), writes them in the Kaldi / speechocean762 layout (`wav.scp`, `text`, `utt2spk`,
`resource/scores.json`) in a temporary folder, then times, in this process:

- import: `pipeline.data.importers.import_folder(WS, SRC, format="kaldi")` (decode, check, resample,
  hash, write each clip, generate the feedback from the expert scores, one manifest write);
- build: `pipeline.data.dataset.build_dataset(WS, TINY_MODEL)` (processor load, token counting, split,
  save_to_disk, JSONL/Parquet exports).

Library imports (numpy, soundfile, transformers, datasets) happen inside the timed phases, as they
would for a person running the two commands; the tiny model is written beforehand by a separate
process so transformers is not already loaded. Target: >= 20 clips/s for import + build on a
2-core machine.

    .venv/bin/python benchmarks/import_build.py [--clips 500] [--json] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_SUBSET = REPO.parent / "shared" / "data" / "speechocean762-mini"
GAINS = (1.0, 0.9, 0.8, 0.95, 0.85, 0.75, 0.7, 0.65, 0.6)
SPEEDS = (1.0, 1.03, 0.97)


def _read_table(path: Path) -> dict[str, str]:
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.strip().split(maxsplit=1)
        if len(parts) == 2:
            rows[parts[0]] = parts[1]
    return rows


def make_clips(subset: Path, out: Path, count: int) -> int:
    """Write `count` distinct clips derived from `subset` into `out` (Kaldi layout). Returns seconds of audio."""
    import numpy as np
    import soundfile as sf
    import soxr

    scores = json.loads((subset / "resource" / "scores.json").read_text(encoding="utf-8"))
    utts = []
    for part in ("train", "test"):
        wav = _read_table(subset / part / "wav.scp")
        text = _read_table(subset / part / "text")
        spk = _read_table(subset / part / "utt2spk")
        utts += [(u, subset / wav[u], text[u], spk[u]) for u in sorted(wav)]
    (out / "WAVE").mkdir(parents=True)
    (out / "resource").mkdir()
    wav_scp, text_lines, utt2spk, new_scores = [], [], [], {}
    seconds = 0.0
    cache: dict[Path, np.ndarray] = {}
    for i in range(count):
        utt, path, text, speaker = utts[i % len(utts)]
        variant = i // len(utts)
        if path not in cache:
            cache[path], _ = sf.read(str(path), dtype="float32")
        audio = cache[path]
        speed = SPEEDS[variant % len(SPEEDS)]
        if speed != 1.0:  # play `speed` times faster: resample to fewer samples, keep the 16 kHz label
            audio = soxr.resample(audio, 16000 * speed, 16000).astype(np.float32)
        audio = audio * GAINS[variant % len(GAINS)] * (1.0 - 0.01 * (variant // len(GAINS)))
        new_id = f"{utt}v{variant:02d}"
        rel = f"WAVE/{new_id}.wav"
        sf.write(str(out / rel), audio, 16000, subtype="PCM_16")
        seconds += audio.size / 16000
        wav_scp.append(f"{new_id}\t{rel}")
        text_lines.append(f"{new_id}\t{text}")
        utt2spk.append(f"{new_id}\t{speaker}v{variant % 4}")  # 12 speakers, so the split is speaker-disjoint
        new_scores[new_id] = scores[utt]
    (out / "wav.scp").write_text("\n".join(wav_scp) + "\n", encoding="utf-8")
    (out / "text").write_text("\n".join(text_lines) + "\n", encoding="utf-8")
    (out / "utt2spk").write_text("\n".join(utt2spk) + "\n", encoding="utf-8")
    (out / "resource" / "scores.json").write_text(json.dumps(new_scores, indent=2), encoding="utf-8")
    return seconds


def run(count: int, subset: Path, profile: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-import-build-") as tmp:
        tmp = Path(tmp)
        tiny = tmp / "tiny-model"
        subprocess.run(
            [sys.executable, "-m", "pipeline", "make-tiny-model", str(tiny)],
            cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        source = tmp / "source"
        audio_s = make_clips(subset, source, count)
        workspace = tmp / "ws"

        profiler = None
        if profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        started = time.perf_counter()
        from pipeline.data.importers import import_folder

        imported = import_folder(workspace, source, format="kaldi")
        import_s = time.perf_counter() - started

        started = time.perf_counter()
        from pipeline.data.dataset import build_dataset

        report = build_dataset(workspace, str(tiny), eval_fraction=0.2, seed=42, max_length=1024)
        build_s = time.perf_counter() - started
        if profiler is not None:
            import pstats

            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(30)

    n_imported = len(imported.imported)
    rows = sum(report.splits.values())
    return {
        "clips": count,
        "audio_s": round(audio_s, 1),
        "imported": n_imported,
        "skipped": len(imported.skipped),
        "rows": rows,
        "excluded": len(report.excluded),
        "splits": report.splits,
        "import_s": round(import_s, 2),
        "build_s": round(build_s, 2),
        "import_clips_per_s": round(count / import_s, 1),
        "build_clips_per_s": round(n_imported / build_s, 1),
        "total_clips_per_s": round(count / (import_s + build_s), 1),
        "cpu_cores": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=500)
    parser.add_argument("--subset", type=Path, default=Path(os.environ.get("SPEECHOCEAN_DIR", DEFAULT_SUBSET)))
    parser.add_argument("--profile", action="store_true", help="print a cProfile of import + build to stderr")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.clips, args.subset, args.profile)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['clips']} clips ({result['audio_s']} s of audio) on {result['cpu_cores']} cores: "
            f"imported {result['imported']} (skipped {result['skipped']}), built {result['rows']} rows "
            f"(excluded {result['excluded']}, splits {result['splits']})"
        )
        print(f"  import: {result['import_s']:6.2f} s  {result['import_clips_per_s']:6.1f} clips/s")
        print(f"  build:  {result['build_s']:6.2f} s  {result['build_clips_per_s']:6.1f} clips/s")
        print(f"  both:   {result['import_s'] + result['build_s']:6.2f} s  {result['total_clips_per_s']:6.1f} clips/s (target >= 20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
