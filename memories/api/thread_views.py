"""Conversations: a thread's messages in and out, its extraction and its end. Thin
views over `memories.formation` and the services; every POST goes through
`idempotency.respond`.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from memories.api import conversation_schema, schema
from memories.api.views import AgentAPIView, idempotent_response, query_subject
from memories.formation import ingest, thread_actions
from memories.responses import ingest_response
from memories.serialization import message_json, thread_json
from memoryhub.parsers import JSONParser

THREAD_NOT_FOUND = (
    "404 NOT_FOUND (the same body) for another agent's, subject's or tenant's thread."
)


class StreamedJSONParser(BaseParser):
    """JSON read from the request stream. DRF hands a `JSONParser` the whole of
    `request.body`, which Django caps at `DATA_UPLOAD_MAX_MEMORY_SIZE` (the 1 MiB of every other
    endpoint); a batch of messages may be larger, up to `MEMORYHUB_MAX_MESSAGES_BODY_BYTES`,
    which `ApiErrorMiddleware` enforces from Content-Length before the view runs. Parsing is
    the API's `memoryhub.parsers.JSONParser` (JSON nested too deep → 400, as everywhere)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        return JSONParser().parse(stream, media_type, parser_context)


class ThreadMessagesView(AgentAPIView):
    parser_classes = [StreamedJSONParser]

    @extend_schema(
        operation_id="threads_messages_add",
        description=(
            "Hands MemoryHub a batch of a conversation (1–100 messages, oldest first); memories "
            "are formed from it in the background. The thread is created on first use, per "
            "agent and `subject_id`. Secret spans are replaced by `[redacted:<rule>]` before "
            "anything is stored. A message equal to one the thread holds (role, content and "
            "`created_at` as given) is skipped and counted in `duplicates`, so a whole "
            "conversation can be resent: give `created_at` to resend safely. `extract`: `auto` "
            "schedules an extraction once the thread is idle, `now` queues one, `off` only "
            "stores. Without an LLM the messages are kept and `extraction.state` is `disabled`."
        ),
        summary="Add messages to a thread (memories are formed in the background)",
        parameters=[schema.THREAD_PARAM, schema.IDEMPOTENCY_PARAM],
        request=conversation_schema.IngestRequestSerializer,
        responses={
            202: OpenApiResponse(
                conversation_schema.IngestResponseSerializer, description="Accepted"
            ),
            **schema.WRITE_ERRORS,
        },
    )
    def post(self, request, thread_id: str):
        principal, data = request.user, request.data
        return idempotent_response(
            request,
            "thread_messages",
            {"thread_id": thread_id, "body": data},
            lambda _: ingest_response(
                ingest.thread_messages_add(principal=principal, thread_id=thread_id, data=data)
            ),
        )

    @extend_schema(
        operation_id="threads_messages_list",
        description=(
            "The thread's messages in `seq` order, as stored (secret spans redacted). Follow "
            f"`next_cursor` for the next page. {THREAD_NOT_FOUND}"
        ),
        summary="Page a thread's messages",
        parameters=[schema.THREAD_PARAM, conversation_schema.MessagesQuerySerializer],
        responses={200: conversation_schema.MessagesResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request, thread_id: str):
        params = request.query_params
        messages, next_cursor = ingest.thread_messages(
            principal=request.user,
            thread_id=thread_id,
            subject_id=query_subject(request),
            cursor=params.get("cursor") or None,
            limit=params.get("limit"),
        )
        return Response(
            {
                "ok": True,
                "messages": [message_json(m) for m in messages],
                "next_cursor": next_cursor,
            }
        )


class ThreadDetailView(AgentAPIView):
    @extend_schema(
        operation_id="threads_get",
        description=(
            "The thread: message count, rolling summary, last message and end times, and where "
            "its extraction stands (`extraction.state`: `queued` or `running` while a run is "
            "open, `scheduled` until `due_at`, `deferred` while the tenant's daily token budget "
            "is spent, `done`, `failed`, `idle` when nothing is open or scheduled, `off` when "
            f"the agent's extraction is off, `disabled` without an LLM). {THREAD_NOT_FOUND}"
        ),
        summary="A thread and its extraction state",
        parameters=[schema.THREAD_PARAM, schema.SUBJECT_PARAM],
        responses={200: conversation_schema.ThreadResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request, thread_id: str):
        status = thread_actions.thread_status(
            principal=request.user, thread_id=thread_id, subject_id=query_subject(request)
        )
        return Response({"ok": True, "thread": thread_json(status.thread, status.extraction)})


class ThreadExtractView(AgentAPIView):
    @extend_schema(
        operation_id="threads_extract",
        description=(
            "Queues an extraction of the thread's pending messages now, rather than when it is "
            "idle (one run per thread at a time: an open run is returned instead of a second). "
            "When nothing is queued, `extraction.state` says why: `idle` (no messages wait), "
            f"`off` (the agent's extraction is off) or `disabled` (no LLM). {THREAD_NOT_FOUND}"
        ),
        summary="Extract a thread now",
        parameters=[schema.THREAD_PARAM, schema.SUBJECT_PARAM, schema.IDEMPOTENCY_PARAM],
        request=None,
        responses={
            202: OpenApiResponse(
                conversation_schema.ExtractResponseSerializer, description="Accepted"
            ),
            **schema.WRITE_ERRORS,
        },
    )
    def post(self, request, thread_id: str):
        principal, subject_id = request.user, query_subject(request)

        def action(_) -> tuple[int, dict]:
            extraction = thread_actions.thread_extract(
                principal=principal, thread_id=thread_id, subject_id=subject_id
            )
            return 202, {"ok": True, "thread_id": thread_id, "extraction": extraction}

        payload = {"thread_id": thread_id, "subject_id": subject_id}
        return idempotent_response(request, "thread_extract", payload, action)


class ThreadEndView(AgentAPIView):
    @extend_schema(
        operation_id="threads_end",
        description=(
            "Ends a run: the thread's `conversation` memories are marked expired (one revision "
            "each, reason `thread ended`), and its stored conversation gets a last extraction of "
            "its pending messages (queued first, run in the background) and `ended_at` (its "
            "messages are deleted `MEMORYHUB_MESSAGE_RETENTION_DAYS` later; new messages reopen "
            "it). With a subject (`subject_id`, or the key's bound one) only that subject's "
            "thread and memories (and subject-less memories) are ended; without one, every "
            "subject's. `removed` counts the memories."
        ),
        summary="End a thread: a last extraction; its conversation memories are removed",
        parameters=[schema.THREAD_PARAM, schema.SUBJECT_PARAM, schema.IDEMPOTENCY_PARAM],
        request=None,
        responses={200: schema.ThreadEndResponseSerializer, **schema.WRITE_ERRORS},
    )
    def post(self, request, thread_id: str):
        principal, subject_id = request.user, query_subject(request)

        def action(_) -> tuple[int, dict]:
            removed = thread_actions.thread_end(
                principal=principal, thread_id=thread_id, subject_id=subject_id
            )
            return 200, {"ok": True, "removed": removed}

        payload = {"thread_id": thread_id, "subject_id": subject_id}
        return idempotent_response(request, "thread_end", payload, action)
