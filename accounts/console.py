"""Console access: the operator's current tenant (from the session) and role checks.

Every console view is wrapped in `require_role(...)`. It logs the operator in if needed,
resolves the membership for the tenant chosen in the session (the first one otherwise), and
answers 403 when the role is too low. A viewer is read-only everywhere: any unsafe method needs
at least `reviewer`, whatever the view asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, cast

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django_htmx.middleware import HtmxDetails

from accounts.models import ROLE_RANK, Membership, Role, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import User

SESSION_TENANT_KEY = "console_tenant_id"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# A console view: the request first, then the URL's arguments.
ConsoleView = Callable[..., HttpResponseBase]


class OperatorRequest(HttpRequest):
    """A request from a signed-in operator (`login_required` let it in)."""

    user: User


class ConsoleRequest(OperatorRequest):
    """The request a console view gets once `require_role` let it in: a signed-in operator,
    their membership of the current tenant, and django-htmx's `htmx` (its middleware)."""

    membership: Membership
    tenant: Tenant
    console_memberships: list[Membership]
    htmx: HtmxDetails


def memberships_for(user: User) -> list[Membership]:
    return list(
        Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__slug")
    )


def current_membership(request: ConsoleRequest) -> Membership | None:
    """The membership for the tenant picked in the session, else the operator's first one."""
    memberships = memberships_for(request.user)
    request.console_memberships = memberships
    if not memberships:
        return None
    wanted = request.session.get(SESSION_TENANT_KEY)
    for membership in memberships:
        if membership.tenant_id == wanted:
            return membership
    return memberships[0]


def require_role(role: str = Role.VIEWER) -> Callable[[ConsoleView], ConsoleView]:
    """Decorate a console view: login, current tenant, and at least `role` (reviewer to write)."""

    def decorator(view: ConsoleView) -> ConsoleView:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            # Signed in: the console's request, whose membership and tenant are set below.
            request = cast(ConsoleRequest, request)
            membership = current_membership(request)
            if membership is None:
                raise PermissionDenied("You are not a member of any tenant.")
            needed = role
            if request.method not in SAFE_METHODS and ROLE_RANK[role] < ROLE_RANK[Role.REVIEWER]:
                needed = Role.REVIEWER
            if not membership.has_role(needed):
                raise PermissionDenied("Your role does not allow this.")
            request.membership = membership
            request.tenant = membership.tenant
            return view(request, *args, **kwargs)

        wrapped.console_role = role  # type: ignore[attr-defined]  # read by the tests' audit
        return wrapped

    return decorator


def operator_actor(request: ConsoleRequest) -> str:
    """The revision actor for the signed-in operator."""
    return f"operator:{request.user.email or request.user.get_username()}"
