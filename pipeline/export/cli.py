"""`python -m pipeline export --workspace WS --run NAME --format adapter|merged|bundle|gguf [--out DIR] [--json]`,
and `python -m pipeline llama-cpp [--build] [--json]`.

- `adapter`: `NAME-adapter.zip` (PEFT adapter + processor + README), `pipeline.export.tutor`.
- `merged`: `NAME-merged/` (LoRA merged into a bf16 copy of the base; plain transformers loads it).
- `bundle`: `NAME-bundle/` + `NAME-bundle.tar.gz`, a cloud job that trains the run's settings on
  any GPU machine (`pipeline.export.bundle`).
- `gguf` (`--quant q8_0|q5_k_m|q4_k_m|f16|bf16|f32`): `NAME-gguf/` for llama.cpp and Ollama, the model and its
  audio projector (`pipeline.export.gguf`); Gemma 4 runs only. `gguf-text-only`: the same without the
  projector, the one GGUF a Gemma 3n run can have (it cannot hear).
- `llama-cpp`: where llama.cpp's source, converter and tools are (`pipeline.export.llama_cpp`); `--build`
  fetches the source and builds `llama-mtmd-cli`, `llama-quantize` and `llama-completion`.

Default output folder: `WS/exports/runs/NAME/`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipeline.errors import ExportError
from pipeline.export.gguf import BITS_PER_WEIGHT, LONG_CLIP_S, QUANTS
from pipeline.export.import_run import import_run
from pipeline.export.import_run import summary_text as import_summary_text
from pipeline.workspace import DEFAULT_WORKSPACE
from pipeline.units import format_bytes

FORMATS = ("adapter", "merged", "bundle", "gguf", "gguf-text-only")


def export_run(workspace, run: str, fmt: str, out_dir=None, *, device: str = "cpu", model: str | None = None,
               quant: str | None = None, progress=None) -> dict:
    """Export `run` in format `fmt` (one of `FORMATS`); returns that exporter's result dict
    (`format`, `run`, `path`, `bytes`, `base_model`, `notes`, ...). Raises `ConfigError` for an
    unknown format and whatever the exporter raises (`ExportError`, `DatasetError`, `ModelLoadError`).
    `model` (merged, gguf): where the run's base is now, when its folder moved (checked by identity);
    `quant` (gguf): the language model's weight type (`pipeline.export.gguf.QUANTS`); `progress` (gguf):
    called with a line per stage."""
    from pipeline.errors import ConfigError
    from pipeline.export.staging import out_folder
    from pipeline.export.tutor import default_out_dir, read_run

    if fmt not in FORMATS:
        raise ConfigError(f"`--format` must be one of {', '.join(FORMATS)}, got {fmt!r}.")
    read_run(workspace, run, need_adapter=False)  # a missing workspace or run is said before any folder is made
    with out_folder(out_dir if out_dir is not None else default_out_dir(workspace, run)) as out:
        return _export(workspace, run, fmt, out, device=device, model=model, quant=quant, progress=progress)


def _export(workspace, run: str, fmt: str, out_dir: Path, *, device: str, model: str | None, quant: str | None,
            progress) -> dict:
    """`export_run` once its folder is made: the exporter of `fmt`."""
    if fmt in ("gguf", "gguf-text-only"):
        from pipeline.export.gguf import DEFAULT_QUANT, export_gguf

        return export_gguf(workspace, run, out_dir, quant=quant or DEFAULT_QUANT, text_only=fmt == "gguf-text-only",
                           device=device, model=model, progress=progress)

    if fmt == "adapter":
        from pipeline.export.tutor import export_adapter

        return export_adapter(workspace, run, out_dir)
    if fmt == "merged":
        from pipeline.export.tutor import export_merged

        return export_merged(workspace, run, out_dir, device=device, model=model)
    if fmt == "bundle":
        from pipeline.export.bundle import export_bundle

        return export_bundle(workspace, run, out_dir)


def summary_text(result: dict) -> str:
    """Human summary of an export result."""
    size = result.get("bytes", 0)
    lines = [f"Exported run `{result['run']}` as {result['format']}: {result['path']} ({format_bytes(size)})"]
    if result.get("archive"):
        lines.append(f"  archive to upload: {result['archive']}")
    lines.append(f"  base model: {result.get('base_model')}")
    if result.get("format") in ("gguf", "gguf-text-only"):
        from pipeline.export.gguf import gguf_summary

        lines += gguf_summary(result)
    lines += [f"  note: {note}" for note in result.get("notes", [])]
    return "\n".join(lines)


def export_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline export ...` (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m pipeline export",
                                     description="Export a run: adapter zip, merged model, cloud job bundle, or GGUF "
                                                 "for llama.cpp / Ollama.")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help=f"workspace folder (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--run", required=True, help="the run to export (WS/runs/NAME)")
    parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt",
                        help="adapter: a zip to send; merged: a bf16 model with the LoRA merged in; bundle: a cloud "
                             "training job; gguf: llama.cpp / Ollama files with the audio projector (Gemma 4 runs); "
                             "gguf-text-only: without it (cannot hear; the only GGUF of a Gemma 3n run)")
    parser.add_argument("--quant", default=None, choices=QUANTS,
                        help="gguf only: the model's weight type, each with its expected size against the bf16 "
                             "merged model (E2B ~10 GB): " + ", ".join(
                                 f"{q} ~{round(BITS_PER_WEIGHT[q] / 16 * 100)}%%" for q in QUANTS)
                             + f"; default q8_0. q4_k_m warns when the dataset has a clip over {LONG_CLIP_S:g} s "
                               "(Gemma 4's audio is reported to repeat itself there): take q5_k_m. The audio "
                               "projector stays BF16 (F32 with f32)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: WS/exports/runs/NAME)")
    parser.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda", "mps"),
                        help="where the merge runs (merged, gguf; default cpu: it needs the bf16 model in memory)")
    parser.add_argument("--model", default=None,
                        help="merged, gguf: where the run's base model is now, if its folder moved (checked by its weights)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    if args.quant and not args.fmt.startswith("gguf"):
        parser.error(f"--quant applies to --format gguf only, not {args.fmt}")
    blocking = next((p for p in ([args.out, *args.out.parents] if args.out else []) if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise ExportError(f"`--out {args.out}`: `{blocking}` is a file, not a folder. Give a folder (it is made if "
                          "missing), or leave --out out for WS/exports/runs/NAME.")
    say = None if args.json else (lambda line: print(line, flush=True))
    result = export_run(args.workspace, args.run, args.fmt, args.out, device=args.device, model=args.model,
                        quant=args.quant, progress=say)
    print(json.dumps(result, ensure_ascii=False) if args.json else summary_text(result))
    return 0


def llama_cpp_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline llama-cpp [--build] [--json]`: where llama.cpp's source, converter and tools are
    on this computer; `--build` fetches the source (the llama-cpp-python sdist, from the package index)
    and builds its tools (`llama_cpp.TOOLS`: `llama-mtmd-cli`, `llama-quantize`, `llama-completion`; minutes;
    cached, `pipeline.export.llama_cpp`)."""
    from pipeline.export import llama_cpp

    parser = argparse.ArgumentParser(prog="python -m pipeline llama-cpp",
                                     description="llama.cpp for the GGUF export: its source, converter and tools.")
    parser.add_argument("--build", action="store_true",
                        help=f"fetch the source if needed and build {', '.join(llama_cpp.TOOLS)} (minutes, cached)")
    parser.add_argument("--portable", action="store_true",
                        help="with --build: build the slower tools that run on any x86-64 CPU (for a tool that died "
                             "on an illegal instruction), and use them from then on")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    if args.portable and not args.build:
        parser.error("--portable goes with --build: `python -m pipeline llama-cpp --build --portable`")
    built = None
    if args.build:
        say = None if args.json else (lambda line: print(line, flush=True))
        llama_cpp.source_dir(say=say)
        if args.portable:
            built = llama_cpp.build_tools(variants=("portable",), say=say)
        elif len(llama_cpp.built_tools()) < len(llama_cpp.TOOLS):
            built = llama_cpp.build_tools(say=say)
    state = dict(llama_cpp.status(), built_now=built)
    if args.json:
        print(json.dumps(state, ensure_ascii=False))
        return 0
    print(f"llama.cpp from llama-cpp-python {state['llama_cpp_python']}'s sdist, kept in {state['cache_dir']}")
    print(f"  source:    {state['source'] or 'not fetched yet (--build fetches it)'}")
    print(f"  converter: {state['converter'] or '-'}")
    for name, path in state["tools"].items():
        print(f"  {name}: {path or 'not built for this CPU (--build)'}")
    if state["variant"]:
        print(f"  build for this CPU ({state['cpu_key']}): {state['variant']}, proved by a smoke answer")
    for record in state["builds"][-3:]:
        print(f"  built {', '.join(record['targets'])} ({record.get('variant', 'native')}) in {record['seconds']:.0f} s "
              f"on {record['cpus']} CPUs ({record['jobs']} jobs, load average {record.get('load_average_at_start')}) "
              f"at {record['built_at']}")
    return 0


def import_run_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline import-run --workspace WS --source RUN_DIR_OR_TAR [--name NAME] [--force] [--json]`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline import-run",
                                     description="Bring back a run trained elsewhere (a cloud job bundle's output).")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help=f"workspace folder (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--source", type=Path, required=True, help="the run folder (OUTPUT/runs/NAME) or a .tar.gz of it")
    parser.add_argument("--name", default=None, help="the run's name here (default: its folder's name)")
    parser.add_argument("--force", action="store_true", help="import even when the base model here differs")
    parser.add_argument("--model", default=None, help="where the run's base model is on this machine, if not at the path it recorded")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    args = parser.parse_args(argv)
    result = import_run(args.workspace, args.source, name=args.name, force=args.force, model=args.model)
    print(json.dumps(result, ensure_ascii=False) if args.json else import_summary_text(result))
    return 0
