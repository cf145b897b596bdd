from django.core.management.base import BaseCommand, CommandError

from accounts.models import Role
from accounts.services import operator_create, tenant_get_or_create
from memoryhub.errors import DomainError


class Command(BaseCommand):
    help = "Create an operator (console user) with a role in a tenant (created if missing)."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--email", required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument("--role", default=Role.ADMIN, choices=Role.values)

    def handle(self, *args, **opts):
        try:
            tenant = tenant_get_or_create(slug=opts["tenant"])
            membership = operator_create(
                tenant=tenant, email=opts["email"], password=opts["password"], role=opts["role"]
            )
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"operator {membership.user.email} is {membership.role} of {tenant.slug}")
