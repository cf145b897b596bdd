"""Thirty days of made-up activity for the demo tenant, so that the console's charts and lists
have something to show in screenshots (`python manage.py screenshots`). Never part of `make run`.

Everything goes through the services an agent's requests use, each at its own past `now`:
stores (now and then an inferred one, which waits for review), reads (search, hydrate,
recall), an operator's tombstones, and conversations whose extraction runs against the
stand-in model (`memories.formation.standin_llm`: an OpenAI-compatible server on 127.0.0.1 that
answers at once). Seeded, so every run makes the same history.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

from accounts.models import Agent
from accounts.principal import Principal
from accounts.services import agent_get_or_create
from memories.access import flush_access
from memories.clock import resolve_now
from memories.formation.ingest import thread_messages_add
from memories.formation.llm import LLMClient
from memories.formation.runs import run_execute, run_request
from memories.formation.standin_llm import StandInLLM
from memories.models import Thread
from memories.retrieval.hydrate import memory_hydrate
from memories.retrieval.search import memory_search
from memories.services.operator_actions import memory_tombstone
from memories.services.store import memory_store

DAYS = 30
SUBJECTS = ("alice", "bob", "carol", "dmitri")
FACTS = (
    ("core", "{s} prefers to be contacted by email."),
    ("core", "{s} works in the Lisbon office."),
    ("core", "{s} is on the Pro plan since January."),
    ("daily", "{s} asked about a refund for order {n}."),
    ("daily", "{s} reported a login problem on the mobile app."),
    ("archival", "{s} mentioned a trip to Kyoto in {n}."),
    ("core", "{s} needs invoices in English and Portuguese."),
)
AGENT_FACTS = (
    ("workspace", "Support hours are 08:00 to 20:00 CET, Monday to Saturday."),
    ("core", "Refunds over 200 EUR need a supervisor's approval."),
    ("workspace", "The status page is status.example.com."),
)
QUERIES = ("email", "refund", "invoice language", "login problem", "office", "plan")
CONVERSATION = (
    ("user", "Hi, I need help with invoice {n}."),
    ("assistant", "Sure, what is wrong with it?"),
    ("user", "The VAT number is missing; I also moved to Porto last week."),
    ("assistant", "I will fix the invoice and note your new city."),
)


def seed_history(*, tenant, agent: Agent, now: datetime | None = None, seed: int = 29) -> None:
    """Add DAYS days of activity before `now` to `agent` (and a second agent) of `tenant`."""
    now = resolve_now(now)
    rng = random.Random(seed)
    sales = agent_get_or_create(tenant=tenant, slug="sales-bot", name="Sales agent")
    agents = [Principal(tenant=tenant, agent=a) for a in (agent, sales)]
    stored = []
    with StandInLLM() as standin:
        llm = LLMClient(url=standin.url, model="stand-in", timeout=30)
        for days_ago in range(DAYS - 1, 0, -1):
            day = now - timedelta(days=days_ago)
            for step in range(rng.randint(1, 4)):
                at = day.replace(hour=9 + 2 * step, minute=rng.randint(0, 59))
                stored.append(_store(rng, rng.choice(agents), at))
            for _ in range(rng.randint(3, 14)):
                _read(rng, rng.choice(agents), day.replace(hour=rng.randint(8, 19)))
            if days_ago % 6 == 0 and stored:
                memory = rng.choice(stored)
                memory_tombstone(
                    tenant=tenant,
                    memory_id=memory.pk,
                    actor="operator:admin@example.com",
                    reason="outdated",
                    now=day.replace(hour=17),
                )
            if days_ago % 4 == 1:
                _conversation(rng, agents[0], day.replace(hour=15), llm)
    flush_access()


def _store(rng: random.Random, principal: Principal, at: datetime):
    if rng.random() < 0.2:
        category, text = rng.choice(AGENT_FACTS)
        data: dict[str, Any] = {"text": text, "category": category}
    else:
        subject = rng.choice(SUBJECTS)
        category, text = rng.choice(FACTS)
        data = {
            "text": text.format(s=subject.title(), n=rng.randint(1000, 9999)),
            "category": category,
            "subject_id": subject,
        }
        if rng.random() < 0.15:
            data.update(capture_mode="inferred", confidence=round(rng.uniform(0.5, 0.75), 2))
    data["dedup_policy"] = "skip_if_near"
    return memory_store(principal=principal, data=data, now=at).memory


def _read(rng: random.Random, principal: Principal, at: datetime) -> None:
    subject = rng.choice(SUBJECTS)
    if rng.random() < 0.6:
        query = {"query": rng.choice(QUERIES), "subject_id": subject}
        memory_search(principal=principal, data=query, now=at)
    else:
        memory_hydrate(principal=principal, data={"subject_id": subject}, now=at)


def _conversation(rng: random.Random, principal: Principal, at: datetime, llm) -> None:
    subject = rng.choice(SUBJECTS)
    invoice = rng.randint(1000, 9999)
    messages = [
        {
            "role": role,
            "content": text.format(n=invoice),
            "created_at": (at + timedelta(seconds=i)).isoformat(),
        }
        for i, (role, text) in enumerate(CONVERSATION)
    ]
    thread_id = f"support-{invoice}"
    data = {"subject_id": subject, "messages": messages, "extract": "off"}
    thread_messages_add(principal=principal, thread_id=thread_id, data=data, now=at)
    thread = Thread.objects.for_tenant(principal.tenant).get(
        agent=principal.agent, subject_id=subject, thread_id=thread_id
    )
    later = at + timedelta(minutes=3)
    run = run_request(thread=thread, trigger="schedule", now=later)
    run_execute(run.pk, llm=llm, now=later)
