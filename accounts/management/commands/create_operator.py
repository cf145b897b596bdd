import secrets
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Role
from accounts.services import operator_create, operator_password_reset, tenant_get_or_create
from memoryhub.errors import DomainError


class Command(BaseCommand):
    help = (
        "Create an operator (console user) with a role in a tenant (created if missing); or, "
        "with --reset-password, give an existing operator a new password (a random one, "
        "printed once, unless --password names it)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="required unless --reset-password")
        parser.add_argument("--email", required=True)
        parser.add_argument("--password")
        parser.add_argument("--role", default=Role.ADMIN, choices=Role.values)
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="only change the password of an existing operator (tenant and role untouched)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["reset_password"]:
            self.reset(opts["email"], opts["password"])
            return
        if not opts["tenant"] or not opts["password"]:
            raise CommandError("--tenant and --password are required (or use --reset-password)")
        try:
            tenant = tenant_get_or_create(slug=opts["tenant"])
            membership = operator_create(
                tenant=tenant, email=opts["email"], password=opts["password"], role=opts["role"]
            )
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"operator {membership.user.email} is {membership.role} of {tenant.slug}")

    def reset(self, email: str, password: str | None) -> None:
        chosen = password or secrets.token_urlsafe(12)
        try:
            user = operator_password_reset(email=email, password=chosen)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        if password:
            self.stdout.write(f"password of {user.email} changed")
        else:
            self.stdout.write(f"new password of {user.email}: {chosen}  (shown once)")
