"""The door of each page (the studio, the practice page): login, log-out, sessions and which files it serves.

An ASGI middleware (`LoginGuard`) in front of a Gradio page, given to `launch` through `app_kwargs`
(`guard_kwargs`). Gradio keeps doing what it does (its `auth` check on every route, its session
tokens, `/logout`); the guard adds what a classroom needs (`pipeline.access.logins`):

- `POST /login` is answered here: each login waits its turn to hash (`HASHING_THREADS` at once), then
  the throttle (a refused login costs no hash; logins sent together meet the failures before them),
  then the scrypt check in a worker thread (`anyio.to_thread`), never on the event loop; a right password opens the session as Gradio's own login does (its token and cookies) and
  records it in `Sessions`. A student's right password at the studio is answered with where their
  practice page is (403), not "incorrect credentials".
- Every request's session is checked: an expired one, or one whose account was removed or given a new
  password, is dropped from Gradio's tokens before Gradio sees the request, so it counts at once.
- `GET /` without a session is this module's login page (`login_page_html`): it shows the server's
  message (wrong password, wait N s, where the practice page is, the session ended), which Gradio's
  own login form cannot.
- `GET /logout` (Gradio's) also ends the guard's sessions of that person.
- The practice page serves a file (`/gradio_api/file=...`) only to the person who uploaded it
  (`OwnFiles`), never another student's recording or a file the studio's users uploaded.

It deliberately decides nothing about who may log in: `pipeline.access.accounts` does.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

from pipeline.access.accounts import PRACTICE, STUDIO, AccountBook, role_opens
from pipeline.access.logins import LoginThrottle, Sessions

HASHING_THREADS = 1
"""scrypt checks running at once (worker threads); more logins wait their turn without holding the event
loop or the threads Gradio's handlers run in, and leave the other cores to the tutor's answers. One check
is ~50 ms and 16 MiB (`pipeline.access.accounts`): a class of 30 logging in at once waits ~1.5 s at most."""
FILE_ROUTES = ("/gradio_api/file=", "/gradio_api/file/", "/file=", "/file/")
"""Gradio's routes that serve a file by its path."""
UPLOAD_ROUTES = ("/gradio_api/upload", "/upload")
"""Gradio's upload route (its answer lists the stored paths)."""


@dataclass(frozen=True)
class Refused:
    """A login refused by the throttle before its password was checked; `message` says why and how long to wait."""

    message: str


class OwnFiles:
    """Which uploaded files belong to whom, so a page serves a file only to its uploader (thread-safe)."""

    def __init__(self):
        self._owned: dict[str, set[str]] = {}
        self._guard = threading.Lock()

    def add(self, owner: str, paths: list[str]) -> None:
        """Record `paths` (as Gradio returned them) as uploaded by `owner`."""
        with self._guard:
            self._owned.setdefault(owner, set()).update(os.path.abspath(p) for p in paths)

    def owns(self, owner: str, path: str) -> bool:
        """Whether `owner` uploaded the file at `path`."""
        with self._guard:
            return os.path.abspath(path) in self._owned.get(owner, set())

    def forget(self, path: str) -> None:
        """The file at `path` is gone (deleted after its answer): nobody owns it any more."""
        path = os.path.abspath(path)
        with self._guard:
            for paths in self._owned.values():
                paths.discard(path)


@dataclass
class PageGate:
    """What one page's guard needs.

    Attributes:
        page: `STUDIO` or `PRACTICE`.
        book: the accounts now (None or empty: this computer only, no login).
        sessions: this page's sessions (made from `book` and `session_hours` when None).
        throttle: failed logins (shared by both pages: a name guessed on one is throttled on the other).
        practice_url: where the practice page is (the studio tells students); a callable, as it is known
            only once that page runs.
        own_files: the practice page's uploads by owner (None: files are not restricted, the studio).
        note: the line above the login form (`note_for()`, when given, makes it when the page is asked for).
    """

    page: str
    book: AccountBook | None
    throttle: LoginThrottle
    sessions: Sessions | None = None
    practice_url: Callable[[], str | None] = lambda: None
    own_files: OwnFiles | None = None
    note: str = ""
    note_for: Callable[[], str] | None = None
    session_hours: float = 12.0
    hashing: Any = field(default=None, repr=False)

    def __post_init__(self):
        if self.sessions is None and self.book is not None:
            self.sessions = Sessions(self.book, self.page, self.session_hours * 3600)

    @property
    def logins(self) -> bool:
        """Whether this page asks for a login (there are accounts)."""
        return bool(self.book)

    async def check_password(self, name: str, password: str, address: str | None = None) -> str | None | Refused:
        """The role of `name` when `password` is right, else None (scrypt in a worker thread, `HASHING_THREADS`
        at once). With `address`, the throttle is asked once this login's turn to hash has come, so logins
        sent together are refused as soon as the failures before them add up: `Refused(message)`."""
        import anyio

        if self.hashing is None:
            self.hashing = anyio.CapacityLimiter(HASHING_THREADS)
        async with self.hashing:
            refusal = self.throttle.refusal(name, address) if address is not None else None
            if refusal:
                return Refused(refusal)
            return await anyio.to_thread.run_sync(self.book.role, name, password)

    async def gradio_auth(self, name: str, password: str) -> bool:
        """Gradio's `auth=` callable (async: Gradio awaits it off its own thread). The guard answers `/login`
        itself; this only backs Gradio's check should a login reach it."""
        return role_opens(await self.check_password(name, password), self.page)


