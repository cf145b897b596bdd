"""Console pages: a Content-Security-Policy that allows only same-origin scripts (so no inline
script or handler in any template), and `Cache-Control: no-store` where memory content shows."""

from __future__ import annotations

import re
from pathlib import Path

import csp.middleware
import pytest
from django.conf import settings
from django.test import Client

from tests.support.memories import store

PAGES = [
    "/console/",
    "/console/memories/",
    "/console/review/",
    "/console/tombstones/",
    "/console/activity/",
    "/console/export/",
    "/console/agents/",
    "/console/agents/support-bot/",
    "/console/jobs/",
    "/console/members/",
]
# An inline <script> (one without src) or an inline event handler attribute.
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.IGNORECASE)


def directives(response) -> dict[str, str]:
    policy = response["Content-Security-Policy"]
    return dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())


@pytest.mark.django_db
def test_console_pages_send_a_same_origin_csp_and_no_store(owner_client, agent):
    memory = store(agent, "The customer prefers email.")
    for path in [*PAGES, f"/console/memories/{memory.pk}/"]:
        response = owner_client.get(path)
        assert response.status_code == 200, path
        policy = directives(response)
        assert policy["default-src"] == "'self'", path
        assert policy["script-src"] == "'self'", path
        assert policy["style-src"] == "'self'", path
        assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
        assert "unsafe-inline" not in response["Content-Security-Policy"]
        assert "unsafe-eval" not in response["Content-Security-Policy"]
        assert "no-store" in response["Cache-Control"], path
        html = response.content.decode()
        assert not INLINE_SCRIPT.search(html), (path, INLINE_SCRIPT.search(html).group())
        assert not INLINE_HANDLER.search(html), (path, INLINE_HANDLER.search(html).group())


@pytest.mark.django_db
def test_htmx_fragments_and_exports_are_not_stored_either(owner_client, agent):
    store(agent, "A fact for the fragment.")
    fragment = owner_client.get("/console/memories/", HTTP_HX_REQUEST="true")
    assert "no-store" in fragment["Cache-Control"]
    export = owner_client.get("/console/export/markdown/")
    assert export.status_code == 200 and "no-store" in export["Cache-Control"]


@pytest.mark.django_db
def test_the_login_page_has_the_csp_and_the_api_has_none(api_client):
    login = Client().get("/accounts/login/")
    assert directives(login)["script-src"] == "'self'"
    assert "Content-Security-Policy" not in api_client.get("/api/v1/whoami")
    assert "Content-Security-Policy" not in Client().get("/api/docs/")  # Swagger UI's own page


def test_no_template_holds_inline_script_or_handlers():
    templates = sorted(Path(settings.BASE_DIR, "templates").rglob("*.html"))
    names = {t.relative_to(Path(settings.BASE_DIR, "templates")).as_posix() for t in templates}
    assert {"base.html", "console/memory_detail.html", "console/threads.html"} <= names
    for template in templates:
        text = template.read_text()
        assert not INLINE_SCRIPT.search(text), template
        assert not INLINE_HANDLER.search(text), template
        assert "javascript:" not in text, template


def test_htmx_injects_no_inline_style_nor_evaluates_code():
    base = Path(settings.BASE_DIR, "templates", "base.html").read_text()
    assert '"includeIndicatorStyles":false' in base and '"allowEval":false' in base


@pytest.mark.django_db
def test_no_policy_is_built_for_the_api(api_client, monkeypatch):
    """The API gets no policy header, so none is built for it (django-csp built the policy and
    its report-only twin for every request, then dropped them for an excluded path)."""
    built = []
    monkeypatch.setattr(csp.middleware, "build_policy", lambda **kw: built.append(kw) or "")
    assert api_client.get("/api/v1/whoami").status_code == 200
    assert built == []
    Client().get("/accounts/login/")
    assert built  # a page still gets one
