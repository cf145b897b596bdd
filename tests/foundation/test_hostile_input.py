"""Hostile request bodies on every JSON endpoint (REST and MCP `tools/call`): never a 5xx.

Each hostile value is sent as a whole body, and in place of every field an endpoint reads:
nesting deeper than Python's JSON parser can go, huge arrays and objects (within the body
limit), invalid UTF-8, lone surrogates, NUL bytes, NaN/Infinity and out-of-range numbers. An
error must be the API's error envelope (`INVALID_INPUT` for everything malformed), never a 5xx.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests.factories import make_agent, make_key, make_tenant
from tests.support.live_server import asgi_server  # noqa: F401  (the real server, for /mcp)

HUGE = 200_000  # elements: each huge value stays under the 1 MiB body limit

# Raw JSON values, spliced into bodies as bytes (most cannot be written with json.dumps).
HOSTILE: dict[str, bytes] = {
    "deep_arrays_1000": b"[" * 1000 + b"]" * 1000,
    "deep_objects_1000": b'{"a":' * 1000 + b"1" + b"}" * 1000,
    "deep_arrays_100k": b"[" * 100_000 + b"]" * 100_000,
    "deep_unclosed": b"[" * 50_000,
    "huge_number_array": b"[" + b",".join([b"0"] * HUGE) + b"]",
    "huge_string_array": b"[" + b",".join([b'"ab"'] * (HUGE // 2)) + b"]",
    "huge_object": b"{" + b",".join(b'"k%d":1' % i for i in range(HUGE // 4)) + b"}",
    "huge_string": b'"' + b"a" * 900_000 + b'"',
    "invalid_utf8": b'"caf\xc3\x28 \xff\xfe \xc0\xaf"',
    "lone_high_surrogate": b'"\\ud800"',
    "lone_low_surrogate": b'"x\\udfffy"',
    "surrogate_key": b'{"\\udc00": "v"}',
    "nul_escape": b'"a\\u0000b"',
    "nul_key": b'{"\\u0000": "v"}',
    "raw_nul": b'"a\x00b"',
    "nan": b"NaN",
    "infinity": b"[-Infinity]",
    "huge_integer": b"9" * 5000,
    "float_overflow": b"1e999",
}
# The parser itself cannot read these: every endpoint that reads its body says INVALID_INPUT.
UNPARSEABLE = {
    "deep_arrays_1000",
    "deep_objects_1000",
    "deep_arrays_100k",
    "deep_unclosed",
    "invalid_utf8",
    "raw_nul",
}
HUGE_VALUES = {name for name, value in HOSTILE.items() if len(value) > 100_000}


def cases(fields: list[str], huge_in: int = 2) -> list[tuple[str | None, str]]:
    """(field, hostile value) pairs for an endpoint reading `fields` (None: the whole body).

    Values that fail in the parser fail the same wherever they sit, and huge ones are slow to
    send: those go to the whole body and the first (`huge_in`) fields only; the rest go
    everywhere."""
    pairs = []
    for field in [None, *fields]:
        for name in HOSTILE:
            if name in UNPARSEABLE and field not in (None, fields[0]):
                continue
            if name in HUGE_VALUES and field not in (None, *fields[:huge_in]):
                continue
            pairs.append((field, name))
    return pairs


SERVER_ERROR_CODES = {"INTERNAL_ERROR", "DATABASE_ERROR"}
ENVELOPE_CODES = {
    "INVALID_INPUT",
    "UNAUTHENTICATED",
    "SCOPE_DENIED",
    "NOT_FOUND",
    "CONFLICT",
    "PAYLOAD_TOO_LARGE",
    "IDEMPOTENCY_MISMATCH",
    "SECRET_REJECTED",
    "QUOTA_EXCEEDED",
    "RATE_LIMITED",
}


def body_with(base: dict, field: str | None, value: bytes) -> bytes:
    """`base` as JSON with `field` set to the raw `value` (the whole body when field is None)."""
    if field is None:
        return value
    rest = {k: v for k, v in base.items() if k != field}
    head = json.dumps(rest)[:-1].encode()
    return head + (b", " if rest else b"") + json.dumps(field).encode() + b": " + value + b"}"


def assert_not_5xx(status: int, content: bytes, where: str) -> dict | None:
    assert status < 500, f"{where}: {status} {content[:300]!r}"
    if status < 400:
        return None
    body = json.loads(content)
    assert body["ok"] is False and set(body["error"]) == {"code", "message", "details"}, where
    assert body["error"]["code"] in ENVELOPE_CODES, where
    return body


# (method, path template, base body, the fields the endpoint reads, reads its body at all)
REST_ENDPOINTS = [
    (
        "post",
        "/api/v1/memories",
        {"text": "hostile probe"},
        [
            "text",
            "key",
            "data",
            "tags",
            "mentions",
            "subject_id",
            "thread_id",
            "kind",
            "category",
            "importance",
            "expires_at",
            "ttl",
            "source_provider",
            "expected_version",
        ],
        True,
    ),
    (
        "patch",
        "/api/v1/memories/{id}",
        {},
        ["text", "data", "tags", "mentions", "kind", "importance", "expires_at", "ttl"],
        True,
    ),
    ("post", "/api/v1/memories/{id}/confirm", {}, ["subject_id"], False),
    ("delete", "/api/v1/memories/{id}", {}, ["reason"], True),
    (
        "post",
        "/api/v1/search",
        {"query": "probe"},
        ["query", "tags", "categories", "category", "subject_id", "thread_id", "limit", "mode"],
        True,
    ),
    (
        "post",
        "/api/v1/hydrate",
        {},
        ["query", "subject_id", "thread_id", "budget_bytes", "format", "archival_mode"],
        True,
    ),
    ("post", "/api/v1/threads/t-1/end", {}, ["subject_id"], False),
]


@pytest.mark.django_db
def test_every_rest_json_endpoint_answers_hostile_bodies_with_4xx_envelopes(api_key):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key}")

    def memory_id() -> str:
        response = client.post("/api/v1/memories", {"text": "target"}, format="json")
        assert response.status_code == 201
        return response.json()["memory_id"]

    target = memory_id()
    sent = 0
    for method, template, base, fields, reads_body in REST_ENDPOINTS:
        for field, name in cases(fields):
            # A successful forget tombstones its target: each forget gets a fresh one.
            mid = memory_id() if method == "delete" else target
            path = template.format(id=mid)
            content = body_with(base, field, HOSTILE[name])
            assert len(content) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE, name
            response = getattr(client, method)(path, content, content_type="application/json")
            where = f"{method.upper()} {path} {field or 'body'}={name}"
            answer = assert_not_5xx(response.status_code, response.content, where)
            sent += 1
            if reads_body and name in UNPARSEABLE:
                assert response.status_code == 400, where
                assert answer["error"]["code"] == "INVALID_INPUT", where
    assert sent > 400


@pytest.mark.django_db
def test_the_deep_json_of_the_report_is_400_not_500(api_client):
    """The reported case: 1000 nested arrays inside `data` (900 was already a 400)."""
    for depth in (900, 1000, 5000):
        content = b'{"text":"x","data":{"a":' + b"[" * depth + b"]" * depth + b"}}"
        response = api_client.post("/api/v1/memories", content, content_type="application/json")
        assert response.status_code == 400, depth
        assert response.json()["error"]["code"] == "INVALID_INPUT"


@pytest.mark.django_db
def test_a_forged_cursor_nested_too_deep_is_invalid_input(api_client):
    forged = base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode().rstrip("=")
    response = api_client.get("/api/v1/memories", {"cursor": forged})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": "'cursor' is not a cursor this API returned",
        "details": {"field": "cursor"},
    }


# tool → (base arguments, the arguments to replace)
MCP_TOOLS = {
    "memory_store": (
        {"text": "hostile probe"},
        ["text", "data", "tags", "mentions", "key", "subject_id", "kind", "importance"],
    ),
    "memory_recall": ({"key": "k"}, ["key", "subject_id"]),
    "memory_list": ({}, ["tags", "cursor", "limit", "category"]),  # 100k tags: 100k filters
    "memory_forget": ({"key": "k"}, ["reason", "memory_id", "key"]),
    "memory_search": ({"query": "probe"}, ["query", "tags", "categories", "limit"]),
    "memory_hydrate": ({}, ["query", "budget_bytes", "subject_id"]),
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def tools_call(tool: str, arguments: bytes) -> bytes:
    return (
        b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": '
        + json.dumps(tool).encode()
        + b', "arguments": '
        + arguments
        + b"}}"
    )


def assert_mcp_not_5xx(response: httpx.Response, where: str) -> None:
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:300]}"
    answer = response.json()
    if "ok" in answer:  # our envelope (an HTTP-level refusal)
        assert answer["ok"] is False and answer["error"]["code"] in ENVELOPE_CODES, where
        return
    assert answer["jsonrpc"] == "2.0", where
    if "error" in answer:
        # Parse error / invalid request / invalid params; never "internal error".
        assert answer["error"]["code"] in (-32700, -32600, -32602), where
        return
    result = answer["result"]
    if result.get("isError"):
        text = result["content"][0]["text"]
        envelope = json.loads(text[text.index("{") :])
        assert envelope["error"]["code"] not in SERVER_ERROR_CODES, f"{where}: {text[:300]}"


def test_mcp_tools_call_answers_hostile_arguments_without_5xx(asgi_server, transactional_db):  # noqa: F811
    agent = make_agent(make_tenant("acme"), "support-bot")
    _, raw = make_key(agent, scopes=["read", "write"])
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {raw}"}
    sent = 0
    with httpx.Client(base_url=asgi_server, headers=headers, timeout=60) as client:
        ok = client.post("/mcp", content=tools_call("memory_store", b'{"text": "a fact"}'))
        assert ok.status_code == 200 and not ok.json()["result"].get("isError"), ok.text
        for tool, (base, fields) in MCP_TOOLS.items():
            for field, name in cases(fields, huge_in=1):
                arguments = body_with(base, field, HOSTILE[name])
                response = client.post("/mcp", content=tools_call(tool, arguments))
                assert_mcp_not_5xx(response, f"{tool} {field or 'arguments'}={name}")
                sent += 1
        # The whole JSON-RPC message hostile, too.
        for name, value in HOSTILE.items():
            assert_mcp_not_5xx(client.post("/mcp", content=value), f"message={name}")
            sent += 1
    assert sent > 400
