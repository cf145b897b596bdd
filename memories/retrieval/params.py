"""The bodies of `POST /api/v1/search` and `POST /api/v1/hydrate` (and their MCP tools), parsed.

Both arrive as raw JSON objects (REST body or MCP arguments) and are validated here with the
store API's rules (`memories.validation`), so both paths share every rule and error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, overload

from django.conf import settings

from accounts.principal import Principal
from memories import validation
from memoryhub.errors import InvalidInput

MODES = ("hybrid", "semantic", "keyword")
ARCHIVAL_MODES = ("tool_only", "auto", "off")
MAX_LIMIT = 100
MAX_QUERY_CHARS = 4000
SEARCH_FIELDS = frozenset(
    {
        "query",
        "mode",
        "limit",
        "min_score",
        "category",
        "categories",
        "kind",
        "tags",
        "subject_id",
        "thread_id",
        "session_id",
        "include_shared",
        "include_history",
        "key_prefix",
    }
)
HYDRATE_FIELDS = frozenset(
    {
        "subject_id",
        "thread_id",
        "session_id",
        "budget_bytes",
        "query",
        "archival_mode",
        "archival_limit",
        "archival_min_score",
        "include_agent_core",
        "include_user_core",
        "format",
        "explain",
    }
)


@overload
def _query(data: dict[str, Any], *, required: Literal[True]) -> str: ...
@overload
def _query(data: dict[str, Any], *, required: bool) -> str | None: ...
def _query(data: dict[str, Any], *, required: bool) -> str | None:
    value = data.get("query")
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InvalidInput("'query' is required", field="query")
        return None
    if not isinstance(value, str):
        raise InvalidInput("'query' must be a string", field="query")
    if len(value) > MAX_QUERY_CHARS:
        raise InvalidInput(f"'query' is longer than {MAX_QUERY_CHARS} characters", field="query")
    return value.strip()


def _int(data: dict[str, Any], name: str, default: int, *, low: int, high: int) -> int:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"'{name}' must be an integer {low}–{high}", field=name)
    return value


def _categories(data: dict[str, Any]) -> list[str]:
    out = []
    if data.get("category") is not None:
        out.append(validation.category(data["category"], default=""))
    listed = data.get("categories")
    if listed is not None:
        if not isinstance(listed, list) or len(listed) > 64:
            raise InvalidInput("'categories' must be a list of category names", field="categories")
        for item in listed:
            try:
                out.append(validation.category(item, default=""))
            except InvalidInput:
                raise InvalidInput(
                    "'categories' must be a list of category names", field="categories"
                ) from None
    return list(dict.fromkeys(out))


def _tag_filter(value: Any) -> list[str]:
    return validation.tags([value] if isinstance(value, str) else value)


@dataclass
class SearchParams:
    query: str
    mode: str = "hybrid"
    limit: int = 10
    min_score: float | None = None
    categories: list[str] = field(default_factory=list)
    kind: str | None = None
    tags: list[str] = field(default_factory=list)
    subject_id: str | None = None
    thread_id: str | None = None
    include_shared: bool = True
    include_history: bool = False
    key_prefix: str | None = None


def parse_search(principal: Principal, data: Any) -> SearchParams:
    data = validation.require_object(data)
    validation.reject_unknown(data, SEARCH_FIELDS)
    min_score = data.get("min_score")
    kind = data.get("kind")
    return SearchParams(
        query=_query(data, required=True),
        mode=validation.choice(data.get("mode"), "mode", MODES, "hybrid"),
        limit=validation.parse_limit(data.get("limit"), default=10, maximum=MAX_LIMIT),
        min_score=None if min_score is None else validation.unit_float(min_score, "min_score"),
        categories=_categories(data),
        kind=None if kind is None else validation.kind(kind),
        tags=_tag_filter(data.get("tags")),
        subject_id=principal.resolve_subject(
            validation.identifier(data.get("subject_id"), "subject_id")
        ),
        thread_id=validation.thread(data),
        include_shared=validation.parse_bool(data.get("include_shared"), "include_shared", True),
        include_history=validation.parse_bool(
            data.get("include_history"), "include_history", False
        ),
        key_prefix=validation.key_prefix(data.get("key_prefix")),
    )


@dataclass
class HydrateParams:
    subject_id: str | None
    thread_id: str | None
    budget_bytes: int
    query: str | None
    archival_mode: str
    archival_limit: int
    archival_min_score: float
    include_agent_core: bool
    include_user_core: bool
    format: str
    explain: bool


def parse_hydrate(principal: Principal, data: Any) -> HydrateParams:
    data = validation.require_object(data)
    validation.reject_unknown(data, HYDRATE_FIELDS)
    min_score = data.get("archival_min_score")
    return HydrateParams(
        subject_id=principal.resolve_subject(
            validation.identifier(data.get("subject_id"), "subject_id")
        ),
        thread_id=validation.thread(data),
        budget_bytes=_int(
            data,
            "budget_bytes",
            principal.agent.hydration_budget_bytes,
            low=0,
            high=settings.DATA_UPLOAD_MAX_MEMORY_SIZE * 16,
        ),
        query=_query(data, required=False),
        archival_mode=validation.choice(
            data.get("archival_mode"), "archival_mode", ARCHIVAL_MODES, "tool_only"
        ),
        archival_limit=_int(data, "archival_limit", 5, low=0, high=MAX_LIMIT),
        archival_min_score=(
            0.3 if min_score is None else validation.unit_float(min_score, "archival_min_score")
        ),
        include_agent_core=validation.parse_bool(
            data.get("include_agent_core"), "include_agent_core", True
        ),
        include_user_core=validation.parse_bool(
            data.get("include_user_core"), "include_user_core", True
        ),
        format=validation.choice(data.get("format"), "format", ("json", "markdown"), "json"),
        explain=validation.parse_bool(data.get("explain"), "explain", False),
    )
