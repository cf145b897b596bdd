"""The events of extraction runs use formation's fixtures: a principal and the stand-in LLM."""

from tests.formation.conftest import llm, principal  # noqa: F401 - the fixtures
