"""`GET /api/v1/`: an index of the agent API's endpoints, without a key, naming no secret."""

from __future__ import annotations

import re

import pytest
from django.urls import get_resolver

from memories.api import urls as api_urls


@pytest.mark.django_db
def test_the_index_lists_every_route_with_its_methods_without_a_key(client, api_key):
    response = client.get("/api/v1/")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True and body["version"] == "v1"
    assert body["docs"] == "http://testserver/api/docs/"
    assert body["schema"] == "http://testserver/api/schema/"
    assert body["mcp"] == "http://testserver/mcp"
    listed = {(e["method"], e["path"]) for e in body["endpoints"]}
    # Every route of the URLconf but the index itself, with each method it answers.
    routed = set()
    for pattern in api_urls.urlpatterns:
        view = pattern.callback.view_class
        if pattern.name == "api-index":
            continue
        path = "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(pattern.pattern))
        routed |= {
            (m.upper(), path) for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)
        }
    assert listed == routed
    for expected in [
        ("POST", "/api/v1/memories"),
        ("GET", "/api/v1/memories/{memory_id}"),
        ("GET", "/api/v1/memories/by-key/{key}"),
        ("POST", "/api/v1/search"),
        ("POST", "/api/v1/hydrate"),
        ("POST", "/api/v1/threads/{thread_id}/messages"),
        ("DELETE", "/api/v1/subjects/{subject_id}"),
    ]:
        assert expected in listed
    assert len(listed) == len(body["endpoints"])  # no duplicates
    summaries = {(e["method"], e["path"]): e["summary"] for e in body["endpoints"]}
    assert summaries[("POST", "/api/v1/memories")].startswith("Store a memory")
    assert all(summaries.values())
    assert "mh_" + api_key[3:] not in response.content.decode()  # names no key


@pytest.mark.django_db
def test_the_index_is_the_only_anonymous_route(client):
    assert client.get("/api/v1/memories").status_code == 401
    assert client.post("/api/v1/", {}).status_code == 405
    assert get_resolver().resolve("/api/v1/").url_name == "api-index"
