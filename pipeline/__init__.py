"""Pronunciation-tutor fine-tuning pipeline for Gemma 3n.

The library behind `app.py` and `python -m pipeline`: audio ingest, the sample library and its
importers, dataset building, the memory model, model loading, LoRA training, inference and
evaluation. Importing this package is cheap: heavy libraries (torch, transformers) are imported
inside the functions that need them, so the app's first page draws fast.
"""
