"""Operator sign-in/out and the tenant switcher."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from accounts.console import SESSION_TENANT_KEY
from accounts.models import Membership


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    pass


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    """Make another of the operator's tenants the current one (unknown ones answer 404)."""
    membership = (
        Membership.objects.filter(user=request.user, tenant__slug=request.POST.get("tenant", ""))
        .select_related("tenant")
        .first()
    )
    if membership is None:
        raise Http404("No such tenant")
    request.session[SESSION_TENANT_KEY] = membership.tenant_id
    target = request.POST.get("next") or "/console/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/console/"
    # Object pages of the old tenant would 404 in the new one: land on the section's list.
    if target.startswith("/console/memories/mem_"):
        target = "/console/memories/"
    return redirect(target)
