"""`python -m pipeline inbox`: list students' attempts, accept (optionally with edited feedback) or reject them.

    python -m pipeline inbox --workspace WS [--status pending|accepted|rejected] [--json]
    python -m pipeline inbox --workspace WS --accept ID [--feedback TEXT]
    python -m pipeline inbox --workspace WS --reject ID
"""

from __future__ import annotations

import argparse
import json
import sys

from pipeline.inbox.store import STATUSES, Inbox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline inbox",
                                     description="Students' practice attempts: list, accept into the library, reject.")
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--status", choices=STATUSES, help="list only attempts with this status")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--accept", metavar="ID", help="make the attempt a sample (the student as speaker)")
    action.add_argument("--reject", metavar="ID", help="mark the attempt rejected (it is kept)")
    parser.add_argument("--feedback", help="with --accept: the feedback to keep (default: the tutor's answer)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    inbox = Inbox(args.workspace)
    if args.accept:
        attempt, sample = inbox.accept(args.accept, args.feedback)
        result = {"attempt": attempt.to_dict(), "sample": sample.id}
        text = f"Accepted {attempt.id}: sample {sample.id} ({attempt.kind}, speaker {attempt.student})."
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


if __name__ == "__main__":
    sys.exit(main())
