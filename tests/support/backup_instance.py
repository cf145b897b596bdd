"""An instance of its own for the backup tests, driven in a subprocess on its data directory
(`python -m tests.support.backup_instance seed RECEIVER_URL` / `deliver`), each ending with one
JSON line: `seed` fills it as agents and operators would (two tenants, a kind with a schema,
agent and user memories with revisions, a tombstone and an expiry, a thread with a finished
formation run on the stand-in model, a webhook endpoint); `deliver` runs the webhook
dispatcher until it has nothing left to send. `instance_env`: the environment of any process
on such an instance."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from memoryhub.throwaway import server_env


def instance_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """A process on the embedded server of `data_dir` (never the suite's database), with
    webhooks to 127.0.0.1 allowed."""
    return server_env(data_dir, "hashing") | {
        "DJANGO_SETTINGS_MODULE": "memoryhub.settings_test",
        "MEMORYHUB_WEBHOOK_ALLOW_INSECURE": "1",
        "MEMORYHUB_WEBHOOK_TIMEOUT": "2",
        "DB_CONN_MAX_AGE": "0",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


SHOE = {
    "type": "object",
    "properties": {"size": {"type": "integer", "minimum": 30}},
    "required": ["size"],
}


def seed(receiver_url: str) -> dict:
    from django.conf import settings

    from accounts.principal import Principal
    from memories.models import ExtractionRun
    from memories.services.changes import memory_update
    from memories.services.kind_changes import kind_save
    from memories.services.lifecycle import memory_forget
    from memories.webhooks.endpoints import webhook_create
    from tests.factories import make_agent, make_key, make_tenant
    from tests.support import formation
    from tests.support.fake_llm import FakeLLM
    from tests.support.memories import store

    out: dict = {"keys": {}, "memories": {}}
    for slug in ("acme", "globex"):
        tenant = make_tenant(slug)
        bot = make_agent(tenant, "bot")
        out["keys"][slug] = make_key(bot, scopes=["read", "write", "admin"])[1]
        kind_save(tenant=tenant, name="ShoeSize", data={"description": "Size", "schema": SHOE})
        principal = Principal(
            tenant=tenant, agent=bot, scopes=frozenset({"read", "write", "admin"})
        )
        revised = store(bot, f"{slug} likes tea")
        for text in (f"{slug} likes green tea", f"{slug} likes sencha"):
            revised = memory_update(principal=principal, memory_id=revised.pk, data={"text": text})
        gone = store(bot, f"{slug} old address")
        memory_forget(principal=principal, memory_id=gone.pk, reason="moved")
        expiring = store(bot, f"{slug} is travelling this week", ttl="7d")
        shoe = store(bot, f"{slug} wears 42", kind="ShoeSize", data={"size": 42})
        user = store(bot, f"{slug} user prefers email", scope="user", subject_id="alice")
        out["memories"][slug] = {
            "revised": revised.pk,
            "tombstoned": gone.pk,
            "expiring": expiring.pk,
            "shoe": shoe.pk,
            "user": user.pk,
        }
        formation.ingest(principal, "I moved to Lisbon", "Noted.", thread_id=f"{slug}-t")
        with FakeLLM.running() as fake:
            # The run is a job, and jobs run at once here (settings_test): on the stand-in.
            settings.MEMORYHUB_LLM_URL = fake.url
            fake.queue_json({"operations": [formation.add_op(f"{slug} lives in Lisbon")]})
            llm = formation.LLMClient(url=fake.url, model="stand-in", timeout=5)
            formation.extract(principal, llm, thread_id=f"{slug}-t")
        run = ExtractionRun.objects.filter(thread__thread_id=f"{slug}-t").latest("pk")
        out.setdefault("runs", {})[slug] = [run.state, run.counts]
        if slug == "acme":
            created = webhook_create(tenant=tenant, url=receiver_url, actor="seed")
            out["webhook"] = {"id": created.endpoint.pk, "secret": created.secret}
    return out


def deliver() -> dict:
    """Dispatcher runs until one finds nothing to do (a run stops at its deadline)."""
    from memories.webhooks.delivery import dispatch_webhooks

    total: dict[str, int] = {}
    for _ in range(20):
        counts = dispatch_webhooks(run_for=20)
        total = {name: total.get(name, 0) + n for name, n in counts.items()}
        if not any(counts.values()):
            break
    return total


def main(argv: list[str]) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings_test")
    django.setup()
    result = seed(argv[2]) if argv[1] == "seed" else deliver()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
