"""The app's pages: one module per tab (handlers and widgets), shared state and helpers, and pure formatting.

`app.py` wires the tabs into one page; `ui.tutor_app.TutorApp` holds every tab's handlers. This
package file imports nothing, so `ui.formatting` stays cheap to import on its own.
"""
