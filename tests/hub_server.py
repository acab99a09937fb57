"""A Hugging Face hub on 127.0.0.1, for the download tests: the tiny model served in the hub's protocol,
gated by a token, with the faults a real download meets.

What huggingface_hub 2.4.0 asks for (read in its source, and checked in `FakeHub.requests` by the tests):
- `GET /api/whoami-v2` (`login`): 200 with the account for a known token, else 401;
- `GET /api/models/ID[/revision/REV]` (`model_info`, `?blobs=true` for sizes and hashes): `sha`, `gated`,
  `siblings` with `size`, `blobId` and `lfs` {`sha256`, `size`, `pointerSize`};
- `GET /api/models/ID/tree/REV?recursive=...` (`list_repo_tree`, in `snapshot_download`): one entry per
  file, `oid` (the git blob id), `size`, `lfs` {`oid` = sha256, `size`, `pointerSize`};
- `HEAD` and `GET /ID/resolve/REV/FILE` (`get_hf_file_metadata`, `http_get`): `X-Repo-Commit`, `ETag` (the
  sha256 of an LFS file, else the git blob id), `X-Linked-Etag` and `X-Linked-Size` for LFS files,
  `Content-Length`, and `Range: bytes=N-` answered 206 with `Content-Range`.
A gated repo answers `resolve` 401 without a known token and 403 to a token whose account has not
accepted the licence, both with `X-Error-Code: GatedRepo` and the hub's own `X-Error-Message` wording; its
model info and file list stay public, as on the hub.

Faults a test sets on the server (each applies to the next GET of that file, then clears):
`truncate_once` (the connection closes halfway through the body), `corrupt_once` (the body of the right
length with one byte flipped; `corrupt_always`: every time); `throttle_bytes_per_s` slows every body (read
at each piece, so a test may change it mid-body), so a download can be watched, cancelled and resumed.

Faults of every kind, at any endpoint (`FakeHub.faults`: endpoint -> fault, kept until the test removes it,
since huggingface_hub retries some requests): the endpoints are `ENDPOINTS` (`whoami`, `info`, `tree`,
`head` and `get` of a file, `resume`: a GET with a `Range`), the faults `FAULTS`:
- `status:NNN`: that HTTP status, with a JSON error body but no `X-Error-Code` (a proxy's or mirror's answer);
- `html`: 200 with a web page (a captive portal's sign-in page; for a HEAD, no ETag and no commit);
- `json-list`, `json-empty`, `json-cut`: 200 with JSON of the wrong shape (`["unexpected"]`, `{}`) or cut short;
- `drop`: the connection closes before any answer; `stall`: no answer for `stall_s` seconds, then it closes;
- `ignore-range` (`resume` only): 200 with the whole file to a `Range` request, as some CDNs answer.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

GOOD_TOKEN = "hf_teacher_accepted_licence_0123456789"
"""A token whose account accepted the licence of every gated repo served."""
NO_LICENCE_TOKEN = "hf_teacher_without_licence_0123456789"
"""A valid token whose account has not accepted any licence."""
SERVED_MODEL = "google/gemma-3n-E2B-it"
"""The id the tiny model is served under: the app's default model, gated like the real one."""
OPEN_MODEL = "tutor-tests/tiny-open"
"""The same tiny model served under an id that is not gated (no token needed)."""
LFS_SUFFIXES = (".safetensors", ".bin", ".model", ".gguf")
"""Files stored with Git LFS on the hub (sha256 ETag, `lfs` metadata); the rest are plain git blobs."""


ENDPOINTS = ("whoami", "info", "tree", "head", "get", "resume")
"""Where a fault can be set (`FakeHub.faults`): the login check, the model's information (and its licence: the
`gated` field), the file listing, a file's metadata (HEAD), its bytes (GET), and a resumed GET (with `Range`)."""
FAULTS = ("status:204", "status:302", "status:400", "status:404", "status:410", "status:418", "status:429",
          "status:500", "status:503", "html", "json-list", "json-empty", "json-cut", "drop", "stall")
"""Every kind of fault each endpoint is tested with (see the module docstring); `ignore-range` is `resume`'s own."""
CAPTIVE_PORTAL = b"<!DOCTYPE html><html><body><h1>Sign in to the school network</h1></body></html>"


