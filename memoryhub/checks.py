"""MemoryHub's own system checks (`manage.py check --deploy`)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register(Tags.security, deploy=True)
def development_secret_key_in_production(app_configs, **kwargs) -> list[Error]:
    """Production mode with the built-in development SECRET_KEY: sessions, CSRF tokens and
    password-reset links would be signed with a key printed in this repository. Django's own
    security.W009 does not catch it (the key is long and varied enough), and a warning would
    not stop a deploy script that runs `check --deploy --fail-level ERROR`."""
    if getattr(settings, "MEMORYHUB_PRODUCTION", False) and (
        settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY
    ):
        return [
            Error(
                "MEMORYHUB_PRODUCTION is on but SECRET_KEY is the built-in development key.",
                hint="Set the SECRET_KEY environment variable to a long random value, e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(50))'.",
                id="memoryhub.E001",
            )
        ]
    return []


@register()
def events_off(app_configs, **kwargs) -> list[Warning]:
    """MEMORYHUB_BENCH_NO_EVENTS is for the bench's paired load only: with it, changes reach
    neither the change feed nor the webhooks."""
    if getattr(settings, "MEMORYHUB_BENCH_NO_EVENTS", False):
        return [
            Warning(
                "MEMORYHUB_BENCH_NO_EVENTS is on: writes record no events, so GET "
                "/api/v1/events and the webhooks miss them.",
                hint="Unset it; it exists for `bench --load --pair observability` only.",
                id="memoryhub.W001",
            )
        ]
    return []
