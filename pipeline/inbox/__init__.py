"""Students' practice attempts (the inbox) and the practice page's setup; see `store.py` and `practice.py`."""
