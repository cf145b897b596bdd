"""Operator sign-in/out and the tenant switcher."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from accounts.console import SESSION_TENANT_KEY, OperatorRequest
from accounts.models import Membership


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True


def lockout_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str:
    """The name django-axes counts failures under: the sign-in name as Django compares it
    (trimmed, lower-cased, as operators are created), so `Ops@X` and `ops@x ` share a count."""
    raw = (credentials or {}).get("username") or request.POST.get("username") or ""
    return raw.strip().lower()


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """django-axes' answer once a user and IP address are locked out: the login page again,
    saying why and for how long (429 with Retry-After)."""
    minutes = max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    context = {
        "form": AuthenticationForm(
            request, initial={"username": lockout_username(request, credentials)}
        ),
        "next": request.POST.get("next", ""),
        "locked_out": (
            "Too many failed sign-in attempts for this account from your address. "
            f"Sign-in is locked for {minutes} minutes; an administrator can unlock it sooner."
        ),
    }
    response = render(request, LoginView.template_name, context, status=429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response


class LogoutView(auth_views.LogoutView):
    pass


@login_required
@require_POST
def switch_tenant(request: OperatorRequest) -> HttpResponse:
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
