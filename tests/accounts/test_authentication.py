"""The key lookup (one hand-written statement) loads what the ORM would."""

from __future__ import annotations

from datetime import timedelta

from django.forms.models import model_to_dict

from accounts.authentication import authenticate_key
from accounts.models import Agent, ApiKey, Tenant
from tests.factories import make_agent, make_key, make_tenant


def test_principal_carries_the_same_rows_as_the_orm(db, django_assert_num_queries):
    tenant = make_tenant("acme")
    agent = make_agent(tenant, "support-bot", default_ttl=timedelta(days=7), entry_cap=5)
    other, third = make_agent(tenant, "billing-bot"), make_agent(tenant, "sales-bot")
    agent.reads_from.set([third, other])
    key, raw = make_key(agent, scopes=["read", "admin"], subject_id="ann")
    authenticate_key(raw)  # records last_used_at (one UPDATE) the first time

    with django_assert_num_queries(1):
        principal = authenticate_key(raw)

    def fields(obj):
        return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}

    assert fields(principal.api_key) == fields(ApiKey.objects.get(pk=key.pk))
    assert fields(principal.agent) == fields(Agent.objects.get(pk=agent.pk))
    assert fields(principal.tenant) == fields(Tenant.objects.get(pk=tenant.pk))
    assert principal.agent.tenant is principal.tenant
    assert principal.agent._reads_from_ids == sorted([other.pk, third.pk])
    assert principal.scopes == frozenset({"read", "admin"}) and principal.bound_subject == "ann"
    assert model_to_dict(principal.agent)["default_ttl"] == timedelta(days=7)
    assert principal.api_key._state.adding is False and principal.api_key._state.db == "default"


def test_request_carries_tenant_and_agent(db, rf):
    from rest_framework.request import Request

    from accounts.authentication import ApiKeyAuthentication

    agent = make_agent(make_tenant("acme"))
    _, raw = make_key(agent)
    request = Request(rf.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}"))
    principal, _ = ApiKeyAuthentication().authenticate(request)
    assert request._request.tenant == agent.tenant and request._request.agent == agent
    assert request._request.principal is principal
