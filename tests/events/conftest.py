"""The events of extraction runs use formation's fixtures: a principal and the stand-in LLM; the
webhook tests a real receiver and the clock every dispatcher reads."""

from tests.support.formation import llm, principal  # noqa: F401 - the fixtures
from tests.support.webhooks import clock, receiver  # noqa: F401 - the fixtures
