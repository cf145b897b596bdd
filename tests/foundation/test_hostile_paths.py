"""A NUL in a URL's path parameter (a memory id, a key, a kind's name, a thread id, a subject
id, a webhook id): 400 INVALID_INPUT naming the parameter, in the envelope, before any view
or query sees it (PostgreSQL cannot hold a NUL in text). Every route of the agent API with a
path parameter, every method it answers."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern

from memories.api.urls import urlpatterns
from tests.factories import make_operator

METHODS = ("get", "post", "put", "patch", "delete")
CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")


def _routes() -> list[tuple[str, str, str]]:
    """(method, route with `{}` for its parameter, parameter name) for every API route with a
    path parameter."""
    routes = []
    for pattern in urlpatterns:
        assert isinstance(pattern, URLPattern)
        route = str(pattern.pattern)
        names = CONVERTER.findall(route)
        if not names:
            continue
        assert len(names) == 1, route
        view = pattern.callback.view_class
        template = "/api/v1/" + CONVERTER.sub("{}", route)
        routes += [(m, template, names[0]) for m in METHODS if hasattr(view, m)]
    return routes


ROUTES = _routes()


def test_every_path_parameter_route_is_probed():
    params = {name for _, _, name in ROUTES}
    assert params == {"memory_id", "key", "name", "thread_id", "subject_id", "webhook_id"}
    assert len(ROUTES) >= 16


@pytest.mark.parametrize("value", ["x%00", "%00", "mem_%00y"], ids=["end", "alone", "middle"])
@pytest.mark.parametrize(("method", "template", "param"), ROUTES)
@pytest.mark.django_db
def test_a_nul_in_a_path_parameter_is_invalid_input(
    key_client, agent, method, template, param, value
):
    client = key_client(agent, scopes=["read", "write", "admin"])
    response = getattr(client, method)(template.format(value), {}, format="json")
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "ok": False,
        "error": {
            "code": "INVALID_INPUT",
            "message": "NUL bytes are not allowed",
            "details": {"field": param},
        },
    }


@pytest.mark.django_db
def test_a_nul_in_a_path_is_refused_before_the_key_is_checked(client):
    """Nothing about the caller is needed to refuse it, nor revealed by the refusal."""
    response = client.get("/api/v1/kinds/x%00")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"field": "name"}


@pytest.mark.parametrize(
    "path", ["/console/kinds/x%00/", "/console/subjects/a%00/", "/console/webhooks/wh_%00/"]
)
@pytest.mark.django_db
def test_a_nul_in_a_console_path_is_a_400_page_not_a_500(client, tenant, path):
    operator = make_operator(tenant, "owner@acme.test", "owner")
    client.force_login(operator.user)
    response = client.get(path)
    assert response.status_code == 400
