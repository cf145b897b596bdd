"""`eval_extraction`: how well memory formation (docs/formation.md) remembers a LoCoMo conversation.

Each session of a conversation is ingested as one thread of the conversation's agent
(`thread_messages_add`, exactly what the REST endpoint calls), then extracted synchronously
(`run_request` + `run_execute`, the worker's code path) with the configured model, session after
session, so memories formed from earlier sessions are the "related memories" of later runs.
Each question (category 5 and questions without evidence left out, as the dataset README says)
is then asked through the hybrid search the agents use (`memory_search`), and a returned memory
counts for an evidence turn when its `evidence` names that turn's message. Evidence recall@k =
|evidence turns covered by the top k| / |evidence turns|, averaged over questions.

Messages: the turn's text (plus ` [shares <caption>]` for a shared image, as the retrieval
bench does), `name` = the speaker (not repeated in the content), `created_at` = the session's
date and time plus one second per turn. Roles: `user` for both speakers by default (LoCoMo is two people talking, and the
extraction prompt keeps only what "the user" says; with `alternate`, the second speaker is the
`assistant`, whose statements the prompt ignores by design).

Evidence of a memory: its current `evidence` and that of its earlier versions (an `update`
replaces the evidence with the updating run's messages; the text keeps what is still true).
A run that fails is reported and its session's messages stay unextracted; three failed runs in
a row stop the evaluation (`EvaluationAborted`). The dataset is read where it lies and nothing
of it is kept in the repository.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from accounts.models import Agent, Tenant
from accounts.principal import Principal
from accounts.services import agent_get_or_create
from bench.locomo import evidence_ids
from memories.formation.ingest import MAX_BATCH, thread_messages_add
from memories.formation.runs import run_execute, run_request
from memories.models import ExtractionRun, Memory, MemoryRevision, Message, RunState, Thread
from memories.retrieval.search import memory_search

KS = (1, 5, 10, 20)
HEADLINE_K = 10
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ROLES = ("user", "alternate")
SESSION_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y")
MAX_RUNS_PER_THREAD = 50  # a window per run: a thread this long is not a LoCoMo session
MAX_FAILED_IN_A_ROW = 3  # then the model is unusable (wrong URL, key, model): stop
FALLBACK_START = datetime(2023, 1, 1, tzinfo=UTC)


class EvaluationAborted(RuntimeError):
    """The model failed run after run; the evaluation stops instead of scoring nothing."""


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str


@dataclass
class Session:
    number: int
    started_at: datetime
    turns: list[Turn]


@dataclass
class Question:
    question: str
    evidence: set[str]
    category: int


@dataclass
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session]
    questions: list[Question]


def message_text(turn: dict) -> str:
    """A turn as a message's content: its text, plus the caption of an image it shared (the
    speaker is the message's `name`)."""
    text = str(turn.get("text") or "").strip()
    if turn.get("blip_caption"):
        text = f"{text} [shares {turn['blip_caption']}]".strip()
    return text or "(no text)"


def session_time(raw: str | None, number: int) -> datetime:
    """ "1:56 pm on 8 May, 2023" → an aware UTC datetime (a day per session if unparsable)."""
    text = " ".join(str(raw or "").split())
    for pattern in SESSION_FORMATS:
        try:
            return datetime.strptime(text, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    return FALLBACK_START + timedelta(days=number - 1)


def load(path: Path) -> list[Conversation]:
    out = []
    for sample in json.loads(Path(path).read_text()):
        conv = sample["conversation"]
        sessions = []
        n = 1
        while f"session_{n}" in conv:
            turns = [Turn(t["dia_id"], t["speaker"], message_text(t)) for t in conv[f"session_{n}"]]
            sessions.append(Session(n, session_time(conv.get(f"session_{n}_date_time"), n), turns))
            n += 1
        questions = [
            Question(q["question"], evidence_ids(q.get("evidence") or []), int(q["category"]))
            for q in sample["qa"]
            if q.get("category") != 5 and evidence_ids(q.get("evidence") or [])
        ]
        out.append(
            Conversation(
                sample["sample_id"],
                conv.get("speaker_a", ""),
                conv.get("speaker_b", ""),
                sessions,
                questions,
            )
        )
    return out


def dataset_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def recall(evidence: set[str], covered_by_rank: list[set[str]], k: int) -> float:
    """|evidence ∩ turns covered by the top k hits| / |evidence|."""
    covered: set[str] = set()
    for turns in covered_by_rank[:k]:
        covered |= turns
    return len(evidence & covered) / len(evidence)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))])


def _timing(values: list[float]) -> dict:
    return {
        "n": len(values),
        "median": statistics.median(values) if values else None,
        "p95": _pct(values, 0.95),
        "mean": round(statistics.fmean(values), 1) if values else None,
    }