def _json(send_body: dict, status: int, headers: list | None = None):
    from starlette.responses import JSONResponse

    return JSONResponse(send_body, status_code=status, headers=dict(headers or []))


class LoginGuard:
    """The ASGI middleware (see the module docstring). `gate` says which page it guards and how."""

    def __init__(self, app, gate: PageGate):
        self.app = app
        self.gate = gate

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        from starlette.requests import HTTPConnection

        gradio = scope.get("app")
        connection = HTTPConnection(scope)
        token, user, ended = self._session(connection, gradio)
        path, method = scope["path"], scope.get("method", "GET")
        if scope["type"] == "http" and self.gate.logins:
            if method == "POST" and path.rstrip("/") == "/login":
                response = await self._login(scope, receive, gradio)
                return await response(scope, receive, send)
            if method == "GET" and path.rstrip("/") == "/logout" and user:
                self.gate.sessions.end_user(user)
            if method == "GET" and path in ("", "/") and user is None:
                from starlette.responses import HTMLResponse

                notice = "Your session ended; log in again." if ended else ""
                note = self.gate.note_for() if self.gate.note_for else self.gate.note
                page = login_page_html(self.gate.page, note, notice)
                return await HTMLResponse(page)(scope, receive, send)
        if scope["type"] == "http" and self.gate.own_files is not None:
            owner = user or "(this computer)"
            served = next((path[len(route):] for route in FILE_ROUTES if path.startswith(route)), None)
            if served is not None and not self.gate.own_files.owns(owner, _unquote(served)):
                return await _json({"detail": "Not found."}, 404)(scope, receive, send)
            if method == "POST" and path.rstrip("/") in UPLOAD_ROUTES:
                return await self.app(scope, receive, self._recording_uploads(send, owner))
        return await self.app(scope, receive, send)

    def _session(self, connection, gradio) -> tuple[str | None, str | None, bool]:
        """(token, user, ended): the request's session token, its person while valid, and whether a session
        it carried has ended (expired or revoked: it is dropped from Gradio's tokens here)."""
        if gradio is None or not self.gate.logins:
            return None, None, False
        cookie_id = getattr(gradio, "cookie_id", "")
        token = (connection.cookies.get(f"access-token-{cookie_id}")
                 or connection.cookies.get(f"access-token-unsecure-{cookie_id}"))
        if not token:
            return None, None, False
        user = self.gate.sessions.still_valid(token)
        if user is None:  # expired, revoked, or issued before a restart: Gradio must not honour it either
            gradio.tokens.pop(token, None)
            return token, None, True
        return token, user, False

    async def _login(self, scope, receive, gradio):
        """`POST /login` (username, password as a form): throttle, check off the event loop, open a session."""
        from starlette.requests import Request

        request = Request(scope, receive)
        form = await request.form()
        name, password = str(form.get("username") or "").strip(), str(form.get("password") or "")
        address = request.client.host if request.client else "unknown"
        throttle = self.gate.throttle
        role = await self.gate.check_password(name, password, address)
        if isinstance(role, Refused):
            return _json({"detail": role.message}, 429, [("Retry-After", "60")])
        if role_opens(role, self.gate.page):
            throttle.succeeded(name)
            return self._open_session(gradio, name)
        if role is not None:  # the right password, the wrong page: a student at the studio
            throttle.succeeded(name)
            where = self.gate.practice_url()
            return _json({"detail": f"{name} is a student account, and the studio is for teachers. "
                                    + (f"Your practice page is {where}" if where else
                                       "Ask your teacher for the practice page's address.")}, 403)
        left = throttle.failed(name, address)
        warning = (" This name now waits a few minutes before it may try again." if left <= 0 else
                   f" {left} more wrong {'try' if left == 1 else 'tries'} and this name waits a few minutes."
                   if left <= 2 else "")
        return _json({"detail": "Wrong name or password." + warning}, 400)

    def _open_session(self, gradio, name: str):
        """A session for `name`, opened as Gradio's own `/login` does (gradio 6.31 `routes.py`: a token in
        `App.tokens` and the two `access-token` cookies), and recorded in `Sessions`."""
        token = secrets.token_urlsafe(16)
        gradio.tokens[token] = name
        self.gate.sessions.issue(token, name)
        response = _json({"success": True}, 200)
        response.set_cookie(key=f"access-token-{gradio.cookie_id}", value=token, httponly=True, samesite="none",
                            secure=True)
        response.set_cookie(key=f"access-token-unsecure-{gradio.cookie_id}", value=token, httponly=True)
        return response

    def _recording_uploads(self, send, owner: str):
        """`send` that also reads an upload's answer (the JSON list of stored paths) into `own_files`."""
        chunks: list[bytes] = []
        state = {"status": 0}

        async def wrapped(message):
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
            elif message["type"] == "http.response.body" and state["status"] == 200:
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    try:
                        paths = json.loads(b"".join(chunks))
                    except ValueError:
                        paths = []
                    if isinstance(paths, list):
                        self.gate.own_files.add(owner, [str(p) for p in paths])
            await send(message)

        return wrapped


