"""What the console calls things: jobs, schedules, run triggers and counters in words, where the
code knows them by identifier (`prune_memories`, `daily_pruned`, `blocked_by_correction`).

Only words live here; the identifiers stay what the API, the commands and the JSON of a run say.
An identifier without a label shows as itself with its underscores turned into spaces.
"""

from __future__ import annotations

# name → (label, what it does). Scheduled jobs by schedule name, `Run now` jobs by job name.
JOBS: dict[str, tuple[str, str]] = {
    "prune_memories": (
        "Prune expired memories",
        "Marks memories past their expiry or their category's lifetime as expired, and evicts "
        "the coldest over each agent's cap.",
    ),
    "purge_retention": (
        "Purge after retention",
        "Deletes tombstoned, evicted and expired memories after the retention period, old "
        "stored responses, the messages of long-ended threads, old events and the read counts "
        "of days the dashboard no longer charts.",
    ),
    "reembed": (
        "Re-embed memories",
        "Computes embeddings that are missing or come from another model than the configured one.",
    ),
    "backup": (
        "Back up the database",
        "Writes a whole-database backup into the backup directory and deletes the oldest "
        "beyond the number kept.",
    ),
    "extract_threads": (
        "Form memories from idle conversations",
        "Starts an extraction run for each thread that has been quiet past its due time.",
    ),
}

TRIGGERS = {
    "schedule": "on schedule",
    "console": "Run now",
    "command": "command line",
    "now": "on ingest (extract now)",
    "extract": "extract request",
    "end": "thread ended",
}

COUNTS = {
    # prune_memories
    "expired": "expired",
    "daily_pruned": "daily memories aged out",
    "conversation_ended": "conversation memories ended",
    "evicted": "evicted over a cap",
    "total": "in all",
    # purge_retention
    "memories_deleted": "memories deleted",
    "messages_deleted": "messages deleted",
    "idempotency_deleted": "stored responses deleted",
    "events_deleted": "events deleted",
    "reads_deleted": "days of read counts deleted",
    # reembed
    "candidates": "to embed",
    "embedded": "embedded",
    "skipped_changed": "skipped (changed meanwhile)",
    # backup
    "backups_kept": "backups kept",
    "backups_deleted": "old backups deleted",
    # an extraction run's outcomes (memories.formation.apply.OUTCOMES)
    "added": "added",
    "updated": "updated",
    "forgotten": "forgotten",
    "confirmed": "confirmed",
    "duplicate": "already known",
    "conflict": "changed meanwhile",
    "blocked_by_correction": "blocked by a correction",
    "secret_dropped": "dropped: held a secret",
    "low_confidence": "dropped: low confidence",
    "category_not_allowed": "dropped: category not allowed",
    "invalid": "invalid",
    "pending_review": "waiting for review",
}


def words(identifier: str) -> str:
    return identifier.replace("_", " ")


def job_label(name: str) -> str:
    return JOBS[name][0] if name in JOBS else words(name).capitalize()


def job_description(name: str) -> str:
    return JOBS[name][1] if name in JOBS else ""


def trigger_label(trigger: str) -> str:
    return TRIGGERS.get(trigger, words(trigger))


def count_label(key: str) -> str:
    return COUNTS.get(key, words(key))


_ORDER = {key: index for index, key in enumerate(COUNTS)}


def counts_text(counts: dict[str, int], *, skip_zeros: bool = False) -> str:
    """`{"total": 3, "expired": 3, "daily_pruned": 0}` → "3 expired, 0 daily memories aged
    out, 3 in all": in the order above (a stored run's keys come back sorted by the database),
    the total last."""
    keys = sorted(counts, key=lambda k: (k == "total", _ORDER.get(k, len(_ORDER)), k))
    return ", ".join(
        f"{counts[key]} {count_label(key)}" for key in keys if counts[key] or not skip_zeros
    )
