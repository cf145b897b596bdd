from __future__ import annotations

from datetime import datetime

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.core.exceptions import ObjectDoesNotExist
from django.db import connection, models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from accounts.models import Agent, Tenant, TenantQuerySet
from memories.ids import new_memory_id

EMBEDDING_DIM = 384


class Status(models.TextChoices):
    ACTIVE = "active", "Active"
    TOMBSTONED = "tombstoned", "Tombstoned"
    EVICTED = "evicted", "Evicted"
    EXPIRED = "expired", "Expired"


class ReviewState(models.TextChoices):
    NONE = "none", "None"
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"


class ReviewReason(models.TextChoices):
    """Why a memory waits for review, recorded when it becomes `pending` (the console says it)."""

    NEAR_DUPLICATE = "near_duplicate", "Stored next to a near-duplicate"
    INFERRED = "inferred", "Inferred by the agent"
    LOW_CONFIDENCE = "low_confidence", "Low confidence"
    AGENT_POLICY = "agent_policy", "Agent policy: every extracted memory is reviewed"


class CaptureMode(models.TextChoices):
    EXPLICIT = "explicit", "Explicit"
    INFERRED = "inferred", "Inferred"


class Scope(models.TextChoices):
    """Whom a memory belongs to: its agent, or the subject across every agent."""

    AGENT = "agent", "Agent"
    USER = "user", "User"


class Category:
    CORE = "core"
    DAILY = "daily"
    CONVERSATION = "conversation"
    WORKSPACE = "workspace"
    ARCHIVAL = "archival"
    BUILTIN = (CORE, DAILY, CONVERSATION, WORKSPACE, ARCHIVAL)


class MemoryQuerySet(TenantQuerySet["Memory"]):
    def live(self, now: datetime | None = None) -> MemoryQuerySet:
        """Active and not past `expires_at`: what every read may return."""
        now = now or timezone.now()
        return self.filter(status=Status.ACTIVE).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )


# A memory's full-text vector (tsvector): read only by search in SQL, and a large part of a row
# to decode, so reads that return or compare memories defer it. (Its embedding is not in the
# row at all: `MemoryVector`.)
VECTOR_FIELDS = ("search_vector",)

# A memory's place in its sequence, written only by the database (the triggers of
# memories/sql/memory_sequences.sql):
# not public, not backed up (an import's triggers derive them again).
SEQUENCE_FIELDS = ("prev_id", "next_id", "context_text")

# The public fields of a memory, in the order of the API's `memory` object: the one list that
# the API's JSON (`memory_json`, and `memory_json_sql` for hydrate), search hits, revision
# snapshots and JSONL backups derive theirs from. All are Memory fields (`agent` is the owner,
# shown by slug) but `source`, the viewer's relation to the owner (own, workspace, user,
# shared:<slug>). A new public field goes here, in the model and in a migration.
PUBLIC_FIELDS = (
    "id",
    "key",
    "category",
    "kind",
    "scope",
    "text",
    "data",
    "tags",
    "subject_id",
    "thread_id",
    "importance",
    "confidence",
    "capture_mode",
    "source_provider",
    "mentions",
    "occurred_at",
    "expires_at",
    "last_confirmed_at",
    "created_at",
    "updated_at",
    "version",
    "status",
    "review_state",
    "size_bytes",
    "agent",
    "source",
    "evidence",
)


