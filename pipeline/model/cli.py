"""The model stage's command line: `python -m pipeline make-tiny-model`, `python -m pipeline get-model`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from pipeline.errors import DownloadCancelled, ModelAccessError, PipelineError
from pipeline.model.catalog import DEFAULT_FAMILY, FAMILIES
from pipeline.model.tiny_model import MARKER_FILE

ACCESS_EXIT_CODE = 2
"""`get-model`'s exit code when Hugging Face refuses the model to this person (no token for a gated model, a
token it does not accept, the licence not accepted: `ModelAccessError`); other errors exit with 1."""


def make_tiny_model_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline make-tiny-model OUT_DIR [--family gemma3n|gemma4] [--seed N] [--llama-cpp-shapes] [--json]`."""
    parser = argparse.ArgumentParser(
        prog="python -m pipeline make-tiny-model",
        description="Write a tiny random model + processor of a family (offline stand-in for "
                    + ", ".join(f"{f.default_model} with --family {f.name}" for f in FAMILIES.values()) + ").",
    )
    parser.add_argument("out_dir", help="folder to write the model into")
    parser.add_argument("--family", choices=sorted(FAMILIES), default=DEFAULT_FAMILY.name,
                        help=f"which model family to stand in for (default: {DEFAULT_FAMILY.name})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: 0)")
    parser.add_argument("--llama-cpp-shapes", action="store_true",
                        help="Gemma 3n only: 22 layers and E2B's per-layer width, the shapes llama.cpp's Gemma 3n "
                             "graph fixes, so that its text-only GGUF runs in llama.cpp (~17 M parameters)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    family = FAMILIES[args.family]
    if args.llama_cpp_shapes:
        if family.name != "gemma3n":
            parser.error(f"--llama-cpp-shapes is for --family gemma3n (llama.cpp reads {family.label}'s shapes from "
                         "its GGUF); leave it out.")
        from pipeline.model.tiny_gemma3n import make_tiny_gemma3n  # noqa: PLC0415 - torch, only when writing

        out = make_tiny_gemma3n(args.out_dir, seed=args.seed, llama_cpp_shapes=True)
    else:
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


def get_model_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline get-model [--model ID] [--token-stdin] [--workspace WS] [--json]`: download a model
    from Hugging Face into its cache with a progress bar (on stderr), then print where it is.

    Exit codes: 0 ready; 2 Hugging Face refuses it to this person (`ACCESS_EXIT_CODE`: the message names the
    licence page, `--token-stdin` and the app's token box); 1 anything else (no network, a full disk, a
    cancel, ...: the message says what was kept and how to continue).
    """
    from pipeline.model.catalog import DEFAULT_MODEL, KNOWN_MODELS
    from pipeline.model.download import download_model, ready_line, save_token

    parser = argparse.ArgumentParser(
        prog="python -m pipeline get-model",
        description="Download a model from Hugging Face into its cache (resumable; every file checked against the "
                    "hub's hashes), so training and the app can use it offline.",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help=f"hub id (default {DEFAULT_MODEL}; known: {', '.join(KNOWN_MODELS)})")
    parser.add_argument("--token-stdin", action="store_true",
                        help="read a Hugging Face token from the first line of stdin and save it with huggingface_hub's "
                             "login (needed once for a gated model, e.g. `cat token.txt | python -m pipeline get-model "
                             "--token-stdin`); it is never printed")
    parser.add_argument("--workspace", help="also keep the download's progress in WS/downloads/ (the app follows it "
                                            "there; Cancel there stops it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end instead of a line")
    args = parser.parse_args(argv)
    job = None
    if args.workspace:
        from pipeline.model.download_job import JobFiles

        job = JobFiles(args.workspace, args.model)
    try:
        if args.token_stdin:
            account = save_token(sys.stdin.readline())
            print(f"Saved the Hugging Face token of account {account} with huggingface_hub's login.", file=sys.stderr)
        result = download_model(args.model, on_progress=job.progress if job else None,
                                should_stop=job.cancelled if job else None,
                                bar_file=None if job else sys.stderr)
    except PipelineError as error:
        code = ACCESS_EXIT_CODE if isinstance(error, ModelAccessError) else 1
        if job is not None:
            job.finish("cancelled" if isinstance(error, DownloadCancelled) else "failed", reason=str(error), exit_code=code)
        if args.json:
            print(json.dumps({"error": str(error), "type": type(error).__name__}))
        print(f"error: {error}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        if job is not None:
            job.finish("cancelled", reason="Interrupted (Ctrl+C).", exit_code=130)
        print(f"\nStopped; what was fetched is kept: run the same command again to continue.", file=sys.stderr)
        return 130
    except BaseException as error:  # a bug: recorded for the app, then raised as it is
        if job is not None:
            job.finish("failed", reason=f"{type(error).__name__}: {error}", exit_code=1)
        raise
    if job is not None:
        job.finish("completed", result=result, exit_code=0)
    print(json.dumps({"status": "ready", **result}) if args.json else ready_line(result))
    return 0
