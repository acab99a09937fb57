"""The app's pages: one pair of modules per tab, named alike, so that knowing one tab means knowing all.

    ui/X_tab.py       the tab's widgets and handlers: `XHandlers` (each handler calls one `pipeline/`
                      function) and `X_tab(handlers)`, which lays the tab out and wires what stays inside it
    ui/X_view.py      the tab's text, tables and figures: pure functions (no gradio, no file reading, no
                      pipeline call), imported by the tab as `view`
    ui/X_SECTION.py   a part of the tab with its own widgets and handlers: `samples_kinds`, `samples_session`,
                      `try_kinds`, `try_export`

The tabs, in the page's order: samples, dataset, memory, train, try, judge, inbox; the students' practice
page (its own page and port) is `practice_page.py` with `practice_view.py`, and the Get-the-model panel
under the model picker (above the tabs) `get_model.py` with `get_model_view.py`. What the tabs share:
`common.py` (errors -> messages, widgets -> `TrainConfig`), `state.py` (the workspace, remembered settings,
the model picker), `wording.py` (the command line's words -> the app's); what the views share: `counts.py`,
`fields.py`, `figures.py`, `memory_counters.py` and `pipeline.units` (bytes and seconds). `tutor_app.TutorApp` binds
every tab's handlers to one workspace; `app.py` wires the tabs into one page. This package file imports
nothing, so a view stays cheap to import on its own.
"""
