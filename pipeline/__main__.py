"""Command line: `python -m pipeline COMMAND [options]`; each command lives in its own module.

Every command prints a human summary, or one JSON object with `--json`, and exits non-zero with a
clear message (no traceback) when a `PipelineError` is raised.
"""

from __future__ import annotations

import importlib
import json
import sys

from pipeline.errors import PipelineError, missing_package_message

# command -> (module, one-line purpose); each module has `main(argv: list[str]) -> int`.
COMMANDS = {
    "import": ("pipeline.data.importers", "import a folder of recordings into the sample library"),
    "samples": ("pipeline.data.samples", "list the sample library with check results"),
    "build": ("pipeline.data.dataset", "build the train/eval dataset from the sample library"),
    "make-tiny-model": ("pipeline.model.tiny_model", "write a tiny random Gemma 3n + processor for offline use"),
    "estimate": ("pipeline.memory.cli", "estimate (and optionally measure) fine-tuning peak memory"),
    "plan": ("pipeline.memory.plan", "what can this machine do? full / LoRA / int8 / QLoRA of E2B and E4B"),
    "train": ("pipeline.training.train", "LoRA fine-tune Gemma 3n on the built dataset"),
    "delete-run": ("pipeline.training.runs", "delete a run folder (refused while the run is training)"),
    "infer": ("pipeline.tutor.infer", "tutor feedback for one clip, base or tuned"),
    "evaluate": ("pipeline.tutor.evaluate", "score a run's feedback against expert scores on the eval split"),
    "eval-job": ("pipeline.tutor.eval_jobs", "evaluations as background jobs: start, status, list, cancel"),
    "export": ("pipeline.export.cli", "export a run: adapter zip, merged model, or cloud job bundle"),
    "import-run": ("pipeline.export.import_run", "bring back a run trained elsewhere (a cloud job bundle's output)"),
    "practice": ("pipeline.inbox.practice", "set the practice page's run and exercise list for students"),
    "inbox": ("pipeline.inbox.cli", "students' practice attempts: list, accept into the library, reject"),
    "users": ("pipeline.access", "accounts of an --auth-file (teachers: the studio; students: the practice page)"),
    "serve": ("pipeline.serving.cli", "serve runs behind an OpenAI-compatible API (chat completions with audio)"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m pipeline COMMAND [options]\n\ncommands:")
        for name, (_, purpose) in COMMANDS.items():
            print(f"  {name:<16} {purpose}")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    try:
        module = importlib.import_module(COMMANDS[argv[0]][0])
        return int(module.main(argv[1:]) or 0)
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