class Evaluation:
    """One evaluation in the (throwaway) database this process points at."""

    def __init__(
        self, *, tenant: Tenant, roles: str = "user", err: Callable[[str], None] = print
    ) -> None:
        if roles not in ROLES:
            raise ValueError(f"roles must be one of {ROLES}")
        self.tenant, self.roles, self.err = tenant, roles, err
        self.failed_in_a_row = 0

    # --- per conversation ------------------------------------------------------------------

    def agent_for(self, index: int) -> Agent:
        agent = agent_get_or_create(tenant=self.tenant, slug=f"conversation-{index}")
        agent.entry_cap = 1_000_000  # eviction is not what this measures
        agent.save(update_fields=["entry_cap"])
        return agent

    def role_of(self, conversation: Conversation, speaker: str) -> str:
        if self.roles == "alternate" and speaker == conversation.speaker_b:
            return "assistant"
        return "user"

    def ingest_session(
        self, principal: Principal, conversation: Conversation, session: Session
    ) -> tuple[Thread, dict[tuple[str, int], str]]:
        """Store the session as thread `session-<n>`; returns it and (thread_id, seq) → dia_id."""
        thread_id = f"session-{session.number}"
        messages, stamps = [], {}
        for i, turn in enumerate(session.turns):
            created_at = _iso(session.started_at + timedelta(seconds=i))
            stamps[created_at] = turn.dia_id
            messages.append(
                {
                    "role": self.role_of(conversation, turn.speaker),
                    "content": turn.text,
                    "name": turn.speaker,
                    "created_at": created_at,
                }
            )
        thread = None
        for start in range(0, len(messages), MAX_BATCH):
            result = thread_messages_add(
                principal=principal,
                thread_id=thread_id,
                data={"messages": messages[start : start + MAX_BATCH], "extract": "off"},
            )
            thread = result.thread
        dia_of = {}
        rows = (
            Message.objects.for_tenant(self.tenant)
            .filter(thread=thread)
            .values_list("seq", "created_at")
        )
        for seq, stored_at in rows:
            dia_id = stamps.get(_iso(stored_at))
            if dia_id is not None:
                dia_of[(thread_id, seq)] = dia_id
        return thread, dia_of  # type: ignore[return-value]  # a session has turns: a thread

    def extract_thread(self, thread: Thread) -> list[int]:
        """Run extraction on the thread until no message waits; returns the run ids."""
        run_ids: list[int] = []
        for _ in range(MAX_RUNS_PER_THREAD):
            thread.refresh_from_db()
            if thread.pending_messages == 0:
                break
            run = run_request(thread=thread, trigger="now")
            run_execute(run.pk)
            run.refresh_from_db()
            run_ids.append(run.pk)
            if run.state != RunState.DONE:
                error = f"run {run.pk} {run.state}: {run.error_class} {run.error_message[:300]}"
                self.err(f"  {error}")
                self.failed_in_a_row += 1
                if self.failed_in_a_row >= MAX_FAILED_IN_A_ROW:
                    raise EvaluationAborted(
                        f"{self.failed_in_a_row} extraction runs in a row failed; last: {error}"
                    )
                break  # the messages stay pending; the next session goes on
            self.failed_in_a_row = 0
        return run_ids

    def evidence_of(self, memory_ids: list[str], threads: set[str]) -> dict[str, set]:
        """(thread_id, seq) pairs each memory rests on, over its versions."""
        found: dict[str, set] = defaultdict(set)

        def take(memory_id: str, evidence) -> None:
            if isinstance(evidence, dict) and evidence.get("thread_id") in threads:
                for seq in evidence.get("messages") or []:
                    found[memory_id].add((evidence["thread_id"], seq))

        for memory_id, evidence in (
            Memory.objects.for_tenant(self.tenant)
            .filter(pk__in=memory_ids)
            .values_list("pk", "evidence")
        ):
            take(memory_id, evidence)
        for memory_id, before, after in (
            MemoryRevision.objects.for_tenant(self.tenant)
            .filter(memory_id__in=memory_ids)
            .values_list("memory_id", "before", "after")
        ):
            for snapshot in (before, after):
                if isinstance(snapshot, dict):
                    take(memory_id, snapshot.get("evidence"))
        return found

    def score(self, principal: Principal, conversation: Conversation, dia_of: dict) -> list[dict]:
        threads = {thread_id for thread_id, _ in dia_of}
        scored = []
        for question in conversation.questions:
            answer = memory_search(
                principal=principal,
                data={"query": question.question[:2000], "mode": "hybrid", "limit": max(KS)},
            )
            ids = [hit["id"] for hit in answer["memories"]]
            evidence = self.evidence_of(ids, threads)
            covered = [{dia_of[p] for p in evidence.get(i, ()) if p in dia_of} for i in ids]
            scored.append(
                {
                    "category": question.category,
                    "evidence": len(question.evidence),
                    **{f"R@{k}": recall(question.evidence, covered, k) for k in KS},
                }
            )
        return scored

    def conversation(self, index: int, conversation: Conversation, sessions: int | None) -> dict:
        agent = self.agent_for(index)
        principal = Principal(tenant=self.tenant, agent=agent)
        dia_of: dict[tuple[str, int], str] = {}
        chosen = conversation.sessions[:sessions] if sessions else conversation.sessions
        started = time.monotonic()
        run_ids: list[int] = []
        for session in chosen:
            t0 = time.monotonic()
            thread, mapping = self.ingest_session(principal, conversation, session)
            dia_of.update(mapping)
            ids = self.extract_thread(thread)
            run_ids += ids
            added = sum(
                (c or {}).get("added", 0)
                for c in ExtractionRun.objects.filter(pk__in=ids).values_list("counts", flat=True)
            )
            self.err(
                f"{conversation.sample_id} session {session.number}/{len(chosen)}: "
                f"{len(session.turns)} messages, {len(ids)} run(s), +{added} memories "
                f"({time.monotonic() - t0:.1f}s)"
            )
        if sessions:
            # Questions whose evidence lies in a session left out cannot be answered.
            kept = {turn.dia_id for s in chosen for turn in s.turns}
            conversation.questions = [q for q in conversation.questions if q.evidence <= kept]
        scored = self.score(principal, conversation, dia_of)
        seconds = time.monotonic() - started
        memories = Memory.objects.for_tenant(self.tenant).live().filter(agent=agent)
        result = {
            "sample_id": conversation.sample_id,
            "sessions": len(chosen),
            "messages": sum(len(s.turns) for s in chosen),
            "runs": len(run_ids),
            "memories_live": memories.count(),
            "questions": len(scored),
            "seconds": round(seconds, 1),
            **_recall_summary(scored),
        }
        self.err(
            f"{conversation.sample_id}: {result['memories_live']} memories, "
            f"{result['questions']} questions, R@{HEADLINE_K} "
            f"{result['overall'][f'R@{HEADLINE_K}']} ({seconds:.1f}s)"
        )
        result["_scored"] = scored
        result["_run_ids"] = run_ids
        return result


