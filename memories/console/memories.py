"""Memories table, detail (Edit → Save correction), single and bulk actions."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.console import ConsoleRequest, operator_actor, require_role
from accounts.models import Role
from memories import kind_registry
from memories.console import memory_selectors as sel
from memories.console import thread_selectors as tsel
from memories.console.forms import CorrectionForm, TombstoneForm
from memories.console.kind_pages import data_rows
from memories.console.view_helpers import (
    clean_param,
    done,
    refuse_on_form,
    render,
    render_markdown,
    revision_view,
    safe_next,
    service_errors,
)
from memories.models import CaptureMode, ChangeType, ReviewState, Status
from memories.services import operator_actions
from memoryhub.errors import Conflict, DomainError

STATUS_CHOICES = (
    [("active", "Active"), ("live", "Live (not expired)")]
    + [(value, label) for value, label in Status.choices if value != "active"]
    + [("any", "Any status")]
)


EXPIRY_CHOICES = [("24h", "Within 24 h"), ("7d", "Within 7 days"), ("never", "Never")]
# Where a detail page's "back" link may lead, and what it says.
BACK_LABELS = {"review": "Review queue", "tombstones": "Tombstones", "memories": "Memories"}


def parse_filters(params: QueryDict) -> dict[str, Any]:
    filters: dict[str, Any] = {name: clean_param(params.get(name)) for name in sel.FILTER_FIELDS}
    filters["tags"] = [clean_param(t).lower() for t in params.getlist("tag") if clean_param(t)]
    return filters


# --- list ------------------------------------------------------------------------------------


@require_role(Role.VIEWER)
def memory_list_view(request: ConsoleRequest) -> HttpResponse:
    filters = parse_filters(request.GET)
    sort = request.GET.get("sort") or sel.DEFAULT_SORT
    page = sel.memory_page(
        tenant=request.tenant, filters=filters, sort=sort, cursor=request.GET.get("cursor")
    )
    status = filters["status"] or "active"
    context = {
        "section": "memories",
        "page": page,
        "filters": filters,
        "sort": sort,
        # One status for every row: say it once in the filter, not as a chip on each row.
        "show_status": status not in ("active", "live"),
        # An empty table says why: these filters, or nothing stored yet.
        "filters_given": any(v for k, v in filters.items() if k != "status") or status != "active",
        "expiry_choices": EXPIRY_CHOICES,
        "agents": sel.agents_for(request.tenant),
        "status_choices": STATUS_CHOICES,
        "capture_modes": CaptureMode.choices,
        "review_states": ReviewState.choices,
        "sorts": [
            ("updated_at", "Updated"),
            ("created_at", "Created"),
            ("importance", "Importance"),
        ],
    }
    return render(request, "console/memories.html", context, fragment="memory-table")


# --- detail ----------------------------------------------------------------------------------


def _detail_url(memory_id: str) -> str:
    return reverse("console:memory-detail", args=[memory_id])


def _detail_context(
    request, memory, *, form=None, conflict=None, editing=False, unsaved_text=None
) -> dict:
    near = sel.near_duplicates_by_memory(
        tenant=request.tenant,
        memory_ids=[memory.pk],
        min_similarity=memory.agent.dedup_threshold if memory.agent_id else 0.9,
    ).get(memory.pk, [])
    editing = editing or form is not None
    if editing and form is None:
        form = CorrectionForm.for_memory(memory)
    return {
        "section": "memories",
        "back": _back(request),
        "memory": memory,
        "rendered": render_markdown(memory.text),
        "data_rows": data_rows(memory, kind_registry.registry(request.tenant)),
        "revisions": [
            revision_view(r) for r in sel.revisions_for(tenant=request.tenant, memory=memory)
        ],
        "near_duplicates": near,
        "evidence": tsel.evidence_for(tenant=request.tenant, memories=[memory]).get(memory.pk),
        "editing": editing,
        "form": form,
        "conflict": conflict,
        "unsaved_text": unsaved_text,
        "tombstone_form": TombstoneForm(),
    }


def _back(request: ConsoleRequest) -> dict[str, str]:
    """The page the operator came from (`next`: the review queue, tombstones, a filtered
    list), so the detail page and its Save lead back there; else the memories list."""
    target = safe_next(request, "")
    prefix = reverse("console:dashboard")
    section = target[len(prefix) :].split("/", 1)[0] if target.startswith(prefix) else ""
    if section not in BACK_LABELS:
        return {"url": reverse("console:memories"), "label": "Memories", "next": "", "query": ""}
    query = urlencode({"next": target})
    return {"url": target, "label": BACK_LABELS[section], "next": target, "query": query}


@require_role(Role.VIEWER)
def memory_detail(request: ConsoleRequest, memory_id: str) -> HttpResponse:
    memory = sel.memory_for_console(tenant=request.tenant, memory_id=memory_id)
    editing = request.GET.get("edit") == "1" and memory.status == Status.ACTIVE
    context = _detail_context(request, memory, editing=editing)
    return render(request, "console/memory_detail.html", context, fragment="memory-panel")


@require_role(Role.REVIEWER)
@require_POST
@service_errors(back=_detail_url)
def memory_save(request: ConsoleRequest, memory_id: str) -> HttpResponse:
    """`Save`: a correction, compare-and-set against the version the form was loaded with."""
    memory = sel.memory_for_console(tenant=request.tenant, memory_id=memory_id)
    form = CorrectionForm(request.POST)
    if not form.is_valid():
        return _panel(request, memory, status=422, form=form)
    changes = form.changes()
    try:
        # Called without changes too: the service alone says whether the memory may still be
        # corrected (active, and at the version the form was loaded with).
        memory = operator_actions.memory_correct(
            tenant=request.tenant,
            memory_id=memory.pk,
            actor=operator_actor(request),
            changes=changes,
            expected_version=form.cleaned_data["expected_version"],
        )
    except Conflict:
        # Which CONFLICT it was shows in the memory as it is now: no longer active (also when
        # tombstoned between the service's read and its write), or someone saved first.
        current = sel.memory_for_console(tenant=request.tenant, memory_id=memory_id)
        if current.status != Status.ACTIVE:
            return _not_active(request, current, form)
        return _conflict(request, form, current, changes)
    except DomainError as exc:
        refuse_on_form(form, exc)
        return _panel(request, memory, status=422, form=form)
    return _after_action(request, memory, "Saved." if changes else "Nothing changed.")


def _panel(request, memory, *, status: int, **context) -> HttpResponse:
    context = _detail_context(request, memory, **context)
    return render(
        request, "console/memory_detail.html", context, fragment="memory-panel", status=status
    )


def _not_active(request, memory, form) -> HttpResponse:
    """The memory was tombstoned (or evicted, expired) since the form was loaded: nothing is
    written; the operator's text stays on the page to copy after a `Restore`."""
    return _panel(request, memory, status=409, unsaved_text=form.cleaned_data["text"])


