"""The model stage's command line: `python -m pipeline make-tiny-model`."""

from __future__ import annotations

import argparse
import json
import shlex

from pipeline.model.catalog import DEFAULT_FAMILY, FAMILIES
from pipeline.model.tiny_model import MARKER_FILE


def make_tiny_model_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline make-tiny-model OUT_DIR [--family gemma3n|gemma4] [--seed N] [--json]`."""
    parser = argparse.ArgumentParser(
        prog="python -m pipeline make-tiny-model",
        description="Write a tiny random model + processor of a family (offline stand-in for "
                    + ", ".join(f"{f.default_model} with --family {f.name}" for f in FAMILIES.values()) + ").",
    )
    parser.add_argument("out_dir", help="folder to write the model into")
    parser.add_argument("--family", choices=sorted(FAMILIES), default=DEFAULT_FAMILY.name,
                        help=f"which model family to stand in for (default: {DEFAULT_FAMILY.name})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    family = FAMILIES[args.family]
    out = family.make_tiny(args.out_dir, seed=args.seed)
    info = json.loads((out / MARKER_FILE).read_text(encoding="utf-8"))
    result = {"path": str(out.resolve()), "family": family.name, **info}
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"Wrote a tiny random {family.label} ({info['parameters']:,} parameters) and its processor to {result['path']}.\n"
            f"Use it offline with --model {shlex.quote(str(result['path']))}; its outputs are random text."
        )
    return 0
