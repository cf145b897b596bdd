"""`key_prefix` on list, keys and search (REST): a literal prefix of `key`, shared by MCP."""

from __future__ import annotations

import pytest

KEYS = ["ns/user_1/a", "ns/user_1/b", "ns/userX1/c", "ns/user%1/d", "ns/user\\1/e", "other/a"]


@pytest.fixture
def keyed(api_client):
    for key in KEYS:
        response = api_client.post(
            "/api/v1/memories", {"key": key, "text": f"apples are kept under {key}"}, format="json"
        )
        assert response.status_code == 201, response.json()
    return api_client


def listed(client, **params) -> list[str]:
    response = client.get("/api/v1/memories", params)
    assert response.status_code == 200, response.json()
    return sorted(m["key"] for m in response.json()["memories"])


def searched(client, **body) -> list[str]:
    response = client.post("/api/v1/search", {"query": "apples", **body}, format="json")
    assert response.status_code == 200, response.json()
    return sorted(hit["key"] for hit in response.json()["memories"])


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("ns/user_1/", ["ns/user_1/a", "ns/user_1/b"]),  # `_` is no single-character wildcard
        ("ns/user%", ["ns/user%1/d"]),  # `%` is no wildcard either
        ("ns/user\\", ["ns/user\\1/e"]),  # nor is the backslash an escape
        ("ns/", KEYS[:5]),
        ("nothing/", []),
    ],
)
def test_list_keys_and_search_take_a_literal_key_prefix(keyed, prefix, expected):
    assert listed(keyed, key_prefix=prefix) == sorted(expected)
    keys = keyed.get("/api/v1/keys", {"key_prefix": prefix}).json()["keys"]
    assert keys == sorted(expected)
    assert searched(keyed, key_prefix=prefix) == sorted(expected)


def test_without_a_prefix_everything_is_listed(keyed):
    assert listed(keyed) == sorted(KEYS)
    assert listed(keyed, key_prefix="") == sorted(KEYS)


def test_the_prefix_is_nfkc_normalised_like_keys(keyed):
    # Full-width letters name the same key (keys are NFKC-normalised), so they name the same prefix.
    assert listed(keyed, key_prefix="ｏｔｈｅｒ/") == ["other/a"]  # noqa: RUF001  full-width on purpose


@pytest.mark.parametrize("bad", ["ns/\u200b", "ns/\x01", "x" * 256])
def test_an_invalid_prefix_is_invalid_input(keyed, bad):
    for response in (
        keyed.get("/api/v1/memories", {"key_prefix": bad}),
        keyed.get("/api/v1/keys", {"key_prefix": bad}),
        keyed.post("/api/v1/search", {"query": "apples", "key_prefix": bad}, format="json"),
    ):
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "INVALID_INPUT"
        assert response.json()["error"]["details"]["field"] == "key_prefix"


def test_a_prefix_that_is_not_a_string_is_invalid_input(keyed):
    response = keyed.post("/api/v1/search", {"query": "apples", "key_prefix": 7}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"field": "key_prefix"}


def test_the_prefix_is_documented_in_the_openapi_schema(client, db):
    document = client.get("/api/schema/?format=json").json()
    for path in ("/api/v1/memories", "/api/v1/keys"):
        names = {p["name"] for p in document["paths"][path]["get"]["parameters"]}
        assert "key_prefix" in names, path
    body = document["paths"]["/api/v1/search"]["post"]["requestBody"]["content"]
    ref = body["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert "key_prefix" in document["components"]["schemas"][ref]["properties"]
