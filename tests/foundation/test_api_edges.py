"""The API's answers at its edges, outside the views: 401 challenges, a foreign Host, an
unknown route. Each is the API's error envelope, never one of Django's HTML pages."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

CHALLENGE = 'Bearer realm="memoryhub"'


@pytest.mark.django_db
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer mh_malformed", "Bearer mh_" + "A" * 38, "Basic dXNlcjpwYXNz"],
)
def test_every_401_carries_the_bearer_challenge(authorization):
    client = APIClient()
    if authorization:
        client.credentials(HTTP_AUTHORIZATION=authorization)
    for response in (
        client.get("/api/v1/whoami"),
        client.post("/api/v1/memories", {"text": "x"}, format="json"),
        client.post("/api/v1/search", {"query": "x"}, format="json"),
    ):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == CHALLENGE
        assert response.json()["error"]["code"] == "UNAUTHENTICATED"


@pytest.mark.django_db
def test_a_valid_key_gets_no_challenge(api_client):
    response = api_client.get("/api/v1/whoami")
    assert response.status_code == 200
    assert "WWW-Authenticate" not in response


BAD_HOST = {
    "ok": False,
    "error": {
        "code": "INVALID_INPUT",
        "message": "Invalid Host header",
        "details": {"field": "Host"},
    },
}


@pytest.mark.django_db
def test_a_foreign_host_on_the_api_gets_the_envelope(api_key, caplog):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}", HTTP_HOST="evil.example")
    for response in (
        client.get("/api/v1/whoami"),
        client.post("/api/v1/memories", {"text": "x"}, content_type="application/json"),
        client.get("/api/v1/no-such-route"),
        client.get("/healthz"),
    ):
        assert response.status_code == 400
        assert response["Content-Type"] == "application/json"
        assert response.json() == BAD_HOST
    assert "evil.example" in caplog.text  # reported where Django reports a disallowed Host


@pytest.mark.django_db
def test_a_foreign_host_gets_the_envelope_before_the_https_redirect(api_key, settings):
    # SecurityMiddleware reads the Host for its redirect; our check comes first.
    settings.SECURE_SSL_REDIRECT = True
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}", HTTP_HOST="evil.example")
    response = client.get("/api/v1/whoami")
    assert response.status_code == 400
    assert response.json() == BAD_HOST


@pytest.mark.django_db
def test_a_foreign_host_on_the_console_keeps_djangos_page():
    response = Client(HTTP_HOST="evil.example").get("/console/")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.django_db
def test_a_route_miss_under_api_is_the_same_envelope_as_any_404(api_client):
    from memories.ids import new_memory_id

    missing = api_client.get(f"/api/v1/memories/{new_memory_id()}")
    assert missing.status_code == 404
    for method, path in (
        ("get", "/api/v1/no-such-route"),
        ("post", "/api/v1/memories/mem_x/no/such/action"),
        ("delete", "/api/v2/memories"),
        ("get", "/api/"),
    ):
        response = getattr(api_client, method)(path)
        assert response.status_code == 404, path
        assert response["Content-Type"] == missing["Content-Type"] == "application/json"
        assert response.json() == {
            "ok": False,
            "error": {"code": "NOT_FOUND", "message": "No such resource", "details": {}},
        }
        # The same shape and the same bytes' style as DRF's own 404 (compact JSON).
        assert response.json().keys() == missing.json().keys()
        assert response.json()["error"].keys() == missing.json()["error"].keys()
        assert response.content.startswith(b'{"ok":false,"error":{"code":"NOT_FOUND",')
        assert missing.content.startswith(b'{"ok":false,"error":{"code":"NOT_FOUND",')