def git_blob_id(data: bytes) -> str:
    """The git object id of a file's bytes: sha1 of `blob <size>\\0` + the bytes (what the hub lists as `oid`)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


@dataclass
class ServedFile:
    path: str
    data: bytes
    lfs: bool

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @functools.cached_property
    def etag(self) -> str:
        return self.sha256 if self.lfs else git_blob_id(self.data)


@dataclass
class Repo:
    repo_id: str
    gated: bool
    files: dict[str, ServedFile]
    commit: str = ""

    def __post_init__(self):
        digest = hashlib.sha1("".join(f"{p}:{f.etag}" for p, f in sorted(self.files.items())).encode())
        self.commit = digest.hexdigest()


@dataclass
class FakeHub:
    """The server's state: its repos, tokens, faults and the log of what was asked (see the module docstring)."""

    repos: dict[str, Repo]
    tokens: dict[str, bool] = field(default_factory=lambda: {GOOD_TOKEN: True, NO_LICENCE_TOKEN: False})
    """token -> whether its account accepted the licences of the gated repos."""
    throttle_bytes_per_s: float | None = None
    truncate_once: set[str] = field(default_factory=set)
    corrupt_once: set[str] = field(default_factory=set)
    corrupt_always: set[str] = field(default_factory=set)
    faults: dict[str, str] = field(default_factory=dict)
    """endpoint (`ENDPOINTS`) -> fault (`FAULTS`, or `ignore-range`), answered to every request there until removed."""
    stall_s: float = 2.0
    """Seconds a `stall` fault keeps the request waiting before it closes the connection."""
    requests: list[dict] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def gets(self, filename: str) -> list[dict]:
        """The logged GETs of `resolve` for `filename`, in order (each with its `range` header or None)."""
        return [r for r in self.requests if r["method"] == "GET" and r["path"].endswith("/" + filename)
                and "/resolve/" in r["path"]]

    def env(self, hf_home: Path) -> dict[str, str]:
        """Environment variables that point huggingface_hub (in a child process) at this server, online, with
        its token and cache in `hf_home`."""
        return {"HF_ENDPOINT": self.url, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_HOME": str(hf_home),
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"}


def hub_online(monkeypatch, home: Path) -> None:
    """huggingface_hub in this process online (the suite runs with HF_HUB_OFFLINE=1), its cache and token file in
    `home` (no saved token, no `HF_TOKEN`): what every test that talks to a `FakeHub` starts from."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))


def repo_from_folder(repo_id: str, folder: Path, *, gated: bool) -> Repo:
    """A repo serving every file of `folder` (its top level, as `make-tiny-model` writes it)."""
    files = {p.name: ServedFile(p.name, p.read_bytes(), p.suffix in LFS_SUFFIXES)
             for p in sorted(Path(folder).iterdir()) if p.is_file()}
    return Repo(repo_id, gated, files)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub  # set on the subclass made per server

    def log_message(self, *args) -> None:  # the tests read `FakeHub.requests` instead of stderr
        pass

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:] if auth.lower().startswith("bearer ") else None

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, content_type: str = "application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None):
        self._send(status, json.dumps(obj).encode(), headers)

    def _error(self, status: int, code: str, message: str):
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def do_HEAD(self):
        self._route()

    def do_GET(self):
        self._route()

    def _route(self):
        hub = self.hub
        path = unquote(urlsplit(self.path).path)
        with hub.lock:
            hub.requests.append({"method": self.command, "path": path, "range": self.headers.get("Range"),
                                 "auth": self._token() is not None})
        try:
            fault = hub.faults.get(self._endpoint(path))
            if fault is not None and fault != "ignore-range":
                return self._fault(fault)
            if path == "/api/whoami-v2":
                return self._whoami()
            match = re.fullmatch(r"/api/models/(.+?)/tree/([^/]+)(?:/.*)?", path)
            if match:
                return self._tree(match.group(1))
            match = re.fullmatch(r"/api/models/(.+?)(?:/revision/([^/]+))?", path)
            if match:
                return self._info(match.group(1))
            match = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
            if match:
                return self._resolve(match.group(1), match.group(3))
            self._error(404, "NotFound", f"no route {path}")
        except (BrokenPipeError, ConnectionResetError):  # the client went away (a cancelled download)
            self.close_connection = True

    def _endpoint(self, path: str) -> str | None:
        """Which of `ENDPOINTS` `path` is (None for an unknown route)."""
        if path == "/api/whoami-v2":
            return "whoami"
        if re.fullmatch(r"/api/models/(.+?)/tree/([^/]+)(?:/.*)?", path):
            return "tree"
        if path.startswith("/api/models/"):
            return "info"
        if "/resolve/" in path:
            return "head" if self.command == "HEAD" else "resume" if self.headers.get("Range") else "get"
        return None

    def _fault(self, fault: str):
        """Answer with `fault` (see the module docstring) instead of the hub's answer."""
        if fault in ("drop", "stall"):
            if fault == "stall":
                time.sleep(self.hub.stall_s)
            self.close_connection = True
            self.connection.shutdown(2)  # closed with nothing written: the client sees the connection end
            return
        if fault.startswith("status:"):
            status = int(fault.split(":", 1)[1])
            body = b"" if status in (204, 304) else json.dumps({"error": f"HTTP {status} from a proxy"}).encode()
            return self._send(status, body)
        bodies = {"html": CAPTIVE_PORTAL, "json-list": b'["unexpected"]', "json-empty": b"{}",
                  "json-cut": b'{"id": "google/gemma-3n-E2B-it", "sha": "0123'}
        self._send(200, bodies[fault], content_type="text/html" if fault == "html" else "application/json")

    def _repo(self, repo_id: str) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def _whoami(self):
        token = self._token()
        if token not in self.hub.tokens:
            return self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
        self._json(200, {"type": "user", "id": "1", "name": "teacher", "fullname": "A Teacher",
                         "auth": {"type": "access_token", "accessToken": {"displayName": "tutor-test", "role": "read"}}})

    def _info(self, repo_id: str):
        repo = self._repo(repo_id)
        if repo is None:
            return
        siblings = [{"rfilename": f.path, "size": len(f.data), "blobId": git_blob_id(f.data),
                     **({"lfs": {"sha256": f.sha256, "size": len(f.data), "pointerSize": 134}} if f.lfs else {})}
                    for f in repo.files.values()]
        self._json(200, {"_id": "0", "id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit, "private": False,
                         "gated": "manual" if repo.gated else False, "disabled": False, "downloads": 0, "likes": 0,
                         "tags": [], "library_name": "transformers", "siblings": siblings,
                         "usedStorage": sum(len(f.data) for f in repo.files.values())})

    def _tree(self, repo_id: str):
        repo = self._repo(repo_id)
        if repo is None:
            return
        self._json(200, [{"type": "file", "oid": git_blob_id(f.data), "size": len(f.data), "path": f.path,
                          **({"lfs": {"oid": f.sha256, "size": len(f.data), "pointerSize": 134}} if f.lfs else {})}
                         for f in repo.files.values()])

    def _resolve(self, repo_id: str, filename: str):
        hub = self.hub
        repo = self._repo(repo_id)
        if repo is None:
            return
        if repo.gated:
            token = self._token()
            if token not in hub.tokens:
                return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access "
                                   "to it and be authenticated to access it. Please log in.")
            if not hub.tokens[token]:
                return self._error(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the "
                                   f"authorized list. Visit https://huggingface.co/{repo_id} to ask for access.")
        served = repo.files.get(filename)
        if served is None:
            return self._error(404, "EntryNotFound", f"{filename} does not exist on main")
        data, size = served.data, len(served.data)
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{served.etag}"', "Accept-Ranges": "bytes"}
        if served.lfs:
            headers.update({"X-Linked-Etag": f'"{served.sha256}"', "X-Linked-Size": str(size)})
        if self.command == "HEAD":
            return self._head(headers, size)
        start = 0
        wanted = self.headers.get("Range")
        if wanted and hub.faults.get("resume") != "ignore-range":
            start = int(re.fullmatch(r"bytes=(\d+)-", wanted.strip()).group(1))
        with hub.lock:
            truncate = filename in hub.truncate_once
            corrupt = filename in hub.corrupt_once or filename in hub.corrupt_always
            hub.truncate_once.discard(filename)
            hub.corrupt_once.discard(filename)
        body = data[start:]
        if corrupt and body:
            body = bytes([body[0] ^ 0xFF]) + body[1:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Type", "application/octet-stream")
        for name, value in headers.items():
            self.send_header(name, value)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if truncate:  # half the body, then the connection closes: the client sees a short read
            body = body[: len(body) // 2]
            self.close_connection = True
        self._write_slowly(body)

    def _head(self, headers: dict, size: int):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(size))
        self.end_headers()

    def _write_slowly(self, body: bytes):
        piece = 64 * 1024
        for offset in range(0, len(body), piece):
            self.wfile.write(body[offset:offset + piece])
            rate = self.hub.throttle_bytes_per_s  # read each time: a test may change it mid-body
            if rate:
                time.sleep(piece / rate)
        self.wfile.flush()


@pytest.fixture()
def fake_hub(tiny_model_dir):
    """A `FakeHub` serving the tiny model as the gated `SERVED_MODEL` and the open `OPEN_MODEL` on a free
    port of 127.0.0.1; its `url` is set. Stopped at teardown whatever the outcome."""
    with serving(tiny_model_dir) as hub:
        yield hub


@contextlib.contextmanager
def serving(tiny_model_dir: Path):
    """`fake_hub`'s server, for a fixture of another scope (a module's tests that reset `faults` and `requests`)."""
    hub = FakeHub({SERVED_MODEL: repo_from_folder(SERVED_MODEL, tiny_model_dir, gated=True),
                   OPEN_MODEL: repo_from_folder(OPEN_MODEL, tiny_model_dir, gated=False)})
    handler = type("Handler", (_Handler,), {"hub": hub})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
