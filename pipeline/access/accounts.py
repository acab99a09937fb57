"""Who may reach the studio and the practice page, and which paths a shared studio may touch.

Served on this computer only (loopback: 127.0.0.0/8, ::1, `localhost`) the app needs no login, as
before. Served beyond it (`--host 0.0.0.0` or any other address, or `--share`), anyone who reaches
the address could read any folder through the studio's path boxes, write anywhere, train and
download recordings, so:

- a login is required (`needs_login`): `--auth USER` (one teacher; the password from
  `$TUTOR_AUTH_PASSWORD` or asked) and/or `--auth-file FILE` (`Accounts`: one account per person, each a
  `teacher` or a `student`; passwords of at least `MIN_PASSWORD_CHARS` characters, stored as scrypt
  hashes, never in plain text; `python -m pipeline users` manages the file). The running app reads the
  file again whenever it changes (`AccountBook`): a removed account or a new password takes effect at once;
  `pipeline.access.logins` throttles failed logins and ends sessions;
- teachers reach the studio and the practice page; students reach the practice page only
  (`Accounts.can_open`);
- every path typed into the studio must lie inside the workspace (`confine_path`, called by each
  path box through `ui.state.AppState.typed_path`).

This module deliberately knows nothing about Gradio: `app.py` turns an `Accounts` into the
`auth=` callables of each page.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.fileio import atomic_write_json, locked

ROLES = ("teacher", "student")
STUDIO = "studio"
PRACTICE = "practice"

# scrypt cost: n=2**14, r=8, p=1 is the interactive-login setting recommended by the scrypt paper
# (Percival, "Stronger key derivation via sequential memory-hard functions", 2009, section 7) and
# Python's hashlib docs; 16 MiB of memory and a few tens of ms per check.
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2 ** 14, 8, 1
_SALT_BYTES = 16
_KEY_BYTES = 32
MIN_PASSWORD_CHARS = 8
"""The shortest password an account may have (characters): NIST SP 800-63B, section 3.1.1.2 (8 at least
for a password a person chooses)."""
AUTH_PASSWORD_ENV = "TUTOR_AUTH_PASSWORD"
"""The teacher's password for `app.py --auth USER` (kept out of the command line, which `ps` shows)."""


def is_loopback(host: str | None) -> bool:
    """True when `host` only accepts connections from this computer: `localhost`, 127.0.0.0/8 or ::1.

    Anything else (0.0.0.0, ::, a LAN address, another host name) counts as beyond loopback: a name
    is not resolved, so an unknown name is treated as shared (the safe side).
    """
    text = (host or "").strip().strip("[]").lower()
    if text in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def needs_login(host: str | None, share: bool = False) -> bool:
    """Whether serving on `host` (and/or with a public `share` link) reaches beyond this computer."""
    return bool(share) or not is_loopback(host)


def check_password(password: str | None, name: str | None = None) -> None:
    """Refuse a password shorter than `MIN_PASSWORD_CHARS` characters.

    Raises:
        ConfigError: empty or too short (says how long it is, the minimum, and for whom when `name` is given).
    """
    length = len(password or "")
    if length < MIN_PASSWORD_CHARS:
        whose = f" for `{name}`" if name else ""
        raise ConfigError(f"The password{whose} has {length} characters; a password needs at least "
                          f"{MIN_PASSWORD_CHARS}. Choose a longer one (a few words are easy to remember).")


def hash_password(password: str) -> str:
    """`scrypt$N$r$p$SALT_HEX$KEY_HEX` for `password` (a fresh 16-byte salt; see `_SCRYPT_N` for the cost).

    Raises `ConfigError` for a password shorter than `MIN_PASSWORD_CHARS` (`check_password`)."""
    check_password(password)
    salt = secrets.token_bytes(_SALT_BYTES)
    key = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P,
                         dklen=_KEY_BYTES)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${key.hex()}"


