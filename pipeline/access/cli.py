"""Accounts on the command line: `python -m pipeline users` (an `--auth-file` of teachers and students)."""

from __future__ import annotations

import argparse
import getpass
import os
from pathlib import Path

from pipeline.access.accounts import Accounts, ROLES
from pipeline.errors import ConfigError


def users_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline users --file FILE add NAME [--role teacher|student] [--password P] | remove NAME | list`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline users",
                                     description="Manage the accounts of an --auth-file (passwords stored as scrypt hashes).")
    parser.add_argument("--file", required=True, help="the auth file (JSON; created if missing)")
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="add or replace an account")
    add.add_argument("name")
    add.add_argument("--role", choices=ROLES, default="student",
                     help="teacher: the studio and the practice page; student: the practice page only (default)")
    add.add_argument("--password", help="the password (default: asked without echo; or $TUTOR_PASSWORD)")
    remove = commands.add_parser("remove", help="remove an account")
    remove.add_argument("name")
    commands.add_parser("list", help="list the accounts and their roles")
    args = parser.parse_args(argv)

    path = Path(args.file)
    accounts = Accounts.load(path) if path.exists() else Accounts()
    if args.command == "add":
        password = args.password or os.environ.get("TUTOR_PASSWORD") or getpass.getpass(f"Password for {args.name}: ")
        accounts.add(args.name, password, role=args.role)
        accounts.save(path)
        print(f"{args.name} ({args.role}) saved in {path}.")
    elif args.command == "remove":
        if accounts.users.pop(args.name, None) is None:
            raise ConfigError(f"No user `{args.name}` in `{path}`; `python -m pipeline users --file {path} list` lists them.")
        accounts.save(path)
        print(f"{args.name} removed from {path}.")
    else:
        for name, entry in sorted(accounts.users.items()):
            print(f"{name}\t{entry['role']}")
    return 0
