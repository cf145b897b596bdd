"""The operator console (SPEC §6): server-rendered pages with HTMX fragments."""
