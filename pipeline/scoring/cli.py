"""The classical scorer's command line: `python -m pipeline score`.

    python -m pipeline score --workspace WS --fit                          fit the map on the build's train split
    python -m pipeline score --workspace WS --audio CLIP --text "PROMPT"   score one clip ([--json])
    python -m pipeline score --workspace WS --draft                        draft feedback for clips without any
    python -m pipeline score --workspace WS --accept SAMPLE [--feedback T] accept a draft (or your edit of it)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.errors import ScoringError
from pipeline.workspace import DEFAULT_WORKSPACE, Workspace


def score_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline score --workspace WS (--fit | --audio CLIP --text PROMPT [--json] | --draft |
    --accept SAMPLE [--feedback TEXT])`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline score",
                                     description="The classical pronunciation scorer (pocketsphinx; no fine-tuning).")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help="workspace folder")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--fit", action="store_true", help="fit the map on the built dataset's train split and save it")
    what.add_argument("--audio", default=None, help="score this clip (any format the app reads); needs --text")
    what.add_argument("--draft", action="store_true", help="draft feedback for every clip of the library without any")
    what.add_argument("--accept", default=None, metavar="SAMPLE",
                      help="make SAMPLE's draft its feedback (as drafted, or --feedback TEXT, your edit of it)")
    parser.add_argument("--feedback", default=None, help="with --accept: the feedback to keep instead of the draft")
    parser.add_argument("--text", default=None, help="the sentence the learner read (with --audio)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    ws = Workspace(args.workspace)
    if args.workspace != DEFAULT_WORKSPACE and not ws.root.is_dir():  # a mistyped folder: never the default map silently
        raise ScoringError(f"There is no workspace at `{ws.root}`: give --workspace the folder your recordings are in, "
                           f"or leave it out for the default map ({DEFAULT_WORKSPACE}).")
    if args.fit:
        from pipeline.scoring.fit import fit_workspace, stale_map_warning

        stale = stale_map_warning(ws)
        if stale:
            print(f"warning: {stale} Fitting it again now.", file=sys.stderr, flush=True)

        def progress(done: int, clip_id: str) -> None:
            print(f"[{done}] aligned {clip_id}", file=sys.stderr, flush=True)

        try:
            score_map = fit_workspace(ws, progress=None if args.json else progress)
        except ScoringError as error:
            if stale:  # the old map stays in use: say so beside why the new one was not fitted
                raise ScoringError(f"{error} Until then the scorer keeps the saved map fitted on the older build.") from None
            raise
        if args.json:
            print(json.dumps(score_map.to_dict(), ensure_ascii=False))
        else:
            print(f"{score_map.note}; saved to {ws.scorer_map_path}\ncross-validated across learners "
                  f"(mean absolute error beside predicting the mean, Pearson's r):\n{score_map.cv_summary()}")
        return 0
    if args.draft:
        from pipeline.scoring.drafts import draft_all

        result = draft_all(ws)
        if args.json:
            print(json.dumps(result, ensure_ascii=False))
        else:
            scored = len(result["drafted"]) - len(result["not_scored"])
            print(f"drafted feedback for {scored} clips without any into {result['path']} (drafts are not trained on "
                  "until accepted)" + (f"; {len(result['not_scored'])} could not be scored:" if result["not_scored"] else ""))
            for sample_id, reason in result["not_scored"].items():
                print(f"  {sample_id}: {reason}")
        return 0
    if args.accept:
        from pipeline.scoring.drafts import accept_draft

        sample = accept_draft(ws, args.accept, args.feedback)
        print(json.dumps({"sample": sample.id, "feedback": sample.feedback}, ensure_ascii=False) if args.json else
              f"Accepted the feedback of {sample.id}; it joins the next build.")
        return 0
    if not (args.text or "").strip():
        raise ScoringError("`--audio` needs `--text \"SENTENCE\"`: the sentence the learner read.")
    from pipeline.scoring.scorer import load_scorer

    clip = load_scorer(ws).score(args.audio, args.text)
    if args.json:
        print(json.dumps(clip.to_dict(), ensure_ascii=False))
    else:
        print(clip.text)
        for note in clip.notes:
            print(f"note: {note}")
    return 0 if clip.scored else 1  # "Not scored: ..." (a missing file, silence, another sentence): a script can tell
