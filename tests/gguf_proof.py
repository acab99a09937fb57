"""The check that a GGUF answers as its transformers model does, shared by the Gemma 4 (audio) and Gemma 3n
(text only) proofs: transformers explains llama.cpp's answer token by token. At every compared position
llama.cpp's token must be one whose transformers log-probability lies within `LOGPROB_TOLERANCE` of the best,
with transformers reading llama.cpp's own tokens so far (teacher forcing). A near-tie cannot fail it (both
tokens are within the tolerance, and the next step follows llama.cpp's pick); a wrong model or a wrong prompt
cannot pass it (each test checks one prompt's llama.cpp answer against transformers on another prompt too)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "sample_data" / "speechocean762-pack"

LOGPROB_TOLERANCE = 0.05
"""Nats: how far below transformers' best next token llama.cpp's token may lie. llama.cpp computes GELU from an
fp16 table and its own log-mel features: differences of a few 1e-3 in the tiny model's logits (the greedy
comparison this replaces failed at a top-2 margin of 0.005), while the stand-in's top-2 margins are tenths
(`pipeline.model.tiny_model.FINAL_NORM_SCALE`), so another model's or another prompt's tokens fall outside it."""
MIN_COMPARED = 6
"""Positions llama.cpp's answer must be explained for (fewer only where its answer ends sooner)."""


def cli_json(*args: str, env: dict) -> dict:
    """Run `python -m pipeline ARGS --json` in the repository (`env` its environment) and return its JSON line;
    fails the test with the command's last output when it fails."""
    done = subprocess.run([sys.executable, "-m", "pipeline", *args, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def opening_flow(root: Path, *make_args: str) -> dict:
    """The CLI's first stages in `root`: `make-tiny-model ROOT/tiny MAKE_ARGS` (`--family gemma4`, ...), `import` of
    the sample pack into `ROOT/ws`, `build` on the stand-in. Returns `{"env", "ws", "tiny", "made", "built"}` for the
    stages that follow (offline, with this checkout on PYTHONPATH)."""
    import os

    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    ws, tiny = str(root / "ws"), str(root / "tiny")
    made = cli_json("make-tiny-model", tiny, *make_args, env=env)
    cli_json("import", "--workspace", ws, "--source", str(PACK), env=env)
    built = cli_json("build", "--workspace", ws, "--model", tiny, env=env)
    return {"env": env, "ws": ws, "tiny": tiny, "made": made, "built": built}


def token_bytes(tokenizer, ids: list[int]) -> bytes:
    """The bytes `ids` spell (byte-fallback tokens `<0xHH>` as their byte, `▁` as a space), as llama.cpp prints them."""
    out = b""
    for token in tokenizer.convert_ids_to_tokens(ids):
        byte = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)
        out += bytes([int(byte.group(1), 16)]) if byte else token.replace("\u2581", " ").encode("utf-8")
    return out


def explained(model, tokenizer, inputs: dict, answer: bytes, n: int, ends: set[int]) -> tuple[int, list[float]]:
    """How many of llama.cpp's answer tokens (`answer`, its bytes) transformers explains after the prompt `inputs`
    (`apply_chat_template(..., return_dict=True, return_tensors="pt")`): `n` when it explains the whole answer, its
    end (one of `ends`) included; and how far below the best each explained token lies (nats)."""
    import torch

    vocab = [token_bytes(tokenizer, [i]) for i in range(len(tokenizer))]
    rest, chosen, gaps = answer.lstrip(b"\n").rstrip(), [], []
    while len(chosen) < n:
        extra = torch.tensor([chosen], dtype=torch.long)
        step = dict(inputs, input_ids=torch.cat([inputs["input_ids"], extra], dim=1),
                    attention_mask=torch.cat([inputs["attention_mask"], torch.ones_like(extra)], dim=1))
        for key in ("mm_token_type_ids", "token_type_ids"):
            if key in inputs:
                step[key] = torch.cat([inputs[key], torch.zeros_like(extra)], dim=1)
        with torch.no_grad():
            logprobs = torch.log_softmax(model(**step).logits[0, -1].float(), dim=-1)
        best = float(logprobs.max())
        near = [int(t) for t in torch.nonzero(logprobs >= best - LOGPROB_TOLERANCE).flatten()]
        if not rest:  # llama.cpp ended here: transformers must consider ending too
            return (n, gaps + [0.0]) if ends & set(near) else (len(chosen), gaps)  # all of it explained
        match = max((t for t in near if t not in ends and vocab[t] and rest.startswith(vocab[t])),
                    key=lambda t: float(logprobs[t]), default=None)
        if match is None:
            return len(chosen), gaps
        gaps.append(round(best - float(logprobs[match]), 4))
        chosen.append(match)
        rest = rest[len(vocab[match]):]
    return len(chosen), gaps
