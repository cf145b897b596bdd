from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Scope
from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from memoryhub.durations import parse_duration
from memoryhub.errors import DomainError


class Command(BaseCommand):
    help = "Create an API key for an agent (tenant and agent are created if missing). Prints only the key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--agent", required=True)
        parser.add_argument(
            "--scope",
            action="append",
            choices=Scope.values,
            dest="scopes",
            help="repeat for several; default: read and write",
        )
        parser.add_argument("--subject", default=None, help="bind the key to one subject_id")
        parser.add_argument("--expires-in", default=None, help="e.g. 30d, 12h")
        parser.add_argument("--name", default="")
        parser.add_argument(
            "--memory-ttl",
            default=None,
            help="e.g. 24h: every memory written through the key expires at most this long "
            "after its last write",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            expires_in = parse_duration(opts["expires_in"]) if opts["expires_in"] else None
        except ValueError as exc:
            raise CommandError(f"--expires-in: {exc}") from exc
        try:
            memory_ttl = parse_duration(opts["memory_ttl"]) if opts["memory_ttl"] else None
        except ValueError as exc:
            raise CommandError(f"--memory-ttl: {exc}") from exc
        try:
            tenant = tenant_get_or_create(slug=opts["tenant"])
            agent = agent_get_or_create(tenant=tenant, slug=opts["agent"])
            _, raw = api_key_create(
                tenant=tenant,
                agent=agent,
                scopes=opts["scopes"],
                subject_id=opts["subject"],
                expires_in=expires_in,
                name=opts["name"],
                created_by="command:create_api_key",
                memory_ttl=memory_ttl,
            )
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(raw)