class Memory(models.Model):
    id = models.CharField(primary_key=True, max_length=30, default=new_memory_id, editable=False)
    # No single-column index: every index of the table leads with tenant already.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="memories", db_index=False
    )
    # Owner; NULL for workspace memories, which belong to the whole tenant.
    agent = models.ForeignKey(
        Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="memories"
    )
    created_by = models.CharField(
        max_length=255
    )  # actor: agent:<slug> | operator:<email> | system:<job>
    key = models.CharField(max_length=255, null=True, blank=True)
    category = models.CharField(max_length=40, default=Category.CORE)
    kind = models.CharField(max_length=64, default="fact")
    # `user`: the subject's memory across every agent of the tenant (agent NULL, subject set).
    # Defaults in the database too: the jobs' and the bench's SQL insert rows without them.
    scope = models.CharField(
        max_length=8, choices=Scope.choices, default=Scope.AGENT, db_default=Scope.AGENT
    )
    # The kind's cardinality was `single` when the memory was written: what the
    # partial unique index `memory_live_single_uniq` needs, kept here because an index cannot
    # look at the kind registry. `services.kinds` rewrites it when a kind's cardinality changes.
    kind_single = models.BooleanField(default=False, db_default=False)
    text = models.TextField(blank=True, default="")
    data = models.JSONField(null=True, blank=True)
    tags = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    subject_id = models.CharField(max_length=255, null=True, blank=True)
    thread_id = models.CharField(max_length=255, null=True, blank=True)
    importance = models.FloatField(default=0.5)
    confidence = models.FloatField(default=1.0)
    capture_mode = models.CharField(
        max_length=16, choices=CaptureMode.choices, default=CaptureMode.EXPLICIT
    )
    source_provider = models.CharField(max_length=100, null=True, blank=True)
    mentions = models.JSONField(default=list, blank=True)
    # When the event the memory records happened; orders a thread's sequence.
    occurred_at = models.DateTimeField(null=True, blank=True)
    # The effective expiry: the earliest of `requested_expires_at`, the last write +
    # the owner's `max_retention` for the category, and the category's lifetime (daily 72 h,
    # conversation 24 h). Written with every write and recomputed when a policy changes
    # (`memories.retention`), so "live" stays `expires_at > now` on an index.
    expires_at = models.DateTimeField(null=True, blank=True)
    # What the writer asked for (`ttl`, `expires_at`, the agent's default TTL), capped by its
    # key's `memory_ttl`; not public.
    requested_expires_at = models.DateTimeField(null=True, blank=True)
    last_confirmed_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    last_accessed_at = models.DateTimeField(default=timezone.now)
    access_count = models.PositiveBigIntegerField(default=0)
    version = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    # When status last left `active` (tombstone, eviction, expiry): retention counts from here.
    status_changed_at = models.DateTimeField(null=True, blank=True)
    review_state = models.CharField(
        max_length=16, choices=ReviewState.choices, default=ReviewState.NONE
    )
    # Why it became `pending` (`ReviewReason`), set with it; not public. A database default, so
    # the jobs' and the bench's SQL inserts need not name it.
    review_reason = models.CharField(
        max_length=20, choices=ReviewReason.choices, blank=True, default="", db_default=""
    )
    size_bytes = models.PositiveIntegerField(default=0)
    # SHA-256 of the normalised text: exact-duplicate checks, and what survives a purge.
    content_hash = models.CharField(max_length=64, blank=True, default="")
    # The model of its embedding ("" when it has none); the vector itself is its `MemoryVector`
    # row, written with it (`memory.embedding = …` then a save or a revision write).
    embedding_model = models.CharField(max_length=100, blank=True, default="")
    # The memory's place in its sequence (owner, subject, thread_id ordered by occurred_at, else
    # created_at) and its neighbours' words, kept current by database triggers
    # (memories/sql/memory_sequences.sql); NULL outside a thread.
    prev_id = models.CharField(max_length=30, null=True, blank=True)
    next_id = models.CharField(max_length=30, null=True, blank=True)
    context_text = models.TextField(null=True, blank=True)
    # Full-text document: key + text weighted A, the neighbours' words weighted D (a short reply
    # is found by the words of the turn it answers); GIN-indexed for keyword and hybrid search.
    search_vector = models.GeneratedField(
        expression=SearchVector("key", "text", config="english", weight="A")
        + SearchVector("context_text", config="english", weight="D"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    tombstone_reason = models.TextField(blank=True, default="")
    tombstoned_by = models.CharField(max_length=255, blank=True, default="")
    tombstoned_at = models.DateTimeField(null=True, blank=True)
    purged_at = models.DateTimeField(null=True, blank=True)
    # A memory formed from a conversation: {"thread_id", "messages": [seq…], "run_id"}.
    evidence = models.JSONField(null=True, blank=True)

    objects = MemoryQuerySet.as_manager()

    class Meta:
        constraints = [
            # Keyed upsert: one live memory per (tenant, owner, subject, key); NULL owner/subject
            # (workspace, subject-less) compare equal; the scope tells a subject's user memory
            # from a workspace memory about that subject.
            models.UniqueConstraint(
                fields=["tenant", "agent", "scope", "subject_id", "key"],
                condition=Q(status="active") & Q(key__isnull=False),
                nulls_distinct=False,
                name="memory_live_key_uniq",
            ),
            # A `single` kind: one live memory per (tenant, owner, subject, kind).
            models.UniqueConstraint(
                fields=["tenant", "agent", "scope", "subject_id", "kind"],
                condition=Q(status="active") & Q(kind_single=True),
                nulls_distinct=False,
                name="memory_live_single_uniq",
            ),
            models.CheckConstraint(
                condition=Q(scope__in=["agent", "user"]), name="memory_scope_known"
            ),
            # A user memory belongs to its subject, no agent; never workspace or conversation.
            models.CheckConstraint(
                condition=Q(scope="agent")
                | (
                    Q(agent__isnull=True)
                    & Q(subject_id__isnull=False)
                    & ~Q(category__in=["workspace", "conversation"])
                ),
                name="memory_user_scope_owner",
            ),
            # A conversation memory needs its thread, in every status (nothing ever clears one).
            models.CheckConstraint(
                condition=~Q(category="conversation")
                | (Q(thread_id__isnull=False) & ~Q(thread_id="")),
                name="memory_conversation_thread",
            ),
            models.CheckConstraint(
                condition=Q(importance__gte=0) & Q(importance__lte=1),
                name="memory_importance_range",
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0) & Q(confidence__lte=1),
                name="memory_confidence_range",
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="memory_version_positive"),
            models.CheckConstraint(
                condition=Q(status__in=["active", "tombstoned", "evicted", "expired"]),
                name="memory_status_known",
            ),
        ]
        indexes = [
            # List API / console table: live memories of an agent, newest updated_at first.
            models.Index(
                F("tenant"),
                F("agent"),
                F("updated_at").desc(),
                F("id").desc(),
                condition=Q(status="active"),
                name="memory_live_list_idx",
            ),
            # List filtered by category, and hydration's core pool: one agent's live memories
            # of one category, walked newest first (id breaks ties, so no sort is needed).
            models.Index(
                F("tenant"),
                F("agent"),
                F("category"),
                F("updated_at").desc(),
                F("id").desc(),
                condition=Q(status="active"),
                name="memory_live_cat_idx",
            ),
            # Hydration and lists: the tenant's live workspace memories, newest first.
            models.Index(
                F("tenant"),
                F("updated_at").desc(),
                F("id").desc(),
                condition=Q(status="active", agent__isnull=True),
                name="memory_live_workspace_idx",
            ),
            # Subject-scoped reads (recall, list, hydrate for one end user).
            models.Index(
                F("tenant"),
                F("subject_id"),
                F("agent"),
                F("updated_at").desc(),
                condition=Q(status="active"),
                name="memory_live_subject_idx",
            ),
            # A subject's user memories: hydrate's user core block, lists, recall.
            models.Index(
                F("tenant"),
                F("subject_id"),
                F("category"),
                F("updated_at").desc(),
                F("id").desc(),
                condition=Q(status="active", scope="user"),
                name="memory_live_user_idx",
            ),
            # The kind registry: a kind's live memories, counted on the Kinds page
            # and checked when its schema or cardinality changes.
            models.Index(
                fields=["tenant", "kind"],
                condition=Q(status="active"),
                name="memory_live_kind_idx",
            ),
            # Thread end and conversation hydration.
            models.Index(
                fields=["tenant", "thread_id"],
                condition=Q(status="active") & Q(thread_id__isnull=False),
                name="memory_live_thread_idx",
            ),
            # Sequences (`memories.sequences`): a memory's neighbours in its thread, by one index
            # probe each way; NULL owner/subject coalesced so that equality can use the index.
            models.Index(
                F("tenant"),
                Coalesce("agent", Value(0)),
                Coalesce("subject_id", Value("")),
                F("thread_id"),
                Coalesce("occurred_at", "created_at"),
                F("id"),
                condition=Q(status="active") & Q(thread_id__isnull=False),
                name="memory_sequence_idx",
            ),
            # No index names `last_accessed_at` or `access_count`: a read's access bump then
            # changes no indexed column and is a HOT update (memories/access.py,
            # memories/sql/memory_storage.sql).
            # Hydrate: "does anything still fit the budget left?" without walking every row.
            models.Index(
                fields=["tenant", "agent", "size_bytes"],
                condition=Q(status="active"),
                name="memory_live_size_idx",
            ),
            # Exact-duplicate and previously-corrected checks by normalised text hash.
            models.Index(fields=["tenant", "content_hash"], name="memory_hash_idx"),
            # Console: filters by status / review queue (oldest pending first).
            models.Index(
                fields=["tenant", "status", "review_state", "created_at"], name="memory_review_idx"
            ),
            # Console: tombstones page, most recently forgotten first (the sort key is never
            # NULL: `memories.console.memory_selectors.tombstone_page`).
            models.Index(
                F("tenant"),
                Coalesce("status_changed_at", "updated_at").desc(),
                F("id").desc(),
                condition=Q(status="tombstoned"),
                name="memory_tombstone_page_idx",
            ),
            # Console: status filters and retention purge.
            models.Index(
                fields=["tenant", "status", "status_changed_at"],
                condition=~Q(status="active"),
                name="memory_inactive_idx",
            ),
            # Pruning: live memories with an expiry (a job across tenants, not a request path).
            models.Index(
                fields=["expires_at"],
                condition=Q(status="active") & Q(expires_at__isnull=False),
                name="memory_expiry_idx",
            ),
            # Pruning by age of daily/conversation memories.
            models.Index(
                fields=["category", "updated_at"],
                condition=Q(status="active") & Q(category__in=["daily", "conversation"]),
                name="memory_age_prune_idx",
            ),
            # Keyword search: full-text match within one owner's memories (btree_gin lets the
            # agent lead; an agent belongs to one tenant), and within a tenant's workspace ones.
            # A search ORs its owners' conditions; PostgreSQL scans each owner's part of these
            # indexes (a BitmapOr) instead of every match in the tenant. No `fastupdate`: its
            # pending list of new entries is read whole by every search until a vacuum merges
            # it.
            GinIndex(
                fields=["agent", "search_vector"], name="memory_fts_owner_idx", fastupdate=False
            ),
            GinIndex(
                fields=["tenant", "search_vector"],
                condition=Q(agent__isnull=True) & Q(status="active"),
                name="memory_fts_workspace_idx",
                fastupdate=False,
            ),
            # ... and within one subject's user memories.
            GinIndex(
                fields=["subject_id", "search_vector"],
                condition=Q(scope="user") & Q(status="active"),
                name="memory_fts_user_idx",
                fastupdate=False,
            ),
        ]

    def __str__(self) -> str:
        return self.id

    def save(self, *args, **kwargs) -> None:
        super().save(*args, **kwargs)
        # Its vector row, when one was set (`memory.embedding`): not a column of this row.
        statement = pending_vector_sql(self)
        if statement is not None:
            with connection.cursor() as cursor:
                cursor.execute(*statement)

    @property
    def embedding(self) -> list[float] | str | None:
        """The vector this instance was given, or its row's in the vectors' table (loaded with
        `select_related("vector")`, else read when asked); None when it has none. Setting it
        (None: remove it) is written with the memory's next save or revision
        (`memories.vectors.pending_vector_sql`)."""
        if "_embedding" in self.__dict__:
            return self.__dict__["_embedding"]
        if self._state.adding:
            return None
        try:
            return self.vector.embedding  # the reverse one-to-one
        except ObjectDoesNotExist:
            return None

    @embedding.setter
    def embedding(self, value: list[float] | str | None) -> None:
        self.__dict__["_embedding"] = value
        self.__dict__["_embedding_pending"] = True

    @property
    def owner_label(self) -> str:
        if self.agent_id:
            return self.agent.slug  # type: ignore[union-attr]  # agent_id is set
        return "user" if self.scope == Scope.USER else "workspace"


class ChangeType(models.TextChoices):
    CREATE = "create", "Create"
    UPDATE = "update", "Update"
    CORRECT = "correct", "Correction"
    CONFIRM = "confirm", "Confirm"
    APPROVE = "approve", "Approve"
    TOMBSTONE = "tombstone", "Tombstone"
    RESTORE = "restore", "Restore"
    EXPIRE = "expire", "Expiry"
    EVICT = "evict", "Eviction"
    PURGE = "purge", "Purge"
    MERGE = "merge", "Merge"
    IMPORT = "import", "Import"


def vector_literal(vector) -> str:
    """A vector as pgvector's text input (`[0.1,0.2,…]`), for written-out SQL."""
    return "[" + ",".join(map(repr, map(float, vector))) + "]"


# A memory's vector row, written with the memory (`pending_vector_sql`). Its owner never changes:
# a rewrite changes the model and the vector only.
VECTOR_COLUMNS = "memory_id, tenant_id, agent_id, subject_id, model, embedding"
VECTOR_UPSERT = (
    f"INSERT INTO memories_memoryvector ({VECTOR_COLUMNS}) VALUES {{rows}} "
    "ON CONFLICT (memory_id) DO UPDATE SET model = EXCLUDED.model, embedding = EXCLUDED.embedding"
)
VECTOR_ROW = "(%s, %s, %s, %s, %s, %s::vector)"


def vector_row(memory: Memory, vector) -> list:
    """`VECTOR_ROW`'s values: the memory's vector row, with its `embedding_model`."""
    literal = vector if isinstance(vector, str) else vector_literal(vector)
    return [
        memory.pk,
        memory.tenant_id,
        memory.agent_id,
        memory.subject_id,
        memory.embedding_model,
        literal,
    ]


def pending_vector_sql(memory: Memory) -> tuple[str, list] | None:
    """The statement writing what was set as `memory.embedding` since it was last written (an
    upsert, or a delete for None), or None when nothing was; marks it written."""
    if not memory.__dict__.pop("_embedding_pending", False):
        return None
    vector = memory.__dict__.get("_embedding")
    if vector is None or not memory.embedding_model:
        if memory._state.adding:  # a new memory has no row to remove
            return None
        return "DELETE FROM memories_memoryvector WHERE memory_id = %s", [memory.pk]
    return VECTOR_UPSERT.format(rows=VECTOR_ROW), vector_row(memory, vector)


class MemoryVector(models.Model):
    """A memory's embedding, in a narrow table of its own: the semantic search's exact scan and
    HNSW walk and a store's look-alike check read vectors without reading memory rows (a vector
    in the memory row was stored out of line, in TOAST, and read through it).

    Its owner columns repeat the memory's (which never change), so a scope's vectors can be
    read without the memory rows; `embedding` is stored PLAIN (inline, uncompressed). The
    foreign key deletes it with its memory in the database (`ON DELETE CASCADE`, migration
    0004), so a purge or a tenant's deletion by SQL leaves none behind."""

    memory = models.OneToOneField(
        Memory,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        related_name="vector",
        # The migration declares the key itself, with ON DELETE CASCADE (Django's cannot).
        db_constraint=False,
    )
    # Indexed by `memory_vector_owner_idx` only: every index is one more to update per store.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False
    )
    agent = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
    )
    subject_id = models.CharField(max_length=255, null=True, blank=True)
    model = models.CharField(max_length=100)
    embedding = VectorField(dimensions=EMBEDDING_DIM)

    class Meta:
        indexes = [
            # A scope's vectors, in owner order (the exact scan of a small scope).
            models.Index(fields=["tenant", "agent", "subject_id"], name="memory_vector_owner_idx"),
            # Semantic search: approximate cosine nearest neighbours (the memory's status and
            # visibility are the join's filters, with iterative index scans).
            HnswIndex(
                name="memory_vector_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return self.memory_id


class MemoryRevision(models.Model):
    """Append-only history of a memory: one row per change, with actor and before/after."""

    # No single-column index: every index of the table leads with tenant already.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="revisions", db_index=False
    )
    # No database constraint: the history outlives a memory that retention hard-deletes.
    memory = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, related_name="revisions"
    )
    version = models.PositiveIntegerField()
    actor = models.CharField(max_length=255)
    change_type = models.CharField(max_length=16, choices=ChangeType.choices)
    reason = models.TextField(blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()
    # The start of its memory's text, set for the console's lists (no column).
    memory_label: str

    class Meta:
        indexes = [
            # Memory detail: a memory's history in order.
            models.Index(fields=["tenant", "memory", "id"], name="revision_memory_idx"),
            # Activity page: the tenant's audit log, newest first, filterable by actor and type.
            models.Index(F("tenant"), F("created_at").desc(), name="revision_recent_idx"),
            models.Index(fields=["tenant", "actor", "created_at"], name="revision_actor_idx"),
            models.Index(fields=["tenant", "change_type", "created_at"], name="revision_type_idx"),
        ]
        constraints = [
            # One revision per version of a memory: every writer bumps the version with the
            # change it records; JSONL import reads a memory's newest version through it.
            models.UniqueConstraint(
                fields=["tenant", "memory", "version"], name="revision_version_uniq"
            ),
        ]
