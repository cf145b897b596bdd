"""Console reads of conversations: the Threads page (threads with their extraction state), a
thread's messages and runs, the runs on the dashboard, and the messages a memory cites as its
evidence. Operators see every thread of their tenant; every queryset is tenant-scoped.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import (
    Case,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, NullIf
from django.http import Http404

from accounts.models import Extraction, Tenant
from memories.console.memory_selectors import Page, bounded_count, page_of, tenant_memories
from memories.formation.llm import llm_configured
from memories.models import (
    OPEN_RUN_STATES,
    ExtractionRun,
    Memory,
    Message,
    RunState,
    Thread,
)

# A thread's extraction state as the Threads page filters and shows it, in the API's words
# (`memories.formation.thread_actions.extraction_state`): `running` is a queued or running run (shown
# as `queued` / `running`); `failed`/`deferred` is the latest run's outcome (until another run
# is done); `scheduled`: waiting for the thread to go idle; `disabled`: no LLM is configured
# (`MEMORYHUB_LLM_URL`), so nothing extracts; `off`: messages wait and the agent's extraction is
# off; `idle`: messages wait for a trigger (sent with `extract: "off"`); `done`: nothing waits.
THREAD_STATES = [
    ("scheduled", "Scheduled"),
    ("running", "Queued or running"),
    ("failed", "Failed"),
    ("deferred", "Deferred"),
    ("idle", "Idle (messages wait for a trigger)"),
    ("off", "Off for its agent"),
    ("disabled", "Disabled (no LLM)"),
    ("done", "Done"),
]
THREAD_FILTER_FIELDS = ("agent", "subject", "thread", "state")
THREAD_PAGE_SIZE = 50
MESSAGE_PAGE_SIZE = 100
RUN_PAGE_SIZE = 20
RECENT_RUNS = 30
# Evidence shown next to one memory: the first messages it cites (a model may cite many).
EVIDENCE_SHOWN = 10


def _runs_of_outer_thread() -> QuerySet:
    return ExtractionRun.objects.filter(tenant_id=OuterRef("tenant_id"), thread_id=OuterRef("pk"))


def _threads_with_state(tenant: Tenant) -> QuerySet:
    """The tenant's threads with `extraction_state`: an open run's state; `disabled` without an
    LLM; else the latest run's state unless it is done (failed and deferred stand until another
    run), else what the thread's own columns say. One subquery per row, read off
    `extractionrun_thread_idx`."""
    latest = Subquery(_runs_of_outer_thread().order_by("-created_at", "-id").values("state")[:1])
    state: Case | Coalesce
    if not llm_configured():
        state = Case(
            When(Exists(_runs_of_outer_thread().filter(state__in=OPEN_RUN_STATES)), then=latest),
            default=Value("disabled"),
        )
    else:
        state = Coalesce(
            NullIf(latest, Value(RunState.DONE.value)),
            Case(
                When(extraction_due_at__isnull=False, then=Value("scheduled")),
                When(
                    last_seq__gt=F("extracted_seq"),
                    then=Case(
                        When(agent__extraction=Extraction.OFF, then=Value("off")),
                        default=Value("idle"),
                    ),
                ),
                default=Value("done"),
            ),
        )
    return Thread.objects.for_tenant(tenant).annotate(extraction_state=state)


def _with_tokens(qs: QuerySet) -> QuerySet:
    """`tokens_spent`: prompt and completion tokens of all the thread's runs."""
    tokens = (
        _runs_of_outer_thread()
        .order_by()
        .values("thread_id")
        .annotate(n=Sum(F("prompt_tokens") + F("completion_tokens")))
        .values("n")
    )
    return qs.select_related("agent").annotate(
        tokens_spent=Coalesce(Subquery(tokens, output_field=IntegerField()), 0)
    )


def thread_page(
    *,
    tenant: Tenant,
    filters: dict[str, str],
    cursor: str | None = None,
    size: int = THREAD_PAGE_SIZE,
) -> Page:
    """The Threads page: filtered by agent, subject, thread id and extraction state, most
    recently active first (`updated_at`: a message in or a run finished), keyset-paginated,
    each thread with its agent, `extraction_state` and `tokens_spent`."""
    qs = _threads_with_state(tenant)
    if filters.get("agent"):
        qs = qs.filter(agent__slug=filters["agent"])
    if filters.get("subject"):
        qs = qs.filter(subject_id=filters["subject"])
    if filters.get("thread"):
        qs = qs.filter(thread_id=filters["thread"])
    state = filters.get("state")
    if state == "running":
        qs = qs.filter(extraction_state__in=["queued", "running"])
    elif state in dict(THREAD_STATES):
        qs = qs.filter(extraction_state=state)
    page = page_of(_with_tokens(qs), field_name="updated_at", desc=True, cursor=cursor, size=size)
    page.total = bounded_count(qs.values("pk"))
    return page