def _unquote(text: str) -> str:
    from urllib.parse import unquote

    return unquote(text.split("?", 1)[0])


def guard_kwargs(gate: PageGate) -> dict:
    """`launch(**...)` arguments that put `LoginGuard(gate)` in front of the page (and Gradio's `auth` check
    on every route when there are accounts)."""
    from starlette.middleware import Middleware

    kwargs: dict[str, Any] = {"app_kwargs": {"middleware": [Middleware(LoginGuard, gate=gate)]}}
    if gate.logins:
        kwargs["auth"] = gate.gradio_auth
    return kwargs


def page_gates(book: AccountBook, *, practice_url: Callable[[], str | None], session_hours: float) -> SimpleNamespace:
    """The studio's and the practice page's gates, sharing one `LoginThrottle` (a name guessed on one page is
    throttled on both). `practice_url()` is where the studio sends students; `session_hours` how long a
    login lasts. Returns `SimpleNamespace(studio=PageGate, practice=PageGate)`.

    Raises:
        ConfigError: `session_hours` not above 0.
    """
    from pipeline.errors import ConfigError

    if not session_hours > 0:
        raise ConfigError(f"`--session-hours` must be above 0, got {session_hours:g}; 12 is the default.")
    book = book if book else None
    throttle = LoginThrottle()

    def studio_note() -> str:
        where = practice_url()
        return "The studio is for teachers: log in with a teacher's account." + (
            f" Students: your practice page is {where}" if where else "")

    studio = PageGate(STUDIO, book, throttle, practice_url=practice_url, session_hours=session_hours)
    studio.note_for = studio_note
    practice = PageGate(PRACTICE, book, throttle, own_files=OwnFiles(), session_hours=session_hours,
                        note="Students: log in with the account your teacher gave you.")
    return SimpleNamespace(studio=studio, practice=practice)


_PAGE_TITLES = {STUDIO: "Pronunciation Tutor Studio", PRACTICE: "Pronunciation practice"}


def login_page_html(page: str, note: str, notice: str = "") -> str:
    """The login page of `page` (`STUDIO` or `PRACTICE`): `note` above the form, `notice` in its message line
    (e.g. the session ended), and what the server answers a login shown there. Plain HTML, no Gradio."""
    title = html.escape(_PAGE_TITLES.get(page, "Log in"))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}: log in</title>
<style>
body {{ font-family: system-ui, sans-serif; background: #f6f7fb; margin: 0; }}
main {{ max-width: 26rem; margin: 8vh auto; background: #fff; padding: 1.5rem 1.75rem; border-radius: 12px;
        box-shadow: 0 2px 12px #0001; }}
label {{ display: block; margin-top: .9rem; font-weight: 600; }}
input {{ width: 100%; box-sizing: border-box; padding: .6rem; margin-top: .3rem; font-size: 1rem;
         border: 1px solid #bbb; border-radius: 8px; }}
button {{ margin-top: 1.2rem; width: 100%; padding: .7rem; font-size: 1rem; border: 0; border-radius: 8px;
          background: #4f46e5; color: #fff; cursor: pointer; }}
#login-message {{ min-height: 1.4em; margin-top: 1rem; color: #b91c1c; overflow-wrap: anywhere; }}
</style></head>
<body><main>
<h1>{title}</h1>
<p id="login-note">{html.escape(note)}</p>
<form id="login-form">
<label for="username">username</label><input id="username" name="username" autocomplete="username" required>
<label for="password">password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Login</button>
</form>
<p id="login-message" role="alert">{html.escape(notice)}</p>
</main>
<script>
document.getElementById("login-form").addEventListener("submit", async (event) => {{
  event.preventDefault();
  const message = document.getElementById("login-message");
  message.textContent = "Checking…";
  try {{
    const answer = await fetch("login", {{method: "POST", body: new FormData(event.target)}});
    if (answer.ok) {{ location.reload(); return; }}
    const body = await answer.json().catch(() => ({{}}));
    message.textContent = body.detail || ("The server refused the login (" + answer.status + ").");
    document.getElementById("password").value = "";
  }} catch (error) {{ message.textContent = "The server cannot be reached: " + error; }}
}});
</script></body></html>"""
