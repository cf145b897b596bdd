import json

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Agent, Tenant
from memories.services.policies import agent_policy_set, retention_changes
from memoryhub.durations import parse_duration
from memoryhub.errors import DomainError


def boolean(value: str) -> bool:
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ValueError(value)


class Command(BaseCommand):
    help = (
        "Show or change an agent's policy; prints the resulting policy as one JSON object. "
        "(Here rather than in accounts: a retention change moves the agent's memories' expiry.)"
    )

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
        parser.add_argument(
            "--extraction-max-operations",
            type=int,
            metavar="N",
            help="the most operations one model answer may apply (1-1000; the rest are dropped)",
        )
        parser.add_argument("--core-max-entries", type=int)
        parser.add_argument("--core-max-chars", type=int)
        parser.add_argument("--archival-max-chars", type=int)
        parser.add_argument("--context-messages", type=int)
        parser.add_argument(
            "--formation-user-scope", type=boolean, metavar="{true,false}", default=None
        )
        parser.add_argument(
            "--max-retention",
            nargs="+",
            metavar="CATEGORY=DURATION",
            help="e.g. daily=72h core=365d; CATEGORY=none clears one",
        )

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
            ("extraction_max_operations", "extraction_max_operations"),
            ("core_max_entries", "core_max_entries"),
            ("core_max_chars", "core_max_chars"),
            ("archival_max_chars", "archival_max_chars"),
            ("context_messages", "context_messages"),
            ("formation_user_scope", "formation_user_scope"),
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
            if opts["max_retention"] is not None:
                policy["max_retention"] = retention_changes(
                    agent.max_retention, opts["max_retention"]
                )
            agent = agent_policy_set(
                tenant=tenant, agent=agent, reads_from=opts["reads_from"], **policy
            )
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps(agent.policy(), sort_keys=True))
