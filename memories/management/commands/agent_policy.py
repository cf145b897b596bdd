import json

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Agent, Tenant
from accounts.services import agent_policy_update
from memoryhub.durations import parse_duration
from memoryhub.errors import DomainError


class Command(BaseCommand):
    help = "Show or change an agent's policy; prints the resulting policy as one JSON object."

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--agent", required=True)
        parser.add_argument("--entry-cap", type=int)
        parser.add_argument("--hydration-budget", type=int)
        parser.add_argument("--default-category")
        parser.add_argument("--dedup-threshold", type=float)
        parser.add_argument("--default-ttl", help="e.g. 7d; 'none' clears it")
        parser.add_argument("--reads-from", nargs="*", default=None, metavar="SLUG")
        parser.add_argument("--extraction", choices=["off", "review", "auto"])
        parser.add_argument("--extraction-idle-seconds", type=int)
        parser.add_argument("--extraction-min-confidence", type=float)
        parser.add_argument("--review-below", type=float)
        parser.add_argument("--extraction-categories", nargs="+", metavar="CATEGORY")
        parser.add_argument("--summary-threshold-bytes", type=int)

    def handle(self, *args, **opts):
        tenant = Tenant.objects.filter(slug=opts["tenant"]).first()
        agent = (
            Agent.objects.for_tenant(tenant).filter(slug=opts["agent"]).first() if tenant else None
        )
        if agent is None:
            raise CommandError(f"no agent {opts['agent']!r} in tenant {opts['tenant']!r}")
        policy = {}
        for option, field in (
            ("entry_cap", "entry_cap"),
            ("hydration_budget", "hydration_budget_bytes"),
            ("default_category", "default_category"),
            ("dedup_threshold", "dedup_threshold"),
            ("extraction", "extraction"),
            ("extraction_idle_seconds", "extraction_idle_seconds"),
            ("extraction_min_confidence", "extraction_min_confidence"),
            ("review_below", "review_below"),
            ("extraction_categories", "extraction_categories"),
            ("summary_threshold_bytes", "summary_threshold_bytes"),
        ):
            if opts[option] is not None:
                policy[field] = opts[option]
        if opts["default_ttl"] is not None:
            raw = opts["default_ttl"]
            try:
                policy["default_ttl"] = None if raw.lower() in ("none", "") else parse_duration(raw)
            except ValueError as exc:
                raise CommandError(f"--default-ttl: {exc}") from exc
        try:
            agent = agent_policy_update(
                tenant=tenant, agent=agent, reads_from=opts["reads_from"], **policy
            )
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps(agent.policy(), sort_keys=True))
