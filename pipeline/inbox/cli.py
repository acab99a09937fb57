"""The inbox stage's command line: `python -m pipeline practice` (what the practice page offers) and `inbox`:

    python -m pipeline inbox --workspace WS [--status pending|accepted|rejected] [--json]
    python -m pipeline inbox --workspace WS --accept ID [--feedback TEXT]
    python -m pipeline inbox --workspace WS --reject ID
    python -m pipeline inbox --workspace WS --delete ID   (the attempt, its clip and any sample made from it)
"""

from __future__ import annotations

import argparse
import json

from pipeline.errors import ConfigError
from pipeline.inbox.practice import SESSION_LIST, load_setup, setup_from_list
from pipeline.inbox.store import Inbox, STATUSES


def inbox_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline inbox",
                                     description="Students' practice attempts: list, accept into the library, reject.")
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--status", choices=STATUSES, help="list only attempts with this status")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--accept", metavar="ID", help="make the attempt a sample (the student as speaker)")
    action.add_argument("--reject", metavar="ID", help="mark the attempt rejected (it is kept)")
    action.add_argument("--delete", metavar="ID",
                        help="delete the attempt, its recording and the sample made from it (consent withdrawn)")
    parser.add_argument("--feedback", help="with --accept: the feedback to keep (default: the tutor's answer)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    inbox = Inbox(args.workspace)
    if args.accept:
        attempt, sample = inbox.accept(args.accept, args.feedback)
        result = {"attempt": attempt.to_dict(), "sample": sample.id}
        text = (f"Marked {attempt.id} done: its recording is already sample {sample.id} (which keeps its own "
                 "feedback); nothing was added." if attempt.same_as else
                 f"Accepted {attempt.id}: sample {sample.id} ({attempt.kind}, speaker {attempt.student}).")
    elif args.delete:
        attempt = inbox.delete(args.delete)
        result, text = {"attempt": attempt.to_dict()}, f"Deleted {attempt.id} ({attempt.student}), its recording and any sample made from it."
    elif args.reject:
        attempt = inbox.reject(args.reject)
        result, text = {"attempt": attempt.to_dict()}, f"Rejected {attempt.id} (kept in the inbox)."
    else:
        attempts = inbox.list(args.status)
        result = {"attempts": [a.to_dict() for a in attempts]}
        text = "\n".join(f"{a.id}  {a.status:<8}  {a.student}  {a.exercise[:40]!r}  {a.answer[:60]!r}"
                         for a in attempts) or "The inbox is empty."
    print(json.dumps(result, ensure_ascii=False) if args.json else text)
    return 0


def practice_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline practice`: set (or show) what the practice page offers."""
    parser = argparse.ArgumentParser(prog="python -m pipeline practice",
                                     description="Set the practice page's run and exercise list (or show them).")
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--run", help="the run whose tutor answers the students")
    parser.add_argument("--list", dest="list_ref",
                        help=f"`{SESSION_LIST}` (the recording session's list) or a .txt/.csv file of sentences or prompts")
    parser.add_argument("--kind", choices=("read_aloud", "free_speech"),
                        help="what the items are (default: the session's kind, else read_aloud)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if bool(args.run) != bool(args.list_ref):
        raise ConfigError("Give both --run and --list to set the practice, or neither to show it.")
    setup = setup_from_list(args.workspace, args.run, args.list_ref, args.kind) if args.run else load_setup(args.workspace)
    if args.json:
        print(json.dumps(setup.to_dict() if setup else None))
    elif setup is None:
        print("No practice set up yet; give --run and --list.")
    else:
        print(f"Practice: run {setup.run}, {len(setup.items)} {setup.kind.replace('_', ' ')} exercises from "
              f"{setup.source or 'the studio'}.")
    return 0
