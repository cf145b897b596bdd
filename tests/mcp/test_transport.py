"""/mcp refusals at the transport level: a foreign Host, a foreign Origin, a body over the
limit, a body that is not JSON. Our envelope where MCP leaves the answer open; a JSON-RPC
error for the foreign Origin, whose 403 the protocol fixes."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from django.conf import settings

from memoryhub.asgi import application
from tests.factories import asgi_http_scope, make_agent, make_key, make_tenant

TOOLS_LIST = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
TOOLS_LIST_BODY = TOOLS_LIST.encode()
JSON_HEADERS = [
    (b"content-type", b"application/json"),
    (b"accept", b"application/json, text/event-stream"),
]


def call(headers, chunks=(TOOLS_LIST_BODY,), method="POST", host=b"testserver"):
    """Drive the deployed ASGI app directly with one /mcp request; (status, headers, body)."""
    scope = asgi_http_scope(method, "/mcp", [])
    scope["headers"] = [(b"host", host), *headers]
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent = []

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(application(scope, receive, send))
    start, *bodies = sent
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in bodies)


def envelope(code, message, **details):
    return {"ok": False, "error": {"code": code, "message": message, "details": details}}


@pytest.mark.parametrize("host", [b"evil.example", b"evil.example:8000", b"", b"127.0.0.1.evil"])
def test_a_foreign_host_is_invalid_input(host):
    status, headers, body = call(JSON_HEADERS, host=host)
    assert status == 400
    assert headers[b"content-type"] == b"application/json"
    assert json.loads(body) == envelope("INVALID_INPUT", "Invalid Host header", field="Host")


@pytest.mark.parametrize(
    "origin", [b"http://evil.example", b"https://evil.example:443", b"null", b"file://"]
)
def test_a_foreign_origin_is_a_403_json_rpc_error(origin):
    status, headers, body = call([*JSON_HEADERS, (b"origin", origin)])
    assert status == 403
    assert headers[b"content-type"] == b"application/json"
    assert json.loads(body) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "Forbidden: this Origin may not use /mcp"},
    }


def test_a_declared_body_over_the_limit_is_413(settings):
    # /mcp keeps MEMORYHUB_MAX_BODY_BYTES, however large the messages limit
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = settings.MEMORYHUB_MAX_MESSAGES_BODY_BYTES = 1000
    status, _, body = call([*JSON_HEADERS, (b"content-length", b"5000")], chunks=[b"x" * 5000])
    assert status == 413
    assert json.loads(body) == envelope(
        "PAYLOAD_TOO_LARGE", "Request body is too large", limit_bytes=1000
    )


def test_a_chunked_body_over_the_limit_is_413(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = settings.MEMORYHUB_MAX_MESSAGES_BODY_BYTES = 1000
    chunks = [b'{"jsonrpc": "2.0", "params": "' + b"x" * 600, b"y" * 600 + b'"}']
    status, _, body = call([*JSON_HEADERS, (b"transfer-encoding", b"chunked")], chunks=chunks)
    assert status == 413
    assert json.loads(body)["error"]["code"] == "PAYLOAD_TOO_LARGE"


def test_a_body_that_is_not_json_is_invalid_input():
    status, _, body = call([(b"content-type", b"text/plain"), (b"accept", b"application/json")])
    assert status == 400
    assert json.loads(body) == envelope(
        "INVALID_INPUT", "Send JSON with Content-Type: application/json", field="body"
    )


def test_the_default_limit_is_ours_not_the_sdks():
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < 4 * 1024 * 1024  # the SDK's own limit


def test_allowed_hosts_and_origins_reach_the_tools(asgi_server, transactional_db):
    _, raw = make_key(make_agent(make_tenant("acme")), scopes=["read"])
    port = asgi_server.rsplit(":", 1)[1]
    headers = {
        "Authorization": f"Bearer {raw}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    for extra in (
        {},
        {"Origin": asgi_server},
        {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"},
    ):
        response = httpx.post(
            f"{asgi_server}/mcp", content=TOOLS_LIST, headers={**headers, **extra}
        )
        assert response.status_code == 200, (extra, response.text)
        assert "memory_store" in {tool["name"] for tool in response.json()["result"]["tools"]}


# --- the documented limit, met the way a client meets it: a real server, over a socket -------

MIB = 1_048_576
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _padded(size: int) -> bytes:
    """A valid `tools/list` request of exactly `size` bytes (JSON allows trailing white space)."""
    return TOOLS_LIST_BODY + b" " * (size - len(TOOLS_LIST_BODY))


def _assert_too_large(response: httpx.Response) -> None:
    assert response.status_code == 413, response.content[:200]
    assert response.headers["content-type"] == "application/json"
    assert response.json() == envelope(
        "PAYLOAD_TOO_LARGE", "Request body is too large", limit_bytes=MIB
    )


@pytest.fixture
def mcp_key(transactional_db):
    _, raw = make_key(make_agent(make_tenant("acme"), "support-bot"))
    return raw


@pytest.mark.parametrize("size", [2_000_000, 10_000_000], ids=["2MB", "10MB"])
def test_a_body_over_one_mib_is_413_in_the_envelope(asgi_server, mcp_key, size):
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {mcp_key}"}
    with httpx.Client(timeout=30) as client:
        _assert_too_large(client.post(f"{asgi_server}/mcp", content=_padded(size), headers=headers))


@pytest.mark.parametrize("size", [2_000_000, 10_000_000], ids=["2MB", "10MB"])
def test_a_chunked_body_over_one_mib_is_413_in_the_envelope(asgi_server, mcp_key, size):
    """No Content-Length: the body is counted as it arrives."""
    body = _padded(size)

    def chunks():
        for start in range(0, len(body), 65_536):
            yield body[start : start + 65_536]

    headers = {**MCP_HEADERS, "Authorization": f"Bearer {mcp_key}"}
    with httpx.Client(timeout=30) as client:
        _assert_too_large(client.post(f"{asgi_server}/mcp", content=chunks(), headers=headers))


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_body_over_the_limit_is_413_whatever_the_method(asgi_server, mcp_key, method):
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {mcp_key}"}
    with httpx.Client(timeout=30) as client:
        response = client.request(
            method, f"{asgi_server}/mcp", content=iter([_padded(5_000_000)]), headers=headers
        )
    _assert_too_large(response)


def test_a_body_of_exactly_one_mib_reaches_mcp(asgi_server, mcp_key):
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {mcp_key}"}
    with httpx.Client(timeout=30) as client:
        response = client.post(f"{asgi_server}/mcp", content=_padded(MIB), headers=headers)
    assert response.status_code == 200, response.content[:300]
    assert "memory_store" in {tool["name"] for tool in response.json()["result"]["tools"]}


@pytest.fixture
def five_mib_limit(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 5 * MIB  # set before the server (and its app) starts


def test_a_limit_set_above_the_sdks_own_is_the_one_that_holds(five_mib_limit, asgi_server, mcp_key):
    """The SDK refuses past 4 MiB in plain text unless told otherwise: it is told ours."""
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {mcp_key}"}
    with httpx.Client(timeout=30) as client:
        response = client.post(f"{asgi_server}/mcp", content=_padded(4_500_000), headers=headers)
        assert response.status_code == 200, response.content[:300]
        over = client.post(f"{asgi_server}/mcp", content=_padded(5 * MIB + 1), headers=headers)
    assert over.status_code == 413
    assert over.json()["error"]["details"] == {"limit_bytes": 5 * MIB}
