"""The memories app's models: memories and their history (`memory`), the kind registry
(`kinds`), caps, idempotency records and job runs (`bookkeeping`), conversations and the
extraction runs that form memories from them (`threads`), reads counted per day (`usage`), and
the change feed and its webhooks (`events`). Django finds models here."""

from memories.models.bookkeeping import (
    IdempotencyRecord,
    JobRun,
    JobRunQuerySet,
    OwnerCount,
    PruneRun,
    RunLease,
)
from memories.models.events import (
    EVENT_TYPES,
    MEMORY_EVENT_TYPES,
    POSITION_SEQUENCE,
    DeliveryState,
    Event,
    WebhookDelivery,
    WebhookEndpoint,
)
from memories.models.kind import Cardinality, Kind, MemoryType
from memories.models.memory import (
    EMBEDDING_DIM,
    PUBLIC_FIELDS,
    SEQUENCE_FIELDS,
    VECTOR_FIELDS,
    CaptureMode,
    Category,
    ChangeType,
    Memory,
    MemoryQuerySet,
    MemoryRevision,
    ReviewReason,
    ReviewState,
    Scope,
    Status,
)
from memories.models.thread import (
    MAX_MESSAGE_CHARS,
    MAX_SUMMARY_CHARS,
    OPEN_RUN_STATES,
    ExtractionRun,
    Message,
    Role,
    RunState,
    Thread,
)
from memories.models.usage import DASHBOARD_DAYS, DailyReads, RateLimitCounter

__all__ = [
    "DASHBOARD_DAYS",
    "EMBEDDING_DIM",
    "EVENT_TYPES",
    "MAX_MESSAGE_CHARS",
    "MAX_SUMMARY_CHARS",
    "MEMORY_EVENT_TYPES",
    "OPEN_RUN_STATES",
    "POSITION_SEQUENCE",
    "PUBLIC_FIELDS",
    "SEQUENCE_FIELDS",
    "VECTOR_FIELDS",
    "CaptureMode",
    "Cardinality",
    "Category",
    "ChangeType",
    "DailyReads",
    "DeliveryState",
    "Event",
    "ExtractionRun",
    "IdempotencyRecord",
    "JobRun",
    "JobRunQuerySet",
    "Kind",
    "Memory",
    "MemoryQuerySet",
    "MemoryRevision",
    "MemoryType",
    "Message",
    "OwnerCount",
    "PruneRun",
    "RateLimitCounter",
    "ReviewReason",
    "ReviewState",
    "Role",
    "RunLease",
    "RunState",
    "Scope",
    "Status",
    "Thread",
    "WebhookDelivery",
    "WebhookEndpoint",
]
