"""The events of extraction runs use formation's fixtures: a principal and the stand-in LLM; the
webhook tests a real receiver."""

from tests.support.formation import llm, principal  # noqa: F401 - the fixtures
from tests.support.webhooks import receiver  # noqa: F401 - the fixture
