"""The agent REST API (docs/api.md): thin views that parse the request, call a service or selector
and render its result. Every rule (scopes, visibility, validation, CAS) lives in the services;
every error becomes the envelope through `memoryhub.errors.api_exception_handler`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import orjson
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.principal import Principal
from memories import idempotency, selectors, validation
from memories.api import schema
from memories.ratelimit import KeyRateThrottle
from memories.responses import store_response
from memories.serialization import iso, memory_json
from memories.services import changes, lifecycle, store


def _principal(request: Request) -> Principal:
    """The key's principal: what `ApiKeyAuthentication` makes a request's user."""
    return cast(Principal, request.user)


def query_subject(request: Request) -> str | None:
    return request.query_params.get("subject_id") or None


def _memory_body(request: Request, memory) -> dict[str, Any]:
    return {"ok": True, "memory": memory_json(memory, agent=_principal(request).agent)}


def _with_etag(response: Response, memory) -> Response:
    response["ETag"] = f'"{memory.version}"'
    return response


def idempotent_response(
    request: Request,
    operation: str,
    payload: Any,
    action: Callable[[Any], tuple[int, dict]],
    prepare: Callable[[], Any] | None = None,
    seal: Callable[[dict], dict] | None = None,
    unseal: Callable[[dict], dict] | None = None,
) -> Response:
    """Answer a POST through `idempotency.respond` with the request's `Idempotency-Key`."""
    outcome = idempotency.respond(
        principal=_principal(request),
        operation=operation,
        payload=payload,
        key=request.headers.get("Idempotency-Key"),
        action=action,
        prepare=prepare,
        seal=seal,
        unseal=unseal,
    )
    return Response(outcome.body, status=outcome.status)


def _forget(request: Request, **target: str) -> Response:
    """DELETE by id or by key: `reason` from the query or the body, `purge` from the query."""
    reason = request.query_params.get("reason")
    if reason is None and isinstance(request.data, dict):
        reason = request.data.get("reason")
    purge = validation.parse_bool(request.query_params.get("purge"), "purge", default=False)
    deleted, forgotten_id = lifecycle.memory_forget(
        principal=_principal(request),
        subject_id=query_subject(request),
        reason=reason or "",
        purge=purge,
        **target,  # type: ignore[arg-type]  # memory_id= or key=, a str
    )
    return Response({"ok": True, "deleted": deleted, "memory_id": forgotten_id})


class AgentAPIView(APIView):
    # Bearer-key auth (the project default) plus the per-key rate limit. A comment, not a
    # docstring: drf-spectacular would show an inherited docstring as every operation's text.
    throttle_classes = [KeyRateThrottle]


class WhoAmIView(AgentAPIView):
    """The calling agent and its key's scopes (handy for checking a key)."""

    @extend_schema(
        operation_id="whoami",
        responses={200: schema.WhoAmISerializer, **schema.READ_ERRORS},
    )
    def get(self, request):
        principal = request.user
        return Response(
            {
                "ok": True,
                "tenant": principal.tenant.slug,
                "agent": principal.agent.slug,
                "scopes": sorted(principal.scopes),
                "subject_id": principal.bound_subject,
            }
        )


