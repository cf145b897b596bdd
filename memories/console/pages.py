"""Dashboard, export/import, agents and keys, jobs, members."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_q.models import Schedule
from django_q.tasks import async_task

from accounts import services as account_services
from accounts.console import operator_actor, require_role
from accounts.models import Agent, ApiKey, Membership, Role
from memories.clock import resolve_now
from memories.console import selectors as sel
from memories.console import trends
from memories.console.common import done, refuse_on_form, render, service_errors
from memories.console.forms import (
    AgentCreateForm,
    AgentPolicyForm,
    ApiKeyCreateForm,
    ExtractionBudgetForm,
    ImportForm,
    MemberForm,
)
from memories.console.labels import job_label
from memories.console.memories import parse_filters
from memories.console.webhooks import disabled_webhooks
from memories.export import export_filename, export_markdown
from memories.formation.runs import tokens_used_today
from memories.ids import is_memory_id
from memories.jsonl import ImportLineError, export_jsonl, import_jsonl
from memories.models import JobRun, Status
from memoryhub.errors import DomainError

JOB_NAMES = ("prune_memories", "purge_retention", "reembed")


@require_role(Role.VIEWER)
def dashboard(request: HttpRequest) -> HttpResponse:
    stats = sel.dashboard_stats(tenant=request.tenant)
    context = {
        "section": "dashboard",
        **stats,
        "charts": trends.dashboard_charts(tenant=request.tenant, live_now=stats["by_category"]),
        # The first steps, until the tenant holds a memory: an agent, a key, a first call.
        "disabled_webhooks": disabled_webhooks(request),
        "getting_started": None if stats["total"] or stats["recent"] else _first_steps(request),
    }
    return render(request, "console/dashboard.html", context, fragment="dashboard-body")


def _first_steps(request: HttpRequest) -> dict:
    agent = Agent.objects.for_tenant(request.tenant).order_by("pk").first()
    now = resolve_now()
    has_key = agent is not None and any(
        key.is_active(now) for key in ApiKey.objects.for_tenant(request.tenant).filter(agent=agent)
    )
    return {"agent": agent, "has_key": has_key, **snippet_urls(request)}


def snippet_urls(request: HttpRequest) -> dict[str, str]:
    """The base URLs the ready-to-copy curl and MCP snippets name (as this browser reached us)."""
    return {
        "api_url": request.build_absolute_uri("/api/v1"),
        "mcp_url": request.build_absolute_uri("/mcp"),
    }


# --- export / import -------------------------------------------------------------------------

EXPORT_STATUSES = [
    ("live", "Live"),
    ("tombstoned", "Tombstoned"),
    ("evicted", "Evicted"),
    ("expired", "Expired"),
    ("any", "Any status"),
]


def _export_queryset(request: HttpRequest):
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
def export_page(request: HttpRequest) -> HttpResponse:
    context = {
        "section": "export",
        "agents": sel.agents_for(request.tenant),
        "statuses": EXPORT_STATUSES,
        "import_form": ImportForm(),
    }
    return render(request, "console/export.html", context)


@require_role(Role.VIEWER)
def export_markdown_view(request: HttpRequest) -> StreamingHttpResponse:
    """`Export markdown`: the SPEC §4 format, streamed from a server-side cursor."""
    qs, filters = _export_queryset(request)
    now = resolve_now()
    agent_slug = filters.get("agent") or "all"
    stream = export_markdown(
        qs,
        title=f"Memories of {request.tenant.slug} / {agent_slug}",
        source_for=lambda m: m.agent.slug if m.agent_id else "workspace",
        generated_at=now,
        filters=filters,
    )
    response = StreamingHttpResponse(stream, content_type="text/markdown; charset=utf-8")
    filename = export_filename(request.tenant.slug, agent_slug, now)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_role(Role.VIEWER)
def export_jsonl_view(request: HttpRequest) -> StreamingHttpResponse:
    """`Export JSONL`: every field of every memory in scope, for backups and `Import`."""
    qs, filters = _export_queryset(request)
    now = resolve_now()
    response = StreamingHttpResponse(export_jsonl(qs), content_type="application/x-ndjson")
    filename = f"{request.tenant.slug}-{filters.get('agent') or 'all'}-{now:%Y-%m-%d}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_role(Role.ADMIN)
@require_POST
def import_view(request: HttpRequest) -> HttpResponse:
    """`Import`: idempotent by memory id, all or nothing; a bad line is named by number."""
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, "Choose a JSONL file to import.")
        return redirect("console:export")
    try:
        result = import_jsonl(
            tenant=request.tenant, lines=form.cleaned_data["file"], actor=operator_actor(request)
        )
    except ImportLineError as exc:
        messages.error(request, f"Nothing imported: line {exc.line}: {exc.message}")
        return redirect("console:export")
    return done(
        request,
        f"Imported: {result.created} created, {result.updated} updated, "
        f"{result.unchanged} unchanged.",
        reverse("console:export"),
    )


# --- agents and keys -------------------------------------------------------------------------


@require_role(Role.VIEWER)
def agent_list(request: HttpRequest) -> HttpResponse:
    agents = (
        Agent.objects.for_tenant(request.tenant)
        .annotate(
            live_count=Count("memories", filter=Q(memories__status=Status.ACTIVE), distinct=True),
            key_count=Count("api_keys", filter=Q(api_keys__revoked_at__isnull=True), distinct=True),
        )
        .order_by("slug")
    )
    form = AgentCreateForm(tenant=request.tenant)
    if request.method == "POST":
        if not request.membership.has_role(Role.ADMIN):
            raise PermissionDenied
        form = AgentCreateForm(request.POST, tenant=request.tenant)
        if form.is_valid():
            agent = account_services.agent_get_or_create(
                tenant=request.tenant,
                slug=form.cleaned_data["slug"],
                name=form.cleaned_data["name"],
            )
            return done(
                request, f"Agent {agent.slug} created.", reverse("console:agent", args=[agent.slug])
            )
    context = {
        "section": "agents",
        "agents": agents,
        "form": form,
        "budget_form": ExtractionBudgetForm(
            initial={"tokens": request.tenant.extraction_daily_token_budget}
        ),
    }
    return render(request, "console/agents.html", context, status=422 if form.errors else 200)


@require_role(Role.ADMIN)
@require_POST
@service_errors(back=lambda: reverse("console:agents"))
def extraction_budget(request: HttpRequest) -> HttpResponse:
    """The tenant's daily token budget for memory formation (shown on the Agents page)."""
    form = ExtractionBudgetForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Budget not saved: {form.errors['tokens'][0]}")
        return redirect(reverse("console:agents"))
    account_services.tenant_extraction_budget_update(
        tenant=request.tenant, tokens=form.cleaned_data["tokens"]
    )
    tokens = form.cleaned_data["tokens"]
    return done(
        request,
        f"Daily extraction budget: {tokens} tokens." if tokens else "No daily extraction budget.",
        reverse("console:agents"),
    )