def thread_for_console(*, tenant: Tenant, pk: int) -> Thread:
    """One thread of the tenant, annotated as on the Threads page; another tenant's is a 404."""
    thread = _with_tokens(_threads_with_state(tenant)).filter(pk=pk).first()
    if thread is None:
        raise Http404("No such thread")
    return thread


def thread_messages_page(
    *, tenant: Tenant, thread: Thread, cursor: str | None = None, size: int = MESSAGE_PAGE_SIZE
) -> Page:
    """A thread's messages in order (seq), keyset-paginated."""
    qs = Message.objects.for_tenant(tenant).filter(thread=thread)
    return page_of(qs, field_name="seq", desc=False, cursor=cursor, size=size)


def thread_runs_page(
    *, tenant: Tenant, thread: Thread, cursor: str | None = None, size: int = RUN_PAGE_SIZE
) -> Page:
    """A thread's extraction runs, newest first, each with `made`: the memories whose evidence
    names the run (one query for the whole page)."""
    qs = ExtractionRun.objects.for_tenant(tenant).filter(thread=thread)
    page = page_of(qs, field_name="created_at", desc=True, cursor=cursor, size=size)
    made = memories_by_run(tenant=tenant, run_ids=[run.pk for run in page.items])
    for run in page.items:
        run.made = made.get(run.pk, [])
    return page


def memories_by_run(*, tenant: Tenant, run_ids: list[int]) -> dict[int, list[Memory]]:
    """The memories each run added or last updated (`evidence.run_id`), whatever their status.

    No index serves `evidence->'run_id'`: this reads the tenant's memories, which is fine for
    the page sizes here. Should it become slow, an expression index on (tenant, evidence's
    run id) is the fix.
    """
    if not run_ids:
        return {}
    out: dict[int, list[Memory]] = {}
    memories = (
        tenant_memories(tenant)
        .filter(evidence__run_id__in=list(run_ids))
        .order_by("created_at", "id")
    )
    for memory in memories:
        out.setdefault(memory.evidence["run_id"], []).append(memory)  # type: ignore[index]
    return out


def recent_runs(*, tenant: Tenant, limit: int = RECENT_RUNS) -> list[ExtractionRun]:
    """The Jobs page's "Extraction runs": the tenant's newest runs with thread and agent."""
    return list(
        ExtractionRun.objects.for_tenant(tenant)
        .select_related("thread", "agent")
        .order_by("-created_at", "-id")[:limit]
    )


@dataclass
class Evidence:
    """The messages an extracted memory came from (`memory.evidence`), as the console shows them."""

    thread_id: str
    seqs: list[int]
    messages: list[Message]
    cited: int  # how many messages the memory cites (only the first EVIDENCE_SHOWN are read)

    @property
    def thread_pk(self) -> int | None:
        """The thread to link to; None when its messages are no longer stored."""
        return self.messages[0].thread_id if self.messages else None

    @property
    def missing(self) -> int:
        return len(self.seqs) - len(self.messages)


def _evidence_ref(memory: Memory) -> tuple[int, list[int], str] | None:
    evidence = memory.evidence
    if not isinstance(evidence, dict):
        return None
    run_id = evidence.get("run_id")
    seqs = evidence.get("messages") or []
    if not isinstance(run_id, int) or not isinstance(seqs, list):
        return None
    seqs = [s for s in seqs if isinstance(s, int)]
    return run_id, seqs, str(evidence.get("thread_id") or "")


def evidence_for(*, tenant: Tenant, memories: list[Memory]) -> dict[str, Evidence]:
    """`Evidence` for each extracted memory of `memories`, in one query whatever their number.

    A memory's evidence names its run and the seqs it cites; the run leads to the thread, so
    each message is read as (run, seq) through the thread's runs.
    """
    refs = {m.pk: ref for m in memories if (ref := _evidence_ref(m)) is not None}
    condition = Q()
    for run_id, seqs, _ in refs.values():
        if seqs:
            condition |= Q(thread__runs__pk=run_id, seq__in=seqs[:EVIDENCE_SHOWN])
    found: dict[tuple[int, int], Message] = {}
    if condition:
        messages = (
            Message.objects.for_tenant(tenant)
            .filter(condition)
            .annotate(run_pk=F("thread__runs__pk"))
        )
        found = {(m.run_pk, m.seq): m for m in messages}
    out: dict[str, Evidence] = {}
    for memory_pk, (run_id, seqs, thread_id) in refs.items():
        shown = seqs[:EVIDENCE_SHOWN]
        out[memory_pk] = Evidence(
            thread_id=thread_id,
            seqs=shown,
            messages=[found[(run_id, s)] for s in shown if (run_id, s) in found],
            cited=len(seqs),
        )
    return out