class MemoriesView(AgentAPIView):
    @extend_schema(
        operation_id="memories_list",
        description=(
            "The live memories this key can see: the agent's own, the workspace's and, unless "
            "`include_shared=false`, those of the agents in its `reads_from` (never their "
            "`conversation` memories). Without a subject only subject-less memories are listed. "
            "Newest `updated_at` first; follow `next_cursor`: a walk returns every memory "
            "visible at its `as_of` exactly once, and every page carries that `as_of`: sync "
            "again with `updated_after=<as_of>` to miss no write (a write still in flight when "
            "the walk began is stamped after it). `tag` repeats (all must be present); "
            "`key_prefix` keeps the keys that start with it (a namespace)."
        ),
        summary="List memories, newest first (keyset cursor)",
        parameters=[schema.ListQuerySerializer],
        responses={200: schema.ListResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request):
        params = request.query_params
        filters: dict[str, Any] = {
            name: params.get(name)
            for name in selectors.LIST_FILTERS - {"tag", "tags"}
            if params.get(name) not in (None, "")
        }
        tags = params.getlist("tag") + params.getlist("tags")
        if tags:
            filters["tag"] = tags
        memories, next_cursor, as_of = selectors.memory_list_json(
            principal=request.user, filters=filters
        )
        return Response(
            {
                "ok": True,
                "memories": [orjson.Fragment(text) for text in memories],
                "next_cursor": next_cursor,
                "as_of": iso(as_of),
            }
        )

    @extend_schema(
        operation_id="memories_store",
        description=(
            "With `key`: an upsert. Storing the key again updates that memory in place "
            "(`version` + 1, a revision); `expected_version` / `expected_updated_at` make it "
            "compare-and-set (409 CONFLICT with `details.current_version`; 0 / null: create "
            "only). Without `key`, `dedup_policy` decides: `ask` inserts and lists near "
            "duplicates, `skip_if_near` stores nothing when one exists, `insert` never checks. "
            "Every free-text field (text, data, tags, key, kind, mentions, ids, source_provider, "
            "Idempotency-Key) is scanned for secrets (422 SECRET_REJECTED, nothing "
            "stored). 201 when inserted, 200 when updated or skipped."
        ),
        summary="Store a memory (keyed upsert, compare-and-set, dedup)",
        parameters=[schema.IDEMPOTENCY_PARAM],
        request=schema.StoreRequestSerializer,
        responses={
            201: OpenApiResponse(schema.StoreResponseSerializer, description="Inserted"),
            200: OpenApiResponse(schema.StoreResponseSerializer, description="Updated or skipped"),
            **schema.WRITE_ERRORS,
        },
    )
    def post(self, request):
        principal, data = request.user, request.data
        return idempotent_response(
            request,
            "store",
            data,
            lambda prepared: store_response(
                store.memory_store_write(prepared=prepared), agent=principal.agent
            ),
            prepare=lambda: store.memory_store_prepare(principal=principal, data=data),
        )


class MemoryDetailView(AgentAPIView):
    @extend_schema(
        operation_id="memories_get",
        description=(
            "One memory by id. 404 NOT_FOUND when it does not exist or this key cannot see it "
            "(the same body either way). Bumps `last_accessed_at`. The `ETag` is the version, "
            "for `If-Match` on PATCH."
        ),
        parameters=[schema.MEMORY_ID_PARAM, schema.SUBJECT_PARAM],
        responses={200: schema.MemoryResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request, memory_id: str):
        memory = selectors.memory_get(
            principal=request.user, memory_id=memory_id, subject_id=query_subject(request)
        )
        return _with_etag(Response(_memory_body(request, memory)), memory)

    @extend_schema(
        operation_id="memories_update",
        description=(
            "Changes only the fields given (one revision, `version` + 1; new text is "
            "re-embedded). Compare-and-set with `expected_version`, `expected_updated_at` or "
            "`If-Match` (409 CONFLICT with `details.current_version`). Memories shared through "
            "`reads_from` are read-only (403 SCOPE_DENIED)."
        ),
        parameters=[schema.MEMORY_ID_PARAM, schema.SUBJECT_PARAM, schema.IF_MATCH_PARAM],
        request=schema.UpdateRequestSerializer,
        responses={200: schema.MemoryResponseSerializer, **schema.WRITE_ERRORS},
    )
    def patch(self, request, memory_id: str):
        memory = changes.memory_update(
            principal=request.user,
            memory_id=memory_id,
            data=request.data,
            if_match=request.headers.get("If-Match"),
            subject_id=query_subject(request),
        )
        return _with_etag(Response(_memory_body(request, memory)), memory)

    @extend_schema(
        operation_id="memories_forget",
        description=(
            "Forget a memory: it is tombstoned (kept, so a later store of the same fact reports "
            "`previously_corrected`; an operator can restore it). `purge=true` (admin scope) "
            "erases its text, data and embedding, also from its history. `deleted: false` when "
            "it was forgotten already."
        ),
        parameters=[schema.MEMORY_ID_PARAM, *schema.FORGET_PARAMS],
        request=None,
        responses={200: schema.ForgetResponseSerializer, **schema.WRITE_ERRORS},
    )
    def delete(self, request, memory_id: str):
        return _forget(request, memory_id=memory_id)


class MemoryConfirmView(AgentAPIView):
    @extend_schema(
        operation_id="memories_confirm",
        description=(
            "Re-confirms a fact: `last_confirmed_at` becomes now (a change: `version` + 1, a "
            "revision). With `Idempotency-Key` a retry replays the first response."
        ),
        summary="Confirm a memory (last_confirmed_at = now)",
        parameters=[schema.MEMORY_ID_PARAM, schema.SUBJECT_PARAM, schema.IDEMPOTENCY_PARAM],
        request=None,
        responses={200: schema.MemoryResponseSerializer, **schema.WRITE_ERRORS},
    )
    def post(self, request, memory_id: str):
        subject_id = query_subject(request)

        def action(_) -> tuple[int, dict]:
            memory = changes.memory_confirm(
                principal=request.user, memory_id=memory_id, subject_id=subject_id
            )
            return 200, _memory_body(request, memory)

        payload = {"memory_id": memory_id, "subject_id": subject_id}
        return idempotent_response(request, "confirm", payload, action)


class MemoryByKeyView(AgentAPIView):
    @extend_schema(
        operation_id="memories_recall",
        description=(
            "The live memory stored under `key`, or `memory: null`. When several owners use the "
            "key, the agent's own wins over the workspace's over a shared one, and the "
            "subject's own over a subject-less one. Bumps `last_accessed_at`."
        ),
        summary="Recall the memory stored under a key (memory: null when none)",
        parameters=[schema.KEY_PARAM, schema.SUBJECT_PARAM],
        responses={200: schema.RecallResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request, key: str):
        memory = selectors.memory_recall(
            principal=request.user, key=key, subject_id=query_subject(request)
        )
        if memory is None:
            return Response({"ok": True, "memory": None})
        return _with_etag(Response(_memory_body(request, memory)), memory)

    @extend_schema(
        operation_id="memories_forget_by_key",
        description=(
            "Forgets the live memory under `key` like DELETE by id; `deleted: false` and "
            "`memory_id: null` when there is none. With `purge=true` every memory that ever "
            "held the key is erased."
        ),
        parameters=[schema.KEY_PARAM, *schema.FORGET_PARAMS],
        request=None,
        responses={200: schema.ForgetResponseSerializer, **schema.WRITE_ERRORS},
    )
    def delete(self, request, key: str):
        return _forget(request, key=key)


class KeysView(AgentAPIView):
    @extend_schema(
        operation_id="keys_list",
        description=(
            "The sorted distinct keys of the live memories this key can see (for the subject, "
            "optionally one category, optionally only those starting with `key_prefix`)."
        ),
        summary="The keys of the memories this key can see",
        parameters=[schema.SUBJECT_PARAM, schema.CATEGORY_PARAM, schema.KEY_PREFIX_PARAM],
        responses={200: schema.KeysResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request):
        keys = selectors.memory_keys(
            principal=request.user,
            subject_id=query_subject(request),
            category=request.query_params.get("category") or None,
            key_prefix=request.query_params.get("key_prefix") or None,
        )
        return Response({"ok": True, "keys": keys})
