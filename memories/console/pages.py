"""Dashboard, export/import, jobs, members."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_q.models import Schedule
from django_q.tasks import async_task

from accounts import services as account_services
from accounts.console import ConsoleRequest, operator_actor, require_role
from accounts.models import Agent, ApiKey, Membership, Role
from memories.clock import resolve_now
from memories.console import memory_selectors as sel
from memories.console import thread_selectors as tsel
from memories.console import trends
from memories.console.forms import (
    ImportForm,
    MemberForm,
)
from memories.console.labels import job_label
from memories.console.memories import parse_filters
from memories.console.view_helpers import done, render, snippet_urls
from memories.console.webhooks import disabled_webhooks
from memories.formation.runs import tokens_used_today
from memories.ids import is_memory_id
from memories.jobs.backup import BackupStatus, backup_status
from memories.jsonl import export_jsonl, export_tenant
from memories.markdown_export import export_filename, export_markdown
from memories.models import JobRun
from memories.services.jsonl_import import ImportLineError, is_tenant_file, jsonl_import
from memories.services.tenant_import import ImportRefused, tenant_import

JOB_NAMES = ("prune_memories", "purge_retention", "reembed")


@require_role(Role.VIEWER)
def dashboard(request: ConsoleRequest) -> HttpResponse:
    stats = sel.dashboard_stats(tenant=request.tenant)
    context = {
        "section": "dashboard",
        **stats,
        "charts": trends.dashboard_charts(tenant=request.tenant, live_now=stats["by_category"]),
        # The first steps, until the tenant holds a memory: an agent, a key, a first call.
        "disabled_webhooks": disabled_webhooks(request),
        "backup": _backup(request),
        "getting_started": None if stats["total"] or stats["recent"] else _first_steps(request),
    }
    return render(request, "console/dashboard.html", context, fragment="dashboard-body")


def _backup(request: ConsoleRequest) -> BackupStatus | None:
    """For admins, while scheduled backups are on: the last one's age, overdue past two
    periods. Backups are the whole instance's; an admin is who can act on a warning."""
    membership = getattr(request, "membership", None)
    if membership is None or not membership.has_role(Role.ADMIN):
        return None
    return backup_status()


def _first_steps(request: ConsoleRequest) -> dict:
    agent = Agent.objects.for_tenant(request.tenant).order_by("pk").first()
    now = resolve_now()
    has_key = agent is not None and any(
        key.is_active(now) for key in ApiKey.objects.for_tenant(request.tenant).filter(agent=agent)
    )
    return {"agent": agent, "has_key": has_key, **snippet_urls(request)}


# --- export / import -------------------------------------------------------------------------

EXPORT_STATUSES = [
    ("live", "Live"),
    ("tombstoned", "Tombstoned"),
    ("evicted", "Evicted"),
    ("expired", "Expired"),
    ("any", "Any status"),
]


def _export_queryset(request: ConsoleRequest):
    params = request.GET
    ids = [i for i in params.getlist("ids") if is_memory_id(i)]
    filters = parse_filters(params)
    filters = {
        "agent": filters["agent"],
        "subject": filters["subject"],
        "category": filters["category"],
        "status": filters["status"] or "live",
    }
    qs = sel.memory_filtered(tenant=request.tenant, filters=filters)
    if ids:
        # `Export selected`: exactly the checked rows, whatever the table filters said.
        qs = sel.tenant_memories(request.tenant).filter(pk__in=ids)
        filters = {"selection": f"{len(ids)} selected"}
    return qs, filters


@require_role(Role.VIEWER)
def export_page(request: ConsoleRequest) -> HttpResponse:
    return render(request, "console/export.html", _export_context(request))


def _export_context(request: ConsoleRequest) -> dict:
    return {
        "section": "export",
        "agents": sel.agents_for(request.tenant),
        "statuses": EXPORT_STATUSES,
        "import_form": ImportForm(),
    }


@require_role(Role.VIEWER)
def export_markdown_view(request: ConsoleRequest) -> StreamingHttpResponse:
    """`Export markdown`: the API's export format, streamed from a server-side cursor."""
    qs, filters = _export_queryset(request)
    now = resolve_now()
    agent_slug = filters.get("agent") or "all"
    stream = export_markdown(
        qs,
        title=f"Memories of {request.tenant.slug} / {agent_slug}",
        source_for=lambda m: m.owner_label,
        generated_at=now,
        filters=filters,
    )
    response = StreamingHttpResponse(stream, content_type="text/markdown; charset=utf-8")
    filename = export_filename(request.tenant.slug, agent_slug, now)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_role(Role.VIEWER)
