"""Serving: the tuned tutor behind an OpenAI-compatible API (`python -m pipeline serve`).

- `protocol.py`: the chat-completions wire format both ways (request -> `TutorRequest`, answer ->
  response body, refusal -> OpenAI error body); which of the three kinds a request asks.
- `models.py`: the runs (and `base`) loaded with `pipeline.tutor.infer.load_tutor`, one worker thread
  and a bounded queue per loaded model, the answer asked as the tutor was trained.
- `app.py`: the FastAPI routes, the API key, the body limit, errors as OpenAI sends them.
- `cli.py`: `python -m pipeline serve` (bind, load, print the key, run uvicorn).

It reads a workspace's runs and writes nothing.
"""
