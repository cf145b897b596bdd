"""LoCoMo evidence recall through the public API (the metric: docs/benchmarks.md, "The LoCoMo
dataset").

Every turn of a conversation is stored as one memory (`POST /api/v1/memories`, one agent per
conversation, text = "<speaker>: <text>" plus the image caption if any); each question is asked
through `POST /api/v1/search` in each mode, and evidence recall@k = |evidence ∩ top-k| /
|evidence| is averaged over the questions (category 5 and questions without evidence excluded).
With `metadata`, each turn also carries what a conversation gives an agent: `thread_id` (its
session), `occurred_at` (the session's time, turns a second apart) and the speaker as a mention;
without it, only the text (the run before context-aware ranking, and a store that sends none).
The dataset is read where it lies; nothing of it is copied into the repository.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.server import Progress, api_client

KS = (1, 5, 10, 20)
MODES = ("keyword", "semantic", "hybrid")


@dataclass
class Turn:
    dia_id: str
    text: str
    metadata: dict = field(default_factory=dict)


@dataclass
class Question:
    question: str
    evidence: set[str]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]


def turn_text(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares {turn['blip_caption']}]"
    return text


def session_time(value: str) -> datetime:
    """A session's date and time as the dataset writes it ("1:56 pm on 8 May, 2023"), as UTC."""
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def session_turns(conv: dict, n: int) -> list[Turn]:
    """Session `n`'s turns, each with its metadata: the session as thread, the session's time
    plus one second per turn, the speaker as a mention."""
    start = session_time(conv[f"session_{n}_date_time"])
    return [
        Turn(
            t["dia_id"],
            turn_text(t),
            {
                "thread_id": f"session-{n}",
                "occurred_at": (start + timedelta(seconds=i)).isoformat(),
                "mentions": [{"name": t["speaker"], "type": "person"}],
            },
        )
        for i, t in enumerate(conv[f"session_{n}"])
    ]


def evidence_ids(raw: list[str]) -> set[str]:
    """Evidence ids, with the few malformed ones ("D8:6; D9:17") split apart."""
    return {part.strip() for item in raw for part in str(item).split(";") if part.strip()}


def load(path: Path) -> list[Conversation]:
    conversations = []
    for sample in json.loads(Path(path).read_text()):
        conv = sample["conversation"]
        turns = []
        n = 1
        while f"session_{n}" in conv:
            turns.extend(session_turns(conv, n))
            n += 1
        questions = [
            Question(q["question"], evidence_ids(q.get("evidence") or []))
            for q in sample["qa"]
            if q.get("category") != 5 and evidence_ids(q.get("evidence") or [])
        ]
        conversations.append(Conversation(sample["sample_id"], turns, questions))
    return conversations


CONCURRENCY = 4


def turn_body(turn: Turn, *, metadata: bool) -> dict:
    """The body of `POST /api/v1/memories` that stores a turn: archival, every turn kept (no
    look-alike merging, so each turn's evidence id stays findable), with its metadata or not."""
    body = {"text": turn.text, "category": "archival", "dedup_policy": "insert"}
    return body | (turn.metadata if metadata else {})


def store_conversation(
    client, conversation: Conversation, progress: Progress, *, metadata: bool
) -> dict[str, str]:
    """Store every turn (a few requests in flight); returns memory id → dia_id."""

    def post(turn: Turn):
        return client.post("/api/v1/memories", json=turn_body(turn, metadata=metadata))

    dia_of: dict[str, str] = {}
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        responses = list(pool.map(post, conversation.turns))
    for turn, response in zip(conversation.turns, responses, strict=True):
        progress.advance()
        if response.status_code == 422:  # e.g. a turn that looks like a secret: not stored
            continue
        if response.status_code not in (200, 201):
            raise RuntimeError(f"LoCoMo store failed: {response.status_code} {response.text}")
        dia_of[response.json()["memory_id"]] = turn.dia_id
    return dia_of


def evidence_recall(evidence: set[str], ranked: list[str | None], k: int) -> float:
    """The share of a question's evidence turns among the first `k` ranked (their dia ids)."""
    return len(evidence & set(ranked[:k])) / len(evidence)


