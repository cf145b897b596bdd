"""Memory formation from conversations (docs/formation.md).

The model's side of it lives here: `llm` (the client for an OpenAI-compatible chat-completions
endpoint: `extract` and `summarize`), `prompts` (the versioned prompt files and how a thread is
rendered into them) and `operations` (the JSON shape the model answers in, and its parser).
Deciding what to do with the answer (secret scan, confidence thresholds, dedup, compare-and-set)
belongs to the services that apply it, never to this package.
"""