def _conflict(request, form, current, changes: dict) -> HttpResponse:
    """Someone saved first. Show every edited field that changed since the form was loaded,
    theirs next to the operator's; re-arm the form on the current version with the operator's
    own edits kept and every other field showing the newer value, so a second Save applies
    the operator's edits and nothing else."""
    loaded = form.cleaned_data["base"]
    newer_base = CorrectionForm.base_of(current)
    newer = CorrectionForm.display_values(current)
    data = request.POST.copy()
    for name in CorrectionForm.FIELDS:
        if name not in changes:
            data[name] = newer[name]
    data["expected_version"] = str(current.version)
    data["base"] = json.dumps(newer_base)
    fields = [
        {
            "name": name,
            "label": name.title(),
            "theirs": newer[name],
            "yours": data[name],
            "yours_changed": name in changes,
        }
        for name in CorrectionForm.FIELDS
        if loaded[name] != newer_base[name]
    ]
    conflict = {
        "version": current.version,
        "loaded_version": form.cleaned_data["expected_version"],
        "by": _last_actor(request, current),
        "fields": fields,
    }
    return _panel(request, current, status=409, form=CorrectionForm(data), conflict=conflict)


def _last_actor(request, memory) -> str:
    revisions = sel.revisions_for(tenant=request.tenant, memory=memory)
    return revisions[0].actor if revisions else ""


def _after_action(request: ConsoleRequest, memory, message: str) -> HttpResponse:
    """Detail actions: HTMX gets the refreshed panel, a plain form post redirects."""
    origin = request.POST.get("from", "")
    if request.htmx and origin in ("review", "tombstones"):
        response = HttpResponse("")  # the row leaves the queue/list
        response["HX-Trigger"] = "memoryhub:changed"
        return response
    detail_url = _detail_url(memory.pk)
    if request.htmx:
        memory = sel.memory_for_console(tenant=request.tenant, memory_id=memory.pk)
        context = _detail_context(request, memory)
        context["flash"] = message
        response = render(request, "console/memory_detail.html", context, fragment="memory-panel")
        query = context["back"]["query"]
        response["HX-Push-Url"] = f"{detail_url}?{query}" if query else detail_url
        return response
    fallback = {"review": reverse("console:review"), "tombstones": reverse("console:tombstones")}
    return done(request, message, fallback.get(origin, detail_url))


def _action(request: ConsoleRequest, memory_id: str, call, message: str) -> HttpResponse:
    memory = call(sel.memory_for_console(tenant=request.tenant, memory_id=memory_id))
    return _after_action(request, memory, message)


@require_role(Role.REVIEWER)
@require_POST
@service_errors(back=_detail_url)
def memory_tombstone_view(request: ConsoleRequest, memory_id: str) -> HttpResponse:
    reason = (request.POST.get("reason") or "").strip()  # the service bounds and scans it
    return _action(
        request,
        memory_id,
        lambda m: operator_actions.memory_tombstone(
            tenant=request.tenant, memory_id=m.pk, actor=operator_actor(request), reason=reason
        ),
        "Tombstoned.",
    )


@require_role(Role.REVIEWER)
@require_POST
@service_errors(back=_detail_url)
def memory_restore_view(request: ConsoleRequest, memory_id: str) -> HttpResponse:
    return _action(
        request,
        memory_id,
        lambda m: operator_actions.memory_restore(
            tenant=request.tenant, memory_id=m.pk, actor=operator_actor(request)
        ),
        "Restored.",
    )