def verify_password(password: str, stored: str) -> bool:
    """Whether `password` matches a `hash_password` string (constant-time comparison); False for a
    malformed `stored` value."""
    try:
        scheme, n, r, p, salt_hex, key_hex = stored.split("$")
        if scheme != "scrypt":
            return False
        key = hashlib.scrypt((password or "").encode("utf-8"), salt=bytes.fromhex(salt_hex), n=int(n), r=int(r),
                             p=int(p), dklen=len(key_hex) // 2)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(key.hex(), key_hex)


@dataclass
class Accounts:
    """The people who may log in: name -> (role, scrypt hash).

    Attributes:
        users: `{name: {"role": "teacher" | "student", "password": hash_password(...)}}`.
    """

    users: dict[str, dict[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.users)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Accounts":
        """The accounts of an auth file (`{"users": {name: {"role", "password"}}}`, as `python -m pipeline
        users` writes it). Raises `ConfigError` naming the file for a missing or malformed one."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"The auth file `{path}` does not exist; create it with "
                              f"`python -m pipeline users --file {path} add NAME --role teacher`.") from None
        except (OSError, ValueError) as error:
            raise ConfigError(f"The auth file `{path}` cannot be read as JSON ({error}); recreate it with "
                              "`python -m pipeline users`.") from None
        users = data.get("users") if isinstance(data, dict) else None
        if not isinstance(users, dict):
            raise ConfigError(f"The auth file `{path}` has no `users` object; recreate it with `python -m pipeline users`.")
        for name, entry in users.items():
            if not isinstance(entry, dict) or entry.get("role") not in ROLES or not str(entry.get("password", "")).startswith("scrypt$"):
                raise ConfigError(f"User `{name}` in `{path}` needs a role ({' or '.join(ROLES)}) and a scrypt password "
                                  f"hash; set it again with `python -m pipeline users --file {path} add {name}`.")
        return cls({str(k): dict(v) for k, v in users.items()})

    def save(self, path: str | os.PathLike) -> None:
        """Write the accounts to `path` atomically (hashes only, never a plain password), readable by this
        user only (mode 0600: the hashes are not for other users of the computer)."""
        atomic_write_json(path, {"users": self.users})
        os.chmod(path, 0o600)

    @classmethod
    def change_file(cls, path: str | os.PathLike, change) -> "Accounts":
        """Read the auth file at `path` (empty when missing), apply `change(accounts)` and save it, all under
        the file's lock (`pipeline.fileio.locked`), so two `users add` at once both keep their account.
        Returns the accounts saved. Raises what `load` and `change` raise (nothing is written then)."""
        path = Path(path)
        with locked(path):
            accounts = cls.load(path) if path.exists() else cls()
            change(accounts)
            accounts.save(path)
            return accounts

    def add(self, name: str, password: str, role: str = "student") -> None:
        """Add or replace account `name`.

        Raises `ConfigError` for an empty name, a `:` in it, an unknown role, or a password shorter than
        `MIN_PASSWORD_CHARS`."""
        name = (name or "").strip()
        if not name or ":" in name:
            raise ConfigError(f"User name `{name}` is not usable; give a non-empty name without ':'.")
        if role not in ROLES:
            raise ConfigError(f"Role `{role}` is unknown; use {' or '.join(ROLES)}.")
        check_password(password, name)
        self.users[name] = {"role": role, "password": hash_password(password)}

    def role(self, name: str, password: str) -> str | None:
        """The role of `name` when `password` is right, else None."""
        entry = self.users.get(name or "")
        if entry is None:
            # spend the same time as a real check, so a wrong name cannot be told from a wrong password
            verify_password(password, _DUMMY_HASH)
            return None
        return entry["role"] if verify_password(password, entry["password"]) else None

    def can_open(self, page: str, name: str, password: str) -> bool:
        """Whether `name`/`password` may open `page` (`STUDIO`: teachers; `PRACTICE`: teachers and students)."""
        return role_opens(self.role(name, password), page)


def role_opens(role: str | None, page: str) -> bool:
    """Whether an account of `role` may open `page` (`STUDIO`: teachers; `PRACTICE`: teachers and students)."""
    return role == "teacher" or (role == "student" and page == PRACTICE)


_DUMMY_HASH = "scrypt$16384$8$1$" + "00" * _SALT_BYTES + "$" + "00" * _KEY_BYTES


def auth_teacher(auth: str | None, environ: dict | None = None) -> Accounts:
    """The teacher of `--auth`: `USER` with the password in `$TUTOR_AUTH_PASSWORD` (kept out of the command
    line, which every user of the computer sees in `ps`), or `USER:PASSWORD` (still taken; `app.py` warns).
    An empty `Accounts` without `auth`.

    Raises `ConfigError` for an empty name, `USER` without the variable, or a password shorter than
    `MIN_PASSWORD_CHARS`.
    """
    accounts = Accounts()
    if not auth:
        return accounts
    environ = os.environ if environ is None else environ
    name, sep, password = auth.partition(":")
    if not sep:
        password = environ.get(AUTH_PASSWORD_ENV, "")
        if not password:
            raise ConfigError(f"`--auth {name}` needs the teacher's password in ${AUTH_PASSWORD_ENV} (e.g. "
                              f"`read -s {AUTH_PASSWORD_ENV} && export {AUTH_PASSWORD_ENV}`), or use `--auth-file FILE` "
                              "made with `python -m pipeline users`.")
    if not name.strip():
        raise ConfigError("`--auth` takes the teacher's name (USER, the password in "
                          f"${AUTH_PASSWORD_ENV}), e.g. `--auth ms-lee`.")
    accounts.add(name.strip(), password, role="teacher")
    return accounts


def accounts_from_args(auth: str | None = None, auth_file: str | os.PathLike | None = None) -> Accounts:
    """The accounts given on the command line: `--auth USER[:PASSWORD]` (a teacher, `auth_teacher`) and/or
    `--auth-file FILE`, as they are now (the running app follows the file with `AccountBook`).

    Raises `ConfigError` for an unusable `--auth` (see `auth_teacher`) and for an unusable file.
    """
    accounts = Accounts.load(auth_file) if auth_file else Accounts()
    accounts.users.update(auth_teacher(auth).users)
    return accounts


class AccountBook:
    """The accounts a running app checks: the auth file, read again whenever it changes on disk (a removed
    account or a changed password counts from the next request on), and the `--auth` teacher.

    Args:
        path: the auth file (None: no file).
        extra: accounts that do not come from the file (the `--auth` teacher); they win over the file's.

    Raises:
        ConfigError: the file is unusable when the book is made (later, a file that became unreadable
            leaves only `extra`: nobody from the file logs in until it is fixed, the safe side).
    """

    def __init__(self, path: str | os.PathLike | None = None, extra: Accounts | None = None):
        self.path = Path(path) if path else None
        self.extra = extra or Accounts()
        self._seen: tuple | None = None
        self._file = Accounts.load(self.path) if self.path else Accounts()
        self._seen = self._signature()

    def _signature(self) -> tuple | None:
        try:
            info = self.path.stat() if self.path else None
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size) if info else None

    def current(self) -> Accounts:
        """The accounts now: the file's (read again when its inode, time or size changed) with `extra` over them."""
        if self.path is not None:
            seen = self._signature()
            if seen != self._seen:
                try:
                    self._file = Accounts.load(self.path)
                except ConfigError:
                    self._file = Accounts()
                self._seen = seen
        return Accounts({**self._file.users, **self.extra.users})

    def __bool__(self) -> bool:
        return bool(self.current())

    def entry(self, name: str) -> dict | None:
        """`{"role", "password"}` of account `name` now, or None."""
        return self.current().users.get(name or "")

    def role(self, name: str, password: str) -> str | None:
        """The role of `name` when `password` is right now, else None (`Accounts.role`)."""
        return self.current().role(name, password)

    def can_open(self, page: str, name: str, password: str) -> bool:
        """Whether `name`/`password` may open `page` now (`Accounts.can_open`)."""
        return self.current().can_open(page, name, password)


def check_sharing(host: str | None, share: bool, accounts: Accounts, *, forced: bool = False) -> None:
    """Refuse to serve beyond this computer without a teacher's login.

    `forced` (`app.py --shared`) treats any address as shared (behind a reverse proxy or a tunnel).
    Raises `ConfigError` saying how to add one when `forced or needs_login(host, share)` and
    `accounts` has no teacher account.
    """
    if not (forced or needs_login(host, share)):
        return
    if not any(entry["role"] == "teacher" for entry in accounts.users.values()):
        where = "a public --share link" if share else f"--host {host}" if not is_loopback(host) else "--shared"
        raise ConfigError(
            f"Serving on {where} publishes the studio beyond this computer, so a login is required. Add "
            f"`--auth USER` (the teacher's account, the password in ${AUTH_PASSWORD_ENV}), or `--auth-file FILE` with at least one teacher "
            "(create it with `python -m pipeline users --file FILE add NAME --role teacher`; add students with "
            "`--role student`). Or serve on this computer only with `--host 127.0.0.1`."
        )


def confine_path(path: str | os.PathLike, workspace_root: str | os.PathLike) -> Path:
    """`path` resolved (symlinks and `..` followed), when it lies inside `workspace_root`.

    Used for every path typed into a studio shared beyond this computer, so that a remote user can
    neither read nor write outside the workspace. Relative paths are taken from the workspace.

    Raises:
        ConfigError: the resolved path is outside the workspace (names both and how to proceed).
    """
    root = Path(workspace_root).expanduser().resolve()
    candidate = Path(path).expanduser()
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise ConfigError(
            f"`{path}` is outside the workspace `{root}`. The studio is shared beyond this computer, so it only "
            f"reads and writes inside its workspace: copy the folder into `{root}` (e.g. `{root / 'incoming'}`) "
            "and give that path, or do this on the computer itself with the app on `--host 127.0.0.1`."
        )
    return resolved
