"""Accounts on the command line: `python -m pipeline users` (an `--auth-file` of teachers and students).

    python -m pipeline users --file FILE add NAME [--role teacher|student] [--password-stdin]
    python -m pipeline users --file FILE remove NAME
    python -m pipeline users --file FILE list

A password never goes on the command line (every user of the computer sees it in `ps`): `add` asks
for it twice without echo at a terminal; without one (a script, CI) it reads one line from standard
input with `--password-stdin`, or takes `$TUTOR_PASSWORD`. The file is changed under its lock
(`Accounts.change_file`), and a running app follows it at once (`AccountBook`). Keep the file out of
the checkout: by default the README puts it in the workspace folder.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from pipeline.access.accounts import Accounts, ROLES, check_password
from pipeline.errors import ConfigError

PASSWORD_ENV = "TUTOR_PASSWORD"
"""A password for `users add` from the environment (scripts)."""


def read_password(name: str, *, from_stdin: bool, stdin=None, environ=None, ask=getpass.getpass) -> str:
    """The new password of account `name`: one line of `stdin` (`from_stdin`), else `$TUTOR_PASSWORD`, else asked
    twice without echo at a terminal (`ask`).

    Raises:
        ConfigError: no terminal and neither `--password-stdin` nor the variable; the two entries differ; the
            password is shorter than `MIN_PASSWORD_CHARS` (`check_password`).
    """
    stdin = sys.stdin if stdin is None else stdin
    environ = os.environ if environ is None else environ
    if from_stdin:
        password = stdin.readline().rstrip("\r\n")
    elif environ.get(PASSWORD_ENV):
        password = environ[PASSWORD_ENV]
    elif not (stdin and stdin.isatty()):
        raise ConfigError(f"No terminal to ask {name}'s password at: pipe it in with `--password-stdin` (e.g. "
                          f"`printf '%s\\n' \"$PASS\" | python -m pipeline users --file FILE add {name} --password-stdin`) "
                          f"or set ${PASSWORD_ENV}.")
    else:
        try:
            password = ask(f"Password for {name}: ")
            again = ask(f"Password for {name}, again: ")
        except EOFError:
            raise ConfigError(f"No password was typed for {name}; nothing was saved.") from None
        if password != again:
            raise ConfigError(f"The two passwords typed for {name} differ; nothing was saved. Run the command again.")
    check_password(password, name)
    return password


def users_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline users --file FILE add NAME [--role teacher|student] [--password-stdin] | remove NAME | list`."""
    parser = argparse.ArgumentParser(prog="python -m pipeline users",
                                     description="Manage the accounts of an --auth-file (passwords stored as scrypt hashes).")
    parser.add_argument("--file", required=True, help="the auth file (JSON; created if missing; keep it out of the "
                                                      "code's folder, e.g. in the workspace)")
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="add an account, or give it a new password")
    add.add_argument("name")
    add.add_argument("--role", choices=ROLES, default="student",
                     help="teacher: the studio and the practice page; student: the practice page only (default)")
    add.add_argument("--password-stdin", action="store_true",
                     help=f"read the password from the first line of standard input (default: asked twice at the "
                          f"terminal, or ${PASSWORD_ENV})")
    remove = commands.add_parser("remove", help="remove an account (a running app logs it out at once)")
    remove.add_argument("name")
    commands.add_parser("list", help="list the accounts and their roles")
    args = parser.parse_args(argv)

    path = Path(args.file)
    if args.command == "add":
        password = read_password(args.name, from_stdin=args.password_stdin)
        Accounts.change_file(path, lambda accounts: accounts.add(args.name, password, role=args.role))
        print(f"{args.name} ({args.role}) saved in {path}.")
    elif args.command == "remove":
        def remove(accounts: Accounts) -> None:
            if accounts.users.pop(args.name, None) is None:
                raise ConfigError(f"No user `{args.name}` in `{path}`; `python -m pipeline users --file {path} list` "
                                  "lists them.")

        Accounts.change_file(path, remove)
        print(f"{args.name} removed from {path}.")
    else:
        accounts = Accounts.load(path) if path.exists() else Accounts()
        for name, entry in sorted(accounts.users.items()):
            print(f"{name}\t{entry['role']}")
    return 0
