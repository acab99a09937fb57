"""Taking the tutor out of the app and bringing runs back: `export` (adapter zip, merged model,
cloud job bundle) and `import-run`. See each module's docstring."""
