"""Loaded by every Python process a test run starts (tests/expense_counts.py puts this folder first on
`$PYTHONPATH`): counts that process's app starts, training runs and model loads into `$TUTOR_TEST_COUNTS_FILE`,
then runs the `sitecustomize` this one hides, if there is one."""

import importlib.util
import os
import sys

if os.environ.get("TUTOR_TEST_COUNTS_FILE"):
    _spec = importlib.util.spec_from_file_location(
        "_tutor_expense_counts", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "expense_counts.py"))
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
    _module.install()

_here = os.path.dirname(os.path.abspath(__file__))
for _folder in sys.path:
    if _folder and os.path.abspath(_folder) != _here and os.path.exists(os.path.join(_folder, "sitecustomize.py")):
        _spec = importlib.util.spec_from_file_location("_hidden_sitecustomize", os.path.join(_folder, "sitecustomize.py"))
        _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
