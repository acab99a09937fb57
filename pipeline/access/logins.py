"""Logins fit for a classroom: failed logins throttled per name and per address, sessions that end.

- `LoginThrottle`: after `name_failures` wrong passwords for one name, or `address_failures` from one
  address, within `window_s`, that name (or address) is refused without checking a password until the
  oldest failure leaves the window (the `limits` library's moving window, in memory). A right password
  clears the name's count. Refused logins cost no password hash, so guessing cannot load the server.
- `Sessions`: every session the app issued, with its account's password hash at the time. A session
  ends after `max_age_s`, at log-out, and at once when its account is removed, its password changed or
  its role no longer opens the page (`still_valid` asks `pipeline.access.accounts.AccountBook`, which
  reads the auth file again when it changes).

This module deliberately knows no web framework: `ui/login_guard.py` applies both to each page's requests.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from pipeline.access.accounts import AccountBook, role_opens
from pipeline.errors import ConfigError

NAME_FAILURES = 5
"""Wrong passwords for one name within `WINDOW_S` before that name waits (OWASP's Authentication Cheat
Sheet, "Login Throttling": lock out after a small number of failed attempts for a period)."""
ADDRESS_FAILURES = 20
"""Wrong passwords from one address (any names) within `WINDOW_S` before that address waits: a classroom
behind one router shares an address, so this is higher than `NAME_FAILURES`."""
WINDOW_S = 300
"""The moving window failures are counted in (seconds); a name waits at most this long."""
SESSION_HOURS = 12.0
"""How long a login lasts (hours) by default: a school day, so a session left open on a shared computer
does not last into the next one."""


class LoginThrottle:
    """Failed logins counted per name and per address (see the module docstring).

    Args:
        name_failures, address_failures: failures allowed within `window_s` seconds (each >= 1).

    Raises:
        ConfigError: a count or the window below 1.
    """

    def __init__(self, name_failures: int = NAME_FAILURES, address_failures: int = ADDRESS_FAILURES,
                 window_s: int = WINDOW_S):
        from limits import RateLimitItemPerSecond, storage, strategies

        if min(name_failures, address_failures, window_s) < 1:
            raise ConfigError(f"Login throttling needs counts and a window of at least 1, got {name_failures}, "
                              f"{address_failures} and {window_s} s.")
        self._limits = {"name": RateLimitItemPerSecond(name_failures, window_s),
                        "address": RateLimitItemPerSecond(address_failures, window_s)}
        self._limiter = strategies.MovingWindowRateLimiter(storage.MemoryStorage())

    def refusal(self, name: str, address: str) -> str | None:
        """Why a login of `name` from `address` is refused now without a password check, or None.

        The message says which (the name or the address), how many failures and how long to wait (s)."""
        for kind, key in (("name", name), ("address", address)):
            item = self._limits[kind]
            if not self._limiter.test(item, kind, key):
                wait_s = max(1, int(self._limiter.get_window_stats(item, kind, key).reset_time - time.time()) + 1)
                who = name if kind == "name" else "this computer's address"
                return (f"Too many wrong passwords for {who} ({item.amount} within {item.multiples // 60} min): "
                        f"try again in {wait_s} s.")
        return None

    def failed(self, name: str, address: str) -> int:
        """Count one wrong password of `name` from `address`; returns how many tries the name has left."""
        self._limiter.hit(self._limits["name"], "name", name)
        self._limiter.hit(self._limits["address"], "address", address)
        return self._limiter.get_window_stats(self._limits["name"], "name", name).remaining

    def succeeded(self, name: str) -> None:
        """A right password: the name's failures are forgotten (the address's stay counted)."""
        self._limiter.clear(self._limits["name"], "name", name)


@dataclass(frozen=True)
class Session:
    """One login: who, when (unix seconds), and the account's password hash then."""

    name: str
    issued_at: float
    password_hash: str


class Sessions:
    """The sessions of one page (`page`: `STUDIO` or `PRACTICE`), keyed by the session token.

    Args:
        book: the accounts now (`AccountBook`).
        page: which page the sessions open.
        max_age_s: how long a session lasts (seconds, > 0).

    Raises:
        ConfigError: `max_age_s` not above 0.
    """

    def __init__(self, book: AccountBook, page: str, max_age_s: float = SESSION_HOURS * 3600):
        if not max_age_s > 0:
            raise ConfigError(f"A session must last more than 0 s, got {max_age_s}; e.g. --session-hours 12.")
        self.book, self.page, self.max_age_s = book, page, float(max_age_s)
        self._sessions: dict[str, Session] = {}
        self._guard = threading.Lock()

    def issue(self, token: str, name: str) -> None:
        """Record a login of `name` under `token` (now, with the account's current password hash)."""
        entry = self.book.entry(name) or {}
        with self._guard:
            self._sessions[token] = Session(name, time.time(), str(entry.get("password", "")))

    def still_valid(self, token: str) -> str | None:
        """The name of `token`'s session while it is valid; None (and the session forgotten) when it is
        unknown, older than `max_age_s`, or its account was removed, given a new password or a role that
        no longer opens this page."""
        with self._guard:
            session = self._sessions.get(token)
        if session is None:
            return None
        entry = self.book.entry(session.name)
        valid = (time.time() - session.issued_at < self.max_age_s and entry is not None
                 and entry.get("password") == session.password_hash and role_opens(entry.get("role"), self.page))
        if not valid:
            self.end(token)
            return None
        return session.name

    def end(self, token: str) -> None:
        """Forget `token`'s session (log-out, expiry)."""
        with self._guard:
            self._sessions.pop(token, None)

    def end_user(self, name: str) -> None:
        """Forget every session of `name` (log-out from every device)."""
        with self._guard:
            for token in [t for t, s in self._sessions.items() if s.name == name]:
                del self._sessions[token]
