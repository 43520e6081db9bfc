"""The core every layer stands on: event model, layer protocol, Guard pipeline, spans, corpus and file IO,
engines and the CLI registry. It imports nothing above it (import-linter keeps it so)."""