def _agent(request: HttpRequest, slug: str) -> Agent:
    agent = Agent.objects.for_tenant(request.tenant).filter(slug=slug).first()
    if agent is None:
        raise Http404("No such agent")
    return agent


def _agent_context(request, agent, *, policy_form=None, key_form=None, new_key=None) -> dict:
    others = [a for a in sel.agents_for(request.tenant) if a.pk != agent.pk]
    keys = list(
        ApiKey.objects.for_tenant(request.tenant).filter(agent=agent).order_by("-created_at")
    )
    now = resolve_now()
    return {
        "section": "agents",
        "agent": agent,
        "policy_form": policy_form or AgentPolicyForm(agent=agent, others=others),
        "key_form": key_form or ApiKeyCreateForm(),
        "keys": [{"key": k, "active": k.is_active(now)} for k in keys],
        "new_key": new_key,
        **(snippet_urls(request) if new_key else {}),
    }


@require_role(Role.VIEWER)
@service_errors(back=lambda slug: reverse("console:agent", args=[slug]))
def agent_detail(request: HttpRequest, slug: str) -> HttpResponse:
    agent = _agent(request, slug)
    if request.method == "POST":
        if not request.membership.has_role(Role.ADMIN):
            raise PermissionDenied
        others = [a for a in sel.agents_for(request.tenant) if a.pk != agent.pk]
        form = AgentPolicyForm(request.POST, agent=agent, others=others)
        if form.is_valid():
            data = dict(form.cleaned_data)
            reads_from = data.pop("reads_from")
            try:
                account_services.agent_policy_update(
                    tenant=request.tenant, agent=agent, reads_from=reads_from, **data
                )
            except DomainError as exc:
                refuse_on_form(form, exc)
            else:
                return done(request, "Policy saved.", reverse("console:agent", args=[agent.slug]))
        context = _agent_context(request, agent, policy_form=form)
        return render(request, "console/agent_detail.html", context, status=422)
    return render(request, "console/agent_detail.html", _agent_context(request, agent))


