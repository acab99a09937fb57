"""Command line: `python -m pipeline COMMAND [options]`; each stage's commands live in its own `cli.py`.

Every command prints a human summary, or one JSON object with `--json`, and exits non-zero with a
clear message (no traceback) when a `PipelineError` is raised.
"""

from __future__ import annotations

import importlib
import json
import sys

from pipeline.errors import PipelineError, missing_package_message

# command -> (module, function, one-line purpose); each function is `main(argv: list[str]) -> int`.
COMMANDS = {
    "import": ("pipeline.data.cli", "import_main", "import a folder of recordings into the sample library"),
    "samples": ("pipeline.data.cli", "samples_main", "list the sample library with check results"),
    "build": ("pipeline.data.cli", "build_main", "build the train/eval dataset from the sample library"),
    "make-tiny-model": ("pipeline.model.cli", "make_tiny_model_main", "write a tiny random Gemma 3n (or --family gemma4) + processor for offline use"),
    "get-model": ("pipeline.model.cli", "get_model_main", "download a model from Hugging Face (token, progress, resume, hashes)"),
    "estimate": ("pipeline.memory.cli", "estimate_main", "estimate (and optionally measure) fine-tuning peak memory"),
    "calibration-job": ("pipeline.memory.cli", "calibration_job_main", "calibrate this machine as a background job (the app's Calibrate this machine): run, status"),
    "plan": ("pipeline.memory.cli", "plan_main", "what can this machine do? full / LoRA / int8 / QLoRA of E2B and E4B"),
    "train": ("pipeline.training.cli", "train_main", "LoRA fine-tune Gemma 3n or Gemma 4 on the built dataset"),
    "delete-run": ("pipeline.training.cli", "delete_run_main", "delete a run folder (refused while the run is training)"),
    "score": ("pipeline.scoring.cli", "score_main", "the classical scorer (pocketsphinx, no fine-tuning): --fit, score a clip, --draft"),
    "infer": ("pipeline.tutor.cli", "infer_main", "tutor feedback for one clip, base or tuned"),
    "evaluate": ("pipeline.tutor.cli", "evaluate_main", "score a run's feedback against expert scores on the eval split"),
    "eval-job": ("pipeline.tutor.cli", "eval_job_main", "evaluations as background jobs: start, status, list, cancel"),
    "export": ("pipeline.export.cli", "export_main", "export a run: adapter zip, merged model, cloud job bundle, or GGUF for llama.cpp / Ollama"),
    "llama-cpp": ("pipeline.export.cli", "llama_cpp_main", "llama.cpp for the GGUF export: where it is; --build builds its tools"),
    "import-run": ("pipeline.export.cli", "import_run_main", "bring back a run trained elsewhere (a cloud job bundle's output)"),
    "practice": ("pipeline.inbox.cli", "practice_main", "set the practice page's run and exercise list for students"),
    "inbox": ("pipeline.inbox.cli", "inbox_main", "students' practice attempts: list, accept into the library, reject"),
    "users": ("pipeline.access.cli", "users_main", "accounts of an --auth-file (teachers: the studio; students: the practice page)"),
    "serve": ("pipeline.serving.cli", "serve_main", "serve runs behind an OpenAI-compatible API (chat completions with audio)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m pipeline COMMAND [options]\n\ncommands:")
        for name, (_, _, purpose) in COMMANDS.items():
            print(f"  {name:<16} {purpose}")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    try:
        module_name, function, _ = COMMANDS[argv[0]]
        return int(getattr(importlib.import_module(module_name), function)(argv[1:]) or 0)
    except PipelineError as error:
        if "--json" in argv:
            print(json.dumps({"error": str(error), "type": type(error).__name__}))
        print(f"error: {error}", file=sys.stderr)
        return 1
    except ImportError as error:  # a package missing from this Python: say which, and which Python
        message = missing_package_message(error)
        if "--json" in argv:
            print(json.dumps({"error": message, "type": "MissingPackage"}))
        print(f"error: {message}", file=sys.stderr)
        return 1


TRAINING_COMMANDS = ("train",)
"""Commands whose process trains, and so starts again on TCMalloc where the host has it
(`pipeline.host.allocator.run_on_tcmalloc`)."""


if __name__ == "__main__":
    if sys.argv[1:2] and sys.argv[1] in TRAINING_COMMANDS:
        from pipeline.host.allocator import run_on_tcmalloc

        try:
            run_on_tcmalloc()
        except PipelineError as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(1)
    sys.exit(main())
