"""The per-key rate limit, one counter for every door an agent comes in by: REST and MCP."""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class KeyRateThrottle(SimpleRateThrottle):
    """`MEMORYHUB_RATE_LIMIT_PER_MINUTE` requests per API key (0: off) → 429 RATE_LIMITED with
    Retry-After. Counted in the Django cache, so per process unless a shared cache is set."""

    scope = "agent_key"

    def get_rate(self) -> str | None:
        limit = settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE
        return f"{limit}/min" if limit else None

    def get_cache_key(self, request, view) -> str:
        principal = request.user
        ident = principal.api_key.pk if principal.api_key else f"agent-{principal.agent.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