@require_role(Role.ADMIN)
@require_POST
def key_create(request: HttpRequest, slug: str) -> HttpResponse:
    """`Create key`: the raw key is in this one response and nowhere else, ever."""
    agent = _agent(request, slug)
    form = ApiKeyCreateForm(request.POST)
    if not form.is_valid():
        context = _agent_context(request, agent, key_form=form)
        return render(request, "console/agent_detail.html", context, fragment="keys", status=422)
    api_key, raw = account_services.api_key_create(
        tenant=request.tenant,
        agent=agent,
        scopes=form.cleaned_data["scopes"],
        subject_id=form.cleaned_data["subject_id"] or None,
        expires_in=form.cleaned_data["expires_in"],
        name=form.cleaned_data["name"],
        created_by=operator_actor(request),
    )
    context = _agent_context(request, agent, new_key={"raw": raw, "key": api_key})
    response = render(request, "console/agent_detail.html", context, fragment="keys")
    response["Cache-Control"] = "no-store"
    return response


@require_role(Role.ADMIN)
@require_POST
@service_errors(back=lambda key_id: reverse("console:agents"))
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    api_key = account_services.api_key_revoke(tenant=request.tenant, key_id=key_id)
    agent = api_key.agent
    if request.htmx:
        context = _agent_context(request, agent)
        return render(request, "console/agent_detail.html", context, fragment="keys")
    return done(
        request, f"Key {api_key.prefix}… revoked.", reverse("console:agent", args=[agent.slug])
    )


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
def jobs(request: HttpRequest) -> HttpResponse:
    context = {
        "section": "jobs",
        "schedules": list(Schedule.objects.order_by("name")),
        "runs": _job_runs(request.tenant),
        "job_names": JOB_NAMES,
        "extraction_runs": sel.recent_runs(tenant=request.tenant),
        "tokens_today": tokens_used_today(request.tenant.pk, resolve_now()),
    }
    return render(request, "console/jobs.html", context, fragment="job-runs")


@require_role(Role.ADMIN)
@require_POST
def job_run(request: HttpRequest) -> HttpResponse:
    """`Run now`: enqueue the job on the django-q2 cluster, for the operator's tenant only."""
    name = request.POST.get("job", "")
    if name not in JOB_NAMES:
        raise Http404("No such job")
    async_task("memories.tasks.run_job", name, trigger="console", tenant_id=request.tenant.pk)
    message = f"{job_label(name)} queued for {request.tenant.slug}."
    return done(request, message, reverse("console:jobs"))


# --- members (owner) -------------------------------------------------------------------------


@require_role(Role.OWNER)
def members(request: HttpRequest) -> HttpResponse:
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
