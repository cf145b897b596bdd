"""Conversations (docs/formation.md): the Threads page, a thread's detail and `Run extraction`."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.console import ConsoleRequest, require_role
from accounts.models import Extraction, Role
from memories.console import memory_selectors as sel
from memories.console import thread_selectors as tsel
from memories.console.view_helpers import clean_param, render, service_errors
from memories.formation.llm import llm_configured
from memories.formation.runs import run_request
from memories.models import Thread

NO_LLM = (
    "No LLM is configured (MEMORYHUB_LLM_URL is not set): messages are kept, "
    "but nothing extracts memories from them."
)


def _thread_url(thread_pk: int) -> str:
    return reverse("console:thread", args=[thread_pk])


@require_role(Role.VIEWER)
def thread_list(request: ConsoleRequest) -> HttpResponse:
    filters = {name: clean_param(request.GET.get(name)) for name in tsel.THREAD_FILTER_FIELDS}
    page = tsel.thread_page(
        tenant=request.tenant, filters=filters, cursor=request.GET.get("cursor")
    )
    context = {
        "section": "threads",
        "page": page,
        "filters": filters,
        "agents": sel.agents_for(request.tenant),
        "states": tsel.THREAD_STATES,
    }
    return render(request, "console/threads.html", context, fragment="thread-table")


def extraction_refusal(thread: Thread) -> str:
    """Why `Run extraction` cannot run for `thread` now ("" when it can)."""
    if not llm_configured():
        return NO_LLM
    if thread.agent.extraction == Extraction.OFF:
        return f"Extraction is off for {thread.agent.slug}: turn it on in the agent's policy."
    return ""


def _panel_context(request: ConsoleRequest, thread: Thread) -> dict:
    return {
        "section": "threads",
        "thread": thread,
        "refusal": extraction_refusal(thread),
        "messages_page": tsel.thread_messages_page(
            tenant=request.tenant, thread=thread, cursor=request.GET.get("cursor")
        ),
        "runs_page": tsel.thread_runs_page(
            tenant=request.tenant, thread=thread, cursor=request.GET.get("runs")
        ),
    }


@require_role(Role.VIEWER)
def thread_detail(request: ConsoleRequest, thread_pk: int) -> HttpResponse:
    thread = tsel.thread_for_console(tenant=request.tenant, pk=thread_pk)
    context = _panel_context(request, thread)
    return render(request, "console/thread_detail.html", context, fragment="thread-panel")


@require_role(Role.REVIEWER)
@require_POST
@service_errors(back=_thread_url)
def thread_extract_view(request: ConsoleRequest, thread_pk: int) -> HttpResponse:
    """`Run extraction`: queue a run of the thread's waiting messages (the open run, if one is
    queued or running already). The page then shows the run: queued, or done when the cluster
    ran it at once."""
    thread = tsel.thread_for_console(tenant=request.tenant, pk=thread_pk)
    refusal = extraction_refusal(thread)
    if not refusal and thread.pending_messages == 0:
        refusal = "Nothing to extract: every message has been through an extraction."
    if refusal:
        return _after(request, thread, refusal, ok=False)
    run = run_request(thread=thread, trigger="console")
    run.refresh_from_db(fields=["state"])
    return _after(request, thread, f"Extraction run #{run.pk}: {run.state}.", ok=True)


def _after(request: ConsoleRequest, thread: Thread, message: str, *, ok: bool) -> HttpResponse:
    """HTMX gets the refreshed panel with the message; a plain form post redirects (PRG)."""
    if not request.htmx:
        (messages.success if ok else messages.error)(request, message)
        return redirect(_thread_url(thread.pk))
    thread = tsel.thread_for_console(tenant=request.tenant, pk=thread.pk)
    context = {**_panel_context(request, thread), "flash": message, "flash_ok": ok}
    return render(
        request,
        "console/thread_detail.html",
        context,
        fragment="thread-panel",
        status=200 if ok else 409,
    )
