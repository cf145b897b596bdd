"""Fixtures of the formation tests: the thread's agent as a principal, and a model client on the
scripted stand-in (`fake_llm`) whose retry waits are recorded instead of slept."""

from tests.support.formation import llm, principal  # noqa: F401 - the fixtures
