import json

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Tenant
from memories.services.policies import retention_changes, tenant_policy_set
from memoryhub.errors import DomainError


class Command(BaseCommand):
    help = (
        "Show or change a tenant's memory policy (retention per category, the cap of user "
        "memories per subject); prints the resulting policy as one JSON object."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument(
            "--max-retention",
            nargs="+",
            metavar="CATEGORY=DURATION",
            help="e.g. daily=72h core=365d; CATEGORY=none clears one (an agent's own wins)",
        )
        parser.add_argument("--user-cap", type=int, help="live user memories per subject")

    def handle(self, *args, **opts):
        tenant = Tenant.objects.filter(slug=opts["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {opts['tenant']!r}")
        policy = {}
        try:
            if opts["max_retention"] is not None:
                policy["max_retention"] = retention_changes(
                    tenant.max_retention, opts["max_retention"]
                )
            if opts["user_cap"] is not None:
                policy["user_cap"] = opts["user_cap"]
            if policy:
                tenant = tenant_policy_set(tenant=tenant, **policy)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps(tenant.policy(), sort_keys=True))