@require_role(Role.ADMIN)
@require_POST
@service_errors(back=_detail_url)
def memory_purge_view(request: ConsoleRequest, memory_id: str) -> HttpResponse:
    return _action(
        request,
        memory_id,
        lambda m: operator_actions.memory_purge(
            tenant=request.tenant, memory_id=m.pk, actor=operator_actor(request)
        ),
        "Purged: text, data and embedding are erased.",
    )


@require_role(Role.REVIEWER)
@require_POST
@service_errors(back=_detail_url)
def memory_approve_view(request: ConsoleRequest, memory_id: str) -> HttpResponse:
    return _action(
        request,
        memory_id,
        lambda m: operator_actions.memory_approve(
            tenant=request.tenant, memory_id=m.pk, actor=operator_actor(request)
        ),
        "Approved.",
    )


@require_role(Role.REVIEWER)
@require_POST
@service_errors(back=_detail_url)
def memory_merge_view(request: ConsoleRequest, memory_id: str) -> HttpResponse:
    """`Merge`: keep this memory, tombstone the chosen near-duplicates ("merged into …")."""
    sel.memory_for_console(tenant=request.tenant, memory_id=memory_id)  # 404 before anything
    merge_ids = [i for i in request.POST.getlist("merge") if i and i != memory_id]
    if not merge_ids:
        messages.error(request, "Choose at least one near-duplicate to merge.")
        return redirect(safe_next(request, _detail_url(memory_id)))
    return _action(
        request,
        memory_id,
        lambda m: operator_actions.memory_merge(
            tenant=request.tenant, keep_id=m.pk, merge_ids=merge_ids, actor=operator_actor(request)
        ),
        f"Merged {len(merge_ids)} into this memory.",
    )


# --- bulk ------------------------------------------------------------------------------------


def _memories_url(*args, **kwargs) -> str:
    return reverse("console:memories")


@require_role(Role.REVIEWER)
@require_POST
@service_errors(back=_memories_url)
def memory_bulk(request: ConsoleRequest) -> HttpResponse:
    """`Tombstone selected` / `Add tag` over the checked rows (one transaction)."""
    ids = list(dict.fromkeys(request.POST.getlist("ids")))
    action = request.POST.get("action")
    fallback = reverse("console:memories")
    if not ids:
        messages.error(request, "Select at least one memory.")
        return redirect(safe_next(request, fallback))
    actor = operator_actor(request)
    if action == "tombstone":
        count = operator_actions.memory_bulk_tombstone(
            tenant=request.tenant,
            memory_ids=ids,
            actor=actor,
            reason=(request.POST.get("reason") or "").strip(),
        )
        message = f"Tombstoned {count} {'memory' if count == 1 else 'memories'}."
    elif action == "tag":
        tag = (request.POST.get("tag") or "").strip()
        if not tag:
            messages.error(request, "Enter a tag to add.")
            return redirect(safe_next(request, fallback))
        changed = operator_actions.memory_add_tag(
            tenant=request.tenant, memory_ids=ids, tag=tag, actor=actor
        )
        message = f"Tagged {changed} {'memory' if changed == 1 else 'memories'}."
    else:
        messages.error(request, "Unknown action.")
        return redirect(safe_next(request, fallback))
    return done(request, message, fallback)


# --- review queue ----------------------------------------------------------------------------


@require_role(Role.VIEWER)
def review_queue(request: ConsoleRequest) -> HttpResponse:
    page = sel.review_page(tenant=request.tenant, cursor=request.GET.get("cursor"))
    near = sel.near_duplicates_by_memory(
        tenant=request.tenant, memory_ids=[m.pk for m in page.items]
    )
    evidence = tsel.evidence_for(tenant=request.tenant, memories=page.items)
    rows = [
        {"memory": m, "near": near.get(m.pk, []), "evidence": evidence.get(m.pk)}
        for m in page.items
    ]
    context = {"section": "review", "page": page, "rows": rows, "tombstone_form": TombstoneForm()}
    return render(request, "console/review.html", context, fragment="review-list")


@require_role(Role.VIEWER)
def tombstones(request: ConsoleRequest) -> HttpResponse:
    page = sel.tombstone_page(tenant=request.tenant, cursor=request.GET.get("cursor"))
    context = {"section": "tombstones", "page": page}
    return render(request, "console/tombstones.html", context, fragment="tombstone-table")


@require_role(Role.VIEWER)
def activity(request: ConsoleRequest) -> HttpResponse:
    actor = (request.GET.get("actor") or "").strip()
    change_type = request.GET.get("type") or ""
    page = sel.activity_page(
        tenant=request.tenant,
        actor=actor,
        change_type=change_type,
        cursor=request.GET.get("cursor"),
    )
    context = {
        "section": "activity",
        "page": page,
        "actor": actor,
        "change_type": change_type,
        "change_types": ChangeType.choices,
    }
    return render(request, "console/activity.html", context, fragment="activity-table")
