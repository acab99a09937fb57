"""`python -m pipeline serve`: the tuned tutor behind an OpenAI-compatible API.

    python -m pipeline serve --workspace WS --run NAME [--run NAME2] [--model BASE] [--host 127.0.0.1]
        [--port 8000] [--api-key-file FILE] [--queue-size 8] [--max-batch 8] [--max-body-mb 25] [--max-clips 8]
        [--max-audio-seconds 120] [--max-text-chars 8000] [--device ...] [--quantization ...] [--json]

Binds the address first (a port in use fails at once, not after loading), loads the runs
(`pipeline.serving.models.load_served`), prints the address and the served names (one JSON line with
`--json`), and serves until Ctrl+C / SIGTERM. The key is the first line of `--api-key-file`, or
`$TUTOR_API_KEY`, or `--api-key KEY` (taken, with a warning: every user of the computer sees a command
line in `ps`); a key given is never printed. Without one a key is generated (`secrets.token_urlsafe`,
32 characters) and printed, once. It listens on this computer only
(127.0.0.1) unless `--host` says otherwise; beyond loopback every request still needs the key, but
the traffic is plain HTTP: put an HTTPS proxy in front of it.

Bounds, each a setting with a safe default: `--max-batch` answers generated together per loaded model
(1: one at a time), `--queue-size` requests waiting beyond them (more: 429), `--max-body-mb` per
request body (413), and per request `--max-clips`, `--max-audio-seconds` and `--max-text-chars`
(400; `pipeline.serving.protocol.RequestLimits`).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import secrets
import socket
from pathlib import Path

from pipeline.errors import ConfigError
from pipeline.serving.models import DEFAULT_QUEUE_SIZE
from pipeline.serving.protocol import DEFAULT_MAX_AUDIO_S, DEFAULT_MAX_CLIPS, DEFAULT_MAX_TEXT_CHARS
from pipeline.workspace import DEFAULT_WORKSPACE

DEFAULT_MAX_BODY_MB = 25.0
"""Largest request body, in MB (10^6 bytes): OpenAI's own audio upload limit is 25 MB."""


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port` (`port` 0: a free one), listening.

    Raises ConfigError when the address cannot be bound (in use, not this machine's), naming it and the fix.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as error:
        raise ConfigError(f"`--host {host}` is not an address of this computer ({error}); use 127.0.0.1 "
                          "(this computer only) or 0.0.0.0 (your network).") from None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as error:
        sock.close()
        raise ConfigError(f"Cannot listen on {host}:{port} ({error.strerror or error}); the port may be in use: "
                          "pick another `--port` (0 picks a free one).") from None
    return sock


def is_loopback(host: str) -> bool:
    """True when `host` resolves only to loopback addresses (127.0.0.0/8, ::1)."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
        return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)
    except (OSError, ValueError):
        return False


API_KEY_ENV = "TUTOR_API_KEY"
"""The API key from the environment (kept out of the command line, which `ps` shows)."""
MIN_API_KEY_CHARS = 8
"""The shortest key taken (characters): a generated key has 32."""


def given_api_key(key_file: Path | None, argument: str | None, environ: dict | None = None) -> tuple[str | None, str]:
    """(key, where it came from) of the key a person gave: `--api-key-file` (its first line), else
    `$TUTOR_API_KEY`, else `--api-key` (a warning on stderr: `ps` shows it); (None, "generated") when none.

    Raises:
        ConfigError: the file cannot be read or is empty, or a key shorter than `MIN_API_KEY_CHARS`.
    """
    import os
    import sys

    environ = os.environ if environ is None else environ
    if key_file is not None:
        try:
            key, source = key_file.read_text(encoding="utf-8").split("\n", 1)[0].strip(), f"the file {key_file}"
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"`--api-key-file {key_file}` cannot be read ({error}); give a text file whose first "
                              "line is the key.") from None
    elif environ.get(API_KEY_ENV):
        key, source = environ[API_KEY_ENV].strip(), f"${API_KEY_ENV}"
    elif argument is not None:
        print(f"warning: `--api-key` shows the key to every user of this computer (`ps`); put it in ${API_KEY_ENV} "
              "or a file given with --api-key-file.", file=sys.stderr)
        key, source = argument.strip(), "--api-key"
    else:
        return None, "generated"
    if len(key) < MIN_API_KEY_CHARS:
        raise ConfigError(f"The API key from {source} has {len(key)} characters; it must be at least "
                          f"{MIN_API_KEY_CHARS} (leave it out to have a random one generated).")
    return key, source


def serve_main(argv: list[str] | None = None) -> int:
    """`python -m pipeline serve ...` (see the module docstring); returns 0 when stopped."""
    parser = argparse.ArgumentParser(prog="python -m pipeline serve",
                                     description="Serve trained runs behind an OpenAI-compatible API "
                                                 "(POST /v1/chat/completions with input_audio, GET /v1/models).")
    parser.add_argument("--workspace", type=Path, default=DEFAULT_WORKSPACE, help=f"workspace folder (default: {DEFAULT_WORKSPACE})")
    parser.add_argument("--run", action="append", default=[], help="a trained run to serve, named by its run name; repeat for several")
    parser.add_argument("--model", default=None, help="the base model served as `base` (default: the first run's base)")
    parser.add_argument("--scorer", action="store_true",
                        help="also serve the Classical scorer (no fine-tuning) as `classical-scorer` (needs no run)")
    parser.add_argument("--device", choices=("auto", "cuda", "mps", "cpu"), default=None, help="default: each run's own")
    parser.add_argument("--quantization", choices=("4bit", "8bit", "none"), default=None, help="default: each run's own")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this computer only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--api-key-file", type=Path, default=None,
                        help="a file whose first line is the key clients send as `Authorization: Bearer KEY` "
                             f"(or ${API_KEY_ENV}; default: a new random key, printed at start)")
    parser.add_argument("--api-key", default=None, help=argparse.SUPPRESS)  # taken, with a warning (`ps` shows it)
    parser.add_argument("--queue-size", type=int, default=DEFAULT_QUEUE_SIZE,
                        help=f"answers that may wait per loaded model; more get HTTP 429 (default {DEFAULT_QUEUE_SIZE})")
    parser.add_argument("--max-batch", type=int, default=None,
                        help="answers generated together per loaded model (default 8, or TUTOR_MAX_BATCH; 1: one at a time)")
    parser.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB,
                        help=f"largest request body in MB; larger get HTTP 413 (default {DEFAULT_MAX_BODY_MB:g})")
    parser.add_argument("--max-clips", type=int, default=DEFAULT_MAX_CLIPS,
                        help=f"clips one request may hold; more get HTTP 400 (default {DEFAULT_MAX_CLIPS})")
    parser.add_argument("--max-audio-seconds", type=float, default=DEFAULT_MAX_AUDIO_S,
                        help=f"seconds of audio one request may hold in all; more get HTTP 400 (default {DEFAULT_MAX_AUDIO_S:g})")
    parser.add_argument("--max-text-chars", type=int, default=DEFAULT_MAX_TEXT_CHARS,
                        help=f"characters of text one request may hold; more get HTTP 400 (default {DEFAULT_MAX_TEXT_CHARS})")
    parser.add_argument("--json", action="store_true", help="print the ready line as one JSON object")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"`--port` must be 0-65535, got {args.port}; 8000 is the usual choice (0 picks a free one).")
    if args.queue_size < 1:
        raise ConfigError(f"`--queue-size` must be >= 1, got {args.queue_size}.")
    if args.max_batch is not None and args.max_batch < 1:
        raise ConfigError(f"`--max-batch` must be >= 1 (1 answers one request at a time), got {args.max_batch}.")
    from pipeline.serving.protocol import RequestLimits

    limits = RequestLimits(max_clips=args.max_clips, max_audio_s=args.max_audio_seconds,
                           max_text_chars=args.max_text_chars)
    if not args.max_body_mb > 0:
        raise ConfigError(f"`--max-body-mb` must be above 0, got {args.max_body_mb}; {DEFAULT_MAX_BODY_MB:g} is the default.")
    api_key, source = given_api_key(args.api_key_file, args.api_key)
    generated = api_key is None
    api_key = secrets.token_urlsafe(24) if generated else api_key

    import uvicorn

    from pipeline.serving.app import create_app
    from pipeline.serving.models import load_served, loaded_workers, share_threads

    sock = bind(args.host, args.port)
    workers = []
    try:
        served = load_served(args.workspace, args.run, model=args.model, device=args.device,
                             quantization=args.quantization, queue_size=args.queue_size, max_batch=args.max_batch,
                             scorer=args.scorer)
        workers = loaded_workers(served)
        threads = share_threads(len(workers))
        app = create_app(served, api_key=api_key, max_body_bytes=int(args.max_body_mb * 1e6), limits=limits)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}/v1"
        ready = {"url": url, "models": list(served), "api_key": api_key if generated else None, "api_key_from": source,
                 "loopback_only": is_loopback(args.host), "threads_per_model": threads,
                 "max_batch": workers[0].max_batch if workers else None}
        if args.json:
            print(json.dumps(ready), flush=True)
        else:
            print(f"Serving {', '.join(served)} at {url} (OpenAI-compatible: POST /v1/chat/completions, GET /v1/models)")
            print(f"API key: {api_key}   (clients send `Authorization: Bearer {api_key}`)" if generated else
                  f"API key: the one from {source} (not printed; clients send `Authorization: Bearer KEY`)")
            if not ready["loopback_only"]:
                print(f"note: listening on {args.host}, beyond this computer: every request needs the key, but "
                      "the traffic is plain HTTP; put an HTTPS proxy in front of it.")
            print("Stop with Ctrl+C.", flush=True)
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for worker in workers:
            worker.close(timeout_s=5)
        sock.close()
    return 0