def export_jsonl_view(request: ConsoleRequest) -> StreamingHttpResponse:
    """`Export JSONL`: every field of every memory in scope, for backups and `Import`."""
    qs, filters = _export_queryset(request)
    now = resolve_now()
    stream = export_jsonl(request.tenant, qs)
    response = StreamingHttpResponse(stream, content_type="application/x-ndjson")
    filename = f"{request.tenant.slug}-{filters.get('agent') or 'all'}-{now:%Y-%m-%d}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_role(Role.ADMIN)
def export_tenant_view(request: ConsoleRequest) -> StreamingHttpResponse:
    """`Export tenant`: the whole tenant, as `manage.py export_tenant` writes it."""
    now = resolve_now()
    response = StreamingHttpResponse(
        export_tenant(request.tenant), content_type="application/x-ndjson"
    )
    filename = f"{request.tenant.slug}-tenant-{now:%Y-%m-%d}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_role(Role.ADMIN)
@require_POST
def import_view(request: ConsoleRequest) -> HttpResponse:
    """`Import`: a memories file idempotent by memory id, a tenant file into this tenant when it
    is empty (docs/operations.md#moving-a-tenant); all or nothing, a bad line named by number.
    New webhook secrets are in this one response and nowhere else."""
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Choose a JSONL file to import.")
        return redirect("console:export")
    upload = form.cleaned_data["file"]
    whole_tenant = is_tenant_file(upload)
    try:
        if whole_tenant:
            moved = tenant_import(lines=upload, tenant=request.tenant)
        else:
            result = jsonl_import(
                tenant=request.tenant, actor=operator_actor(request), lines=upload
            )
    except ImportLineError as exc:
        messages.error(request, f"Nothing imported: line {exc.line}: {exc.message}")
        return redirect("console:export")
    except ImportRefused as exc:
        messages.error(request, str(exc))
        return redirect("console:export")
    if not whole_tenant:
        return done(
            request,
            f"Imported: {result.created} created, {result.updated} updated, "
            f"{result.unchanged} unchanged.",
            reverse("console:export"),
        )
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(moved.counts.items()))
    messages.success(request, f"Imported the tenant file: {counts or 'nothing but settings'}.")
    response = render(
        request,
        "console/export.html",
        _export_context(request) | {"new_webhook_secrets": moved.webhooks},
    )
    response["Cache-Control"] = "no-store"
    return response


# --- agents and keys -------------------------------------------------------------------------


# --- jobs ------------------------------------------------------------------------------------


JOB_RUNS_SHOWN = 30


def _job_runs(tenant) -> list[JobRun]:
    """The last runs an operator of `tenant` may see: the tenant's own `Run now`s and the global
    scheduled/command runs, newest first, each with `shown_counts` (the tenant's share of a
    global run) and `shown_error` (a global run's exception class only: its message may name
    another tenant's rows)."""
    runs = list(JobRun.objects.visible_to(tenant).order_by("-started_at", "-id")[:JOB_RUNS_SHOWN])
    for run in runs:
        run.shown_counts = run.counts_for(tenant)
        run.shown_error = run.error if run.tenant_id else run.error.split(":", 1)[0]
    return runs


@require_role(Role.VIEWER)
def jobs(request: ConsoleRequest) -> HttpResponse:
    context = {
        "section": "jobs",
        "schedules": list(Schedule.objects.order_by("name")),
        "runs": _job_runs(request.tenant),
        "job_names": JOB_NAMES,
        "extraction_runs": tsel.recent_runs(tenant=request.tenant),
        "tokens_today": tokens_used_today(request.tenant.pk, resolve_now()),
    }
    return render(request, "console/jobs.html", context, fragment="job-runs")


@require_role(Role.ADMIN)
@require_POST
def job_run(request: ConsoleRequest) -> HttpResponse:
    """`Run now`: enqueue the job on the django-q2 cluster, for the operator's tenant only."""
    name = request.POST.get("job", "")
    if name not in JOB_NAMES:
        raise Http404("No such job")
    async_task("memories.tasks.run_job", name, trigger="console", tenant_id=request.tenant.pk)
    message = f"{job_label(name)} queued for {request.tenant.slug}."
    return done(request, message, reverse("console:jobs"))


# --- members (owner) -------------------------------------------------------------------------


@require_role(Role.OWNER)
def members(request: ConsoleRequest) -> HttpResponse:
    form = MemberForm()
    if request.method == "POST":
        form = MemberForm(request.POST)
        if form.is_valid():
            email, role = form.cleaned_data["email"], form.cleaned_data["role"]
            account_services.operator_create(
                tenant=request.tenant,
                email=email,
                password=form.cleaned_data["password"],
                role=role,
            )
            return done(request, f"{email} is now {role}.", reverse("console:members"))
    rows = (
        Membership.objects.for_tenant(request.tenant)
        .select_related("user")
        .order_by("user__username")
    )
    context = {"section": "members", "members": rows, "form": form}
    return render(request, "console/members.html", context, status=422 if form.errors else 200)
