"""Helpers shared by the console views: rendering (page or fragment), service errors,
Markdown, diffs."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from functools import wraps
from typing import Any

import markdown
import nh3
from django.contrib import messages
from django.forms import Form
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.utils.cache import patch_vary_headers
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString, mark_safe
from django_htmx.http import HttpResponseClientRefresh

from accounts.console import ConsoleRequest
from accounts.models import Role
from memoryhub.errors import DomainError, NotFound, SecretRejected

# What rendered memory text may contain after sanitising: formatting only, no scripts, no
# event handlers, no images (a remote image would be a tracking pixel), http(s)/mailto links.
ALLOWED_TAGS = {
    "p",
    "br",
    "hr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "strong",
    "em",
    "b",
    "i",
    "del",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "a",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
}
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "th": {"align"}, "td": {"align"}}
URL_SCHEMES = {"http", "https", "mailto"}


def render_markdown(text: str) -> SafeString:
    """Markdown → HTML → nh3 allow-list. The only place memory text becomes markup."""
    html = markdown.markdown(text or "", extensions=["fenced_code", "tables", "sane_lists"])
    clean = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)  # noqa: S308 - sanitised by nh3 just above


def clean_param(value: str | None) -> str:
    """A filter value from the query string, safe to compare in SQL."""
    # PostgreSQL text cannot hold NUL; a pasted one must not turn a filter into a 500.
    return (value or "").replace("\x00", "").strip()[:255]


def role_flags(request: HttpRequest) -> dict[str, bool]:
    membership = getattr(request, "membership", None)
    if membership is None:
        return {"can_review": False, "can_admin": False, "is_owner": False}
    return {
        "can_review": membership.has_role(Role.REVIEWER),
        "can_admin": membership.has_role(Role.ADMIN),
        "is_owner": membership.has_role(Role.OWNER),
    }


def render(
    request: ConsoleRequest,
    template_name: str,
    context: dict[str, Any],
    *,
    fragment: str | None = None,
    status: int = 200,
) -> TemplateResponse:
    """A full page, or for an HTMX request only the page's `fragment` partial.

    Boosted requests and history restores (back button after `hx-push-url`) want whole pages;
    `Vary: HX-Request` keeps a browser cache from serving one kind for the other.
    """
    htmx = request.htmx
    if fragment and htmx and not htmx.boosted and not htmx.history_restore_request:
        template_name += f"#{fragment}"
    context = {**role_flags(request), **context}
    response = TemplateResponse(request, template_name, context, status=status)
    patch_vary_headers(response, ("HX-Request",))
    return response


def safe_next(request: ConsoleRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return fallback


def done(request: ConsoleRequest, message: str, fallback: str) -> HttpResponse:
    """After a full-page form post: flash and redirect (post/redirect/get)."""
    messages.success(request, message)
    return redirect(safe_next(request, fallback))


def service_errors(*, back: Callable[..., str]) -> Callable:
    """Decorate a console view: what a service's `DomainError` answers, written once.

    `NotFound` → the console's 404 (another tenant's object answers exactly like a missing
    one). Any other `DomainError` the view lets through (restoring next to a live memory with
    the same key, say) → its message flashed and the operator sent back: an HTMX request
    reloads the page it came from, a form post goes to `next`, else to `back(...)`, called
    with the view's URL arguments: the page the action belongs to.
    """

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: ConsoleRequest, *args, **kwargs) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except NotFound as exc:
                raise Http404 from exc
            except DomainError as exc:
                messages.error(request, refusal(exc))
                if request.htmx:
                    return HttpResponseClientRefresh()
                return redirect(safe_next(request, back(*args, **kwargs)))

        return wrapped

    return decorator


def refuse_on_form(form: Form, exc: DomainError) -> None:
    """Show a service's refusal on the form being re-rendered. `NotFound` is no refusal: it
    goes on up to `service_errors` and answers 404."""
    if isinstance(exc, NotFound):
        raise exc
    form.add_error(None, refusal(exc))


def refusal(exc: DomainError) -> str:
    """A service's refusal in words; a secret's names its field and rule, never its value."""
    if isinstance(exc, SecretRejected):
        field, rule = exc.details["field"], exc.details["rule"]
        return f"{field}: a secret-shaped value ({rule}) is never stored; nothing was saved."
    return exc.message


_WORDS = re.compile(r"(\s+)")


def word_diff(before: str, after: str) -> list[tuple[str, str]]:
    """Segments `(op, text)` with op in eq/del/ins: a word-level diff for the history view."""
    a, b = _WORDS.split(before or ""), _WORDS.split(after or "")
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("eq", "".join(a[i1:i2])))
            continue
        if op in ("replace", "delete"):
            out.append(("del", "".join(a[i1:i2])))
        if op in ("replace", "insert"):
            out.append(("ins", "".join(b[j1:j2])))
    return out


HIDDEN_DIFF_FIELDS = {"text", "version"}


def revision_view(revision) -> dict[str, Any]:
    """What the history shows for one revision: a text diff and the other changed fields."""
    before, after = revision.before or {}, revision.after or {}
    changed = [k for k in after if before.get(k) != after.get(k)] if before else []
    text_diff = None
    if before and "text" in after and before.get("text") != after.get("text"):
        text_diff = word_diff(before.get("text") or "", after.get("text") or "")
    fields = [
        {"name": k, "before": _short(before.get(k)), "after": _short(after.get(k))}
        for k in changed
        if k not in HIDDEN_DIFF_FIELDS
    ]
    return {"revision": revision, "text_diff": text_diff, "fields": fields}


def _short(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "[]"
    text = str(value)
    return text if len(text) <= 120 else text[:117] + "…"


def snippet_urls(request: ConsoleRequest) -> dict[str, str]:
    """The base URLs the ready-to-copy curl and MCP snippets name (as this browser reached us)."""
    return {
        "api_url": request.build_absolute_uri("/api/v1"),
        "mcp_url": request.build_absolute_uri("/mcp"),
    }
