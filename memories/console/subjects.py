"""A subject's page ("everything about alice"): every memory of that end user across the
tenant's agents, their threads and the keys bound to them, with `Export` and the erasure of
`DELETE /api/v1/subjects/{id}` (the same service: `services.erasure`) for admins.

Subject ids are opaque strings (slashes too); the page addresses one in its path, the erasure
form sends it in its body, so no subject id can be mistaken for a route.
"""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.console import ConsoleRequest, operator_actor, require_role
from accounts.models import ApiKey, Role
from memories.clock import resolve_now
from memories.console import memory_selectors as sel
from memories.console import thread_selectors as tsel
from memories.console.view_helpers import clean_param, render
from memories.models import ReviewState, Status
from memories.services.erasure import subject_erase_by_operator
from memoryhub.errors import DomainError

SHOWN = 50  # newest live memories on the page; the Memories list has them all


def subject_url(subject_id: str) -> str:
    return reverse("console:subject", args=[subject_id])


def _counts(tenant, subject_id: str, now) -> dict[str, int]:
    """The subject's memories by state, in one aggregate (the live subject index leads)."""
    live = Q(status=Status.ACTIVE) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    return (
        sel.tenant_memories(tenant)
        .filter(subject_id=subject_id)
        .aggregate(
            live=Count("id", filter=live),
            pending=Count("id", filter=live & Q(review_state=ReviewState.PENDING)),
            tombstoned=Count("id", filter=Q(status=Status.TOMBSTONED, purged_at__isnull=True)),
            purged=Count("id", filter=Q(purged_at__isnull=False)),
            other=Count("id", filter=Q(status__in=[Status.EVICTED, Status.EXPIRED])),
        )
    )


@require_role(Role.VIEWER)
def subject_detail(request: ConsoleRequest, subject_id: str) -> HttpResponse:
    tenant, now = request.tenant, resolve_now()
    memories = sel.memory_page(
        tenant=tenant, filters={"subject": subject_id, "status": "live"}, size=SHOWN, now=now
    )
    threads = tsel.thread_page(tenant=tenant, filters={"subject": subject_id}, size=SHOWN)
    keys = list(
        ApiKey.objects.for_tenant(tenant)
        .filter(subject_id=subject_id)
        .select_related("agent")
        .order_by("-created_at")
    )
    counts = _counts(tenant, subject_id, now)
    if not (any(counts.values()) or threads.items or keys):
        # Nothing about it here (another tenant's subject answers exactly the same).
        raise Http404("No such subject")
    context = {
        "section": "memories",
        "subject_id": subject_id,
        "memories": memories,
        "threads": threads,
        "keys": [{"key": k, "active": k.is_active(now)} for k in keys],
        "counts": counts,
    }
    return render(request, "console/subject_detail.html", context)


@require_role(Role.ADMIN)
@require_POST
def subject_erase_view(request: ConsoleRequest) -> HttpResponse:
    """`Erase subject`: tombstone (restorable) or purge (irreversible) every memory of the
    subject and delete its messages; the operator types the subject id again to confirm."""
    subject_id = clean_param(request.POST.get("subject_id"))
    purge = request.POST.get("mode") == "purge"
    if not subject_id:
        messages.error(request, "Name the subject to erase.")
        return redirect(reverse("console:memories"))
    if clean_param(request.POST.get("confirm")) != subject_id:
        messages.error(request, f"Nothing erased: type {subject_id} to confirm.")
        return redirect(subject_url(subject_id))
    try:
        result = subject_erase_by_operator(
            tenant=request.tenant, subject_id=subject_id, actor=operator_actor(request), purge=purge
        )
    except DomainError as exc:
        messages.error(request, f"Nothing erased: {exc.message}")
        return redirect(subject_url(subject_id))
    done = "purged" if purge else "tombstoned"
    threads = "deleted" if purge else "emptied"
    messages.success(
        request,
        f"Erased {subject_id}: {_count(result.memories, 'memory', 'memories')} {done}, "
        f"{_count(result.threads, 'thread')} {threads}, "
        f"{_count(result.messages, 'message')} deleted.",
    )
    return redirect(subject_url(subject_id))


def _count(n: int, one: str, many: str = "") -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"
