"""The model stage's command line: `python -m pipeline make-tiny-model`."""

from __future__ import annotations

import argparse
import json
import shlex

from pipeline.model.tiny_model import MARKER_FILE, make_tiny_model


def make_tiny_model_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline make-tiny-model OUT_DIR [--seed N] [--json]`."""
    parser = argparse.ArgumentParser(
        prog="python -m pipeline make-tiny-model",
        description="Write a tiny random Gemma 3n + processor (offline stand-in for google/gemma-3n-E2B-it).",
    )
    parser.add_argument("out_dir", help="folder to write the model into")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    out = make_tiny_model(args.out_dir, seed=args.seed)
    info = json.loads((out / MARKER_FILE).read_text(encoding="utf-8"))
    result = {"path": str(out.resolve()), **info}
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"Wrote a tiny random Gemma 3n ({info['parameters']:,} parameters) and its processor to {result['path']}.\n"
            f"Use it offline with --model {shlex.quote(str(result['path']))}; its outputs are random text."
        )
    return 0
