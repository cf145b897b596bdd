"""Agents and their keys (docs/console.md), with each agent's policy: caps, hydration and its block
limits, retention, formation."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts import services as account_services
from accounts.console import ConsoleRequest, operator_actor, require_role
from accounts.models import Agent, ApiKey, Role
from memories.clock import resolve_now
from memories.console import memory_selectors as sel
from memories.console.forms import (
    AgentCreateForm,
    AgentPolicyForm,
    ApiKeyCreateForm,
    ExtractionBudgetForm,
)
from memories.console.view_helpers import done, refuse_on_form, render, service_errors, snippet_urls
from memories.models import Status
from memories.services.policies import agent_policy_set
from memoryhub.errors import DomainError


@require_role(Role.VIEWER)
def agent_list(request: ConsoleRequest) -> HttpResponse:
    # Agents with their counts and, below, `core_over`: attributes of their own.
    agents: Any = (
        Agent.objects.for_tenant(request.tenant)
        .annotate(
            live_count=Count("memories", filter=Q(memories__status=Status.ACTIVE), distinct=True),
            key_count=Count("api_keys", filter=Q(api_keys__revoked_at__isnull=True), distinct=True),
        )
        .order_by("slug")
    )
    agents = list(agents)
    over = sel.core_over_limits(tenant=request.tenant, agents=agents)
    for agent in agents:
        agent.core_over = over.get(agent.pk)
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
def extraction_budget(request: ConsoleRequest) -> HttpResponse:
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


def _agent(request: ConsoleRequest, slug: str) -> Agent:
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
        "core_over": sel.core_over_limits(tenant=request.tenant, agents=[agent]).get(agent.pk),
        "policy_form": policy_form or AgentPolicyForm(agent=agent, others=others),
        "key_form": key_form or ApiKeyCreateForm(),
        "keys": [{"key": k, "active": k.is_active(now)} for k in keys],
        "new_key": new_key,
        **(snippet_urls(request) if new_key else {}),
    }


@require_role(Role.VIEWER)
@service_errors(back=lambda slug: reverse("console:agent", args=[slug]))
def agent_detail(request: ConsoleRequest, slug: str) -> HttpResponse:
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
                agent_policy_set(tenant=request.tenant, agent=agent, reads_from=reads_from, **data)
            except DomainError as exc:
                refuse_on_form(form, exc)
            else:
                return done(request, "Policy saved.", reverse("console:agent", args=[agent.slug]))
        context = _agent_context(request, agent, policy_form=form)
        return render(request, "console/agent_detail.html", context, status=422)
    return render(request, "console/agent_detail.html", _agent_context(request, agent))


@require_role(Role.ADMIN)
@require_POST
def key_create(request: ConsoleRequest, slug: str) -> HttpResponse:
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
        memory_ttl=form.cleaned_data["memory_ttl"],
    )
    context = _agent_context(request, agent, new_key={"raw": raw, "key": api_key})
    response = render(request, "console/agent_detail.html", context, fragment="keys")
    response["Cache-Control"] = "no-store"
    return response


@require_role(Role.ADMIN)
@require_POST
@service_errors(back=lambda key_id: reverse("console:agents"))
def key_revoke(request: ConsoleRequest, key_id: int) -> HttpResponse:
    api_key = account_services.api_key_revoke(tenant=request.tenant, key_id=key_id)
    agent = api_key.agent
    if request.htmx:
        context = _agent_context(request, agent)
        return render(request, "console/agent_detail.html", context, fragment="keys")
    return done(
        request, f"Key {api_key.prefix}… revoked.", reverse("console:agent", args=[agent.slug])
    )