def _recall_summary(scored: list[dict]) -> dict:
    def mean(rows: list[dict]) -> dict:
        if not rows:
            return {"questions": 0, **{f"R@{k}": None for k in KS}}
        return {
            "questions": len(rows),
            **{f"R@{k}": round(100 * statistics.fmean(r[f"R@{k}"] for r in rows), 1) for k in KS},
        }

    by_category = {
        f"{number} {name}": mean([r for r in scored if r["category"] == number])
        for number, name in CATEGORIES.items()
    }
    return {"overall": mean(scored), "by_category": by_category}


def run_summary(tenant: Tenant, run_ids: list[int]) -> dict:
    rows = list(
        ExtractionRun.objects.for_tenant(tenant)
        .filter(pk__in=run_ids)
        .values(
            "state",
            "model",
            "prompt_version",
            "prompt_tokens",
            "completion_tokens",
            "llm_ms",
            "server_ms",
            "counts",
        )
    )
    outcomes: dict[str, int] = defaultdict(int)
    states: dict[str, int] = defaultdict(int)
    for row in rows:
        states[row["state"]] += 1
        for name, n in (row["counts"] or {}).items():
            outcomes[name] += n
    return {
        "runs": len(rows),
        "states": dict(states),
        "models": sorted({r["model"] for r in rows if r["model"]}),
        "prompt_versions": sorted({r["prompt_version"] for r in rows if r["prompt_version"]}),
        "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "completion_tokens": sum(r["completion_tokens"] for r in rows),
        "outcomes": dict(outcomes),
        "llm_ms": _timing([r["llm_ms"] for r in rows]),
        "server_ms": _timing([r["server_ms"] for r in rows]),
    }


def evaluate(
    *,
    path: Path,
    tenant: Tenant,
    conversations: int | None = None,
    sessions: int | None = None,
    roles: str = "user",
    err: Callable[[str], None] = print,
) -> dict:
    """Ingest, extract and score the first `conversations` conversations (all by default)."""
    data = load(path)
    subset = data[:conversations] if conversations else data
    evaluation = Evaluation(tenant=tenant, roles=roles, err=err)
    started = time.monotonic()
    per_conversation, scored, run_ids = [], [], []
    for index, conversation in enumerate(subset):
        result = evaluation.conversation(index, conversation, sessions)
        scored += result.pop("_scored")
        run_ids += result.pop("_run_ids")
        per_conversation.append(result)
    runs = run_summary(tenant, run_ids)
    return {
        "dataset": str(path),
        "dataset_sha256": dataset_sha256(path),
        "conversations": len(subset),
        "of_conversations": len(data),
        "sessions_per_conversation": sessions,
        "roles": roles,
        "sessions": sum(c["sessions"] for c in per_conversation),
        "messages": sum(c["messages"] for c in per_conversation),
        "questions": len(scored),
        "metric": (
            "evidence recall@k: a returned memory covers the LoCoMo turns its evidence "
            "messages map to; hybrid search with the question, top k"
        ),
        "recall": _recall_summary(scored),
        "memories_made": runs["outcomes"].get("added", 0),
        "memories_live": sum(c["memories_live"] for c in per_conversation),
        **runs,
        "per_conversation": per_conversation,
        "seconds": round(time.monotonic() - started, 1),
    }