def score(client, conversation: Conversation, dia_of: dict[str, str], mode: str, sums, timings):
    def ask(question: Question):
        started = time.perf_counter()
        response = client.post(
            "/api/v1/search", json={"query": question.question, "mode": mode, "limit": max(KS)}
        )
        return response, (time.perf_counter() - started) * 1000

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        answers = list(pool.map(ask, conversation.questions))
    for question, (response, elapsed) in zip(conversation.questions, answers, strict=True):
        timings.append(elapsed)
        if response.status_code != 200:
            raise RuntimeError(f"LoCoMo search failed: {response.status_code} {response.text}")
        ranked = [dia_of.get(hit["id"]) for hit in response.json()["memories"]]
        for k in KS:
            sums[k] += evidence_recall(question.evidence, ranked, k)


# Weights are fitted on the first half of the conversations and reported on the second too.
HALVES = {"0-4": range(0, 5), "5-9": range(5, 10)}
VARIANTS = {"metadata": True, "plain": False}


def _recall(sums: dict[int, float], count: int) -> dict[str, float]:
    return {f"R@{k}": round(100 * sums[k] / max(count, 1), 1) for k in KS}


def run_locomo(
    *,
    path: Path,
    base_url: str,
    key_for_conversation: Callable[[int, str], str],
    conversations: int | None = None,
    questions: int | None = None,
    out: Callable[[str], None] = print,
) -> dict:
    """Load the (first `conversations`) conversations and score every mode, stored with their
    metadata and without (`key_for_conversation(index, variant)`: one agent for each)."""
    data = load(path)
    subset = data[:conversations] if conversations else data
    if questions:
        for conversation in subset:
            conversation.questions = conversation.questions[:questions]
    turns = sum(len(c.turns) for c in subset)
    scored = sum(len(c.questions) for c in subset)
    results: dict = {
        "dataset": str(path),
        "conversations": len(subset),
        "of_conversations": len(data),
        "turns": turns,
        "questions": scored,
        "runs": {},
    }
    for variant, metadata in VARIANTS.items():
        run = _run_variant(subset, base_url, key_for_conversation, variant, metadata, out)
        results["runs"][variant] = run
    # The headline figures: the turns as an agent stores them, with their metadata.
    results["modes"] = results["runs"]["metadata"]["modes"]
    return results


def _run_variant(subset, base_url, key_for_conversation, variant, metadata, out) -> dict:
    label = "with metadata" if metadata else "text only"
    progress = Progress(
        f"storing LoCoMo turns via POST /api/v1/memories ({label})",
        sum(len(c.turns) for c in subset),
    )
    stores = []
    for index, conversation in enumerate(subset):
        with api_client(base_url, key_for_conversation(index, variant)) as client:
            started = time.monotonic()
            stores.append(store_conversation(client, conversation, progress, metadata=metadata))
            conversation_seconds = time.monotonic() - started
    progress.close()
    run: dict = {"last_conversation_store_seconds": round(conversation_seconds, 1), "modes": {}}
    for mode in MODES:
        sums = {index: dict.fromkeys(KS, 0.0) for index in range(len(subset))}
        timings: list[float] = []
        for index, conversation in enumerate(subset):
            with api_client(base_url, key_for_conversation(index, variant)) as client:
                score(client, conversation, stores[index], mode, sums[index], timings)
        total = {k: sum(part[k] for part in sums.values()) for k in KS}
        recall: dict = _recall(total, sum(len(c.questions) for c in subset))
        timings.sort()
        # Requests run CONCURRENCY at a time here: this is a load figure, not the latency bench.
        recall["search_p50_ms_concurrent"] = (
            round(timings[len(timings) // 2], 1) if timings else None
        )
        recall["halves"] = {
            name: _recall(
                {k: sum(sums[i][k] for i in members if i in sums) for k in KS},
                sum(len(subset[i].questions) for i in members if i < len(subset)),
            )
            for name, members in HALVES.items()
            if members[0] < len(subset)
        }
        run["modes"][mode] = recall
        out(
            f"LoCoMo {mode} ({label}): "
            + ", ".join(f"{k} {v}" for k, v in recall.items() if k != "halves")
        )
    return run
