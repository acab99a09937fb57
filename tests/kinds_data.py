"""Chat-format JSONL made in code from the real speechocean762 clips: free speech and tutoring dialogues.

`write_tutoring_jsonl(folder, speechocean_dir)` writes `tutoring.jsonl` with 3 dialogues (2, 3 and 4
turns; 1, 2 and 3 clips) and 4 free-speech rows, each clip a real learner recording (copied beside
the file, referenced by relative paths as the chat format has them). The texts are hand-written
tutor turns; the kinds are left for the importer to infer except where a test says otherwise.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# (utterance id, what the learner said) for the clips used; the sentences are speechocean762's.
CLIPS = {
    "000010011": "WE CALL IT BEAR",
    "000010035": "ZERO THREE FIVE ONE",
    "000010053": "THREE TWO TWO SEVEN",
    "000010063": "I WANT TO GO TO THE ZOO",
    "000010069": "THERE IS A BEAR",
    "000010075": "I LIKE THE BEAR",
    "000010089": "YOU CAN SEE A BEAR",
    "000010095": "IT IS BIG",
    "000010106": "IT EATS HONEY",
    "000030024": "",
    "000030097": "",
}


def _clip_path(speechocean_dir: Path, utt: str) -> Path:
    return speechocean_dir / "WAVE" / f"SPEAKER{utt[1:5]}" / f"{utt}.WAV"


def audio(rel: str, transcript: str | None = None) -> dict:
    part = {"type": "audio", "path": rel}
    if transcript:
        part["transcript"] = transcript
    return part


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def dialogues() -> list[dict]:
    """The 3 dialogues: 2 turns / 1 clip, 3 turns / 2 clips (one typed learner turn between), 4 turns / 3 clips."""
    return [
        {"speaker": "0001", "id": "dlg-bear", "messages": [
            {"role": "system", "content": [text("You are a kind tutor.")]},
            {"role": "user", "content": [audio("clips/000010011.wav", "we call it bear")]},
            {"role": "assistant", "content": [text("Nice! Say BEAR with an open EH sound, like in 'air'. What colour is the bear?")]},
        ]},
        {"speaker": "0001", "id": "dlg-numbers", "messages": [
            {"role": "user", "content": [audio("clips/000010035.wav"), text("Is this right?")]},
            {"role": "assistant", "content": [text("Almost: THREE starts with TH, tongue between the teeth. Try the next numbers.")]},
            {"role": "user", "content": [audio("clips/000010053.wav")]},
        ]},
        {"speaker": "0001", "id": "dlg-zoo", "messages": [
            {"role": "user", "content": [audio("clips/000010063.wav")]},
            {"role": "assistant", "content": [text("Good sentence. ZOO has a long OO. Which animal do you like?")]},
            {"role": "user", "content": [audio("clips/000010069.wav"), audio("clips/000010075.wav")]},
            {"role": "assistant", "content": [text("Great: THERE and BEAR rhyme. Keep the R soft at the end.")]},
        ]},
    ]


def free_speech_rows() -> list[dict]:
    prompts = ["Describe your favourite animal.", "What can you see at the zoo?",
               "Tell me about your last holiday.", "What do bears eat?"]
    utts = ["000010089", "000010095", "000030024", "000010106"]
    return [
        {"speaker": utt[1:5], "messages": [
            {"role": "user", "content": [audio(f"clips/{utt}.wav"), text(prompt)]},
            {"role": "assistant", "content": [text(
                f"Pronunciation: clear overall; stress the first word. Grammar: fine. Vocabulary: try a longer answer about '{prompt[:-1].lower()}'.")]},
        ]}
        for utt, prompt in zip(utts, prompts)
    ]


def write_tutoring_jsonl(folder: Path, speechocean_dir: Path) -> Path:
    """`folder/tutoring.jsonl` (3 dialogues then 4 free-speech rows) with its clips in `folder/clips/`."""
    (folder / "clips").mkdir(parents=True, exist_ok=True)
    rows = dialogues() + free_speech_rows()
    for row in rows:
        for message in row["messages"]:
            for part in message["content"]:
                if part["type"] == "audio":
                    utt = Path(part["path"]).stem
                    shutil.copyfile(_clip_path(speechocean_dir, utt), folder / part["path"])
    path = folder / "tutoring.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path
