"""Sign-in throttling (django-axes): 5 failures for one user from one address lock that pair
out for 15 minutes; the login page says so; admins see the attempts and lockouts."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

import pytest
import time_machine
import uvicorn
from axes.helpers import get_client_ip_address
from axes.models import AccessAttempt
from django.conf import settings
from django.db import connections
from django.test import Client
from django.utils import timezone
from uvicorn.main import main as uvicorn_command

from memoryhub import supervisor
from memoryhub.asgi import application
from memoryhub.proxies import parse_trusted_proxies
from tests.factories import (
    TEST_PASSWORD,
    asgi_http_scope,
    asgi_request,
    make_operator,
    make_tenant,
)

EMAIL = "ops@acme.test"
LOCKED = "Too many failed sign-in attempts for this account from your address."


@pytest.fixture
def operator(tenant):
    return make_operator(tenant, EMAIL, "owner").user


def sign_in(username: str, password: str, ip: str = "10.0.0.1"):
    return Client(REMOTE_ADDR=ip).post(
        "/accounts/login/", {"username": username, "password": password}
    )


def fail(times: int, username: str = EMAIL, ip: str = "10.0.0.1"):
    return [sign_in(username, "wrong-password", ip) for _ in range(times)]


def test_the_policy_is_five_failures_and_fifteen_minutes():
    assert settings.AXES_FAILURE_LIMIT == 5
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 15 * 60
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


@pytest.mark.django_db
def test_five_failures_lock_the_user_at_that_address(operator):
    for response in fail(4):
        assert response.status_code == 200  # the login page again, with its usual error
        assert LOCKED not in response.content.decode()
    fifth = fail(1)[0]
    assert fifth.status_code == 429
    assert LOCKED in fifth.content.decode()
    assert "locked for 15 minutes" in fifth.content.decode()
    assert fifth["Retry-After"] == "900"
    assert 'name="username"' in fifth.content.decode()  # still the login page

    # The right password does not get through either, until the cool-off is over.
    locked = sign_in(EMAIL, TEST_PASSWORD)
    assert locked.status_code == 429 and LOCKED in locked.content.decode()
    # Another address may still sign in as that user; the name's case does not dodge the count.
    assert sign_in(EMAIL, TEST_PASSWORD, ip="10.0.0.2").status_code == 302
    assert sign_in("  OPS@Acme.TEST", TEST_PASSWORD).status_code == 429


@pytest.mark.django_db
def test_the_lockout_ends_after_the_cool_off(operator):
    fail(5)
    assert sign_in(EMAIL, TEST_PASSWORD).status_code == 429
    with time_machine.travel(timezone.now() + timedelta(minutes=16)):
        response = sign_in(EMAIL, TEST_PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/console/"


@pytest.mark.django_db
def test_a_success_resets_the_count(operator):
    fail(4)
    assert sign_in(EMAIL, TEST_PASSWORD).status_code == 302
    assert all(r.status_code == 200 for r in fail(4))


@pytest.mark.django_db
def test_admins_see_attempts_and_lockouts(operator, client, django_user_model):
    fail(5)
    admin = django_user_model.objects.create_superuser("root@acme.test", "root@acme.test", "x")
    client.force_login(admin)
    attempts = client.get("/admin/axes/accessattempt/")
    assert attempts.status_code == 200
    assert EMAIL in attempts.content.decode() and "10.0.0.1" in attempts.content.decode()
    failures = client.get("/admin/axes/accessfailurelog/")
    assert failures.status_code == 200 and EMAIL in failures.content.decode()


# --- The address counted: the peer's, or a trusted proxy's client (memoryhub/proxies.py) ------


def sign_in_via(peer: str, forwarded_for: str, password: str = "wrong-password"):
    return Client(REMOTE_ADDR=peer).post(
        "/accounts/login/",
        {"username": EMAIL, "password": password},
        HTTP_X_FORWARDED_FOR=forwarded_for,
    )


@pytest.mark.django_db
def test_a_new_x_forwarded_for_each_time_does_not_dodge_the_lockout(operator, settings):
    assert settings.MEMORYHUB_TRUSTED_PROXIES == ()  # unset: no proxy is believed
    answers = [sign_in_via("198.51.100.20", f"203.0.113.{i}").status_code for i in range(1, 9)]
    assert answers == [200] * 4 + [429] * 4
    # Counted against the real peer, as the admin shows.
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == ["198.51.100.20"]
    # Any other address still signs in.
    assert sign_in_via("198.51.100.21", "", TEST_PASSWORD).status_code == 302


@pytest.mark.django_db
def test_behind_a_trusted_proxy_a_client_is_locked_and_not_the_others(operator, settings):
    settings.MEMORYHUB_TRUSTED_PROXIES = parse_trusted_proxies("10.0.0.0/8")
    proxy = "10.0.0.2"  # every request arrives from the proxy
    answers = [sign_in_via(proxy, "6.6.6.6, 203.0.113.7").status_code for _ in range(5)]
    assert answers == [200] * 4 + [429]
    assert sign_in_via(proxy, "203.0.113.7", TEST_PASSWORD).status_code == 429
    # The same user from another client, through the same proxy, is not locked out.
    assert sign_in_via(proxy, "198.51.100.9", TEST_PASSWORD).status_code == 302
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == ["203.0.113.7"]


@pytest.mark.django_db
def test_axes_never_asks_ipware(settings, rf):
    settings.MEMORYHUB_TRUSTED_PROXIES = parse_trusted_proxies("10.0.0.0/8")
    spoofed = rf.post(
        "/accounts/login/", REMOTE_ADDR="198.51.100.20", HTTP_X_FORWARDED_FOR="1.2.3.4"
    )
    assert get_client_ip_address(spoofed, use_ipware=True) == "198.51.100.20"
    proxied = rf.post("/accounts/login/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="1.2.3.4")
    assert get_client_ip_address(proxied, use_ipware=True) == "1.2.3.4"


# --- Served as `serve` serves it (uvicorn, the ASGI app) --------------------------------------

CSRF = "k" * 32  # a cookie secret of the client's choosing, sent back as the header token


def served_app():
    """The ASGI app wrapped as uvicorn wraps it with `serve`'s own command-line options (its
    proxy-header middleware, unless they turn it off)."""
    web = supervisor.processes(host="127.0.0.1", port=8000, workers=1, cluster=False)[-1]
    options = uvicorn_command.make_context("uvicorn", web[3:]).params
    config = uvicorn.Config(
        application,
        proxy_headers=options["proxy_headers"],
        forwarded_allow_ips=options["forwarded_allow_ips"],
        log_config=None,
        lifespan="off",
    )
    config.load()
    return config.loaded_app


def served_sign_in(app, peer: str, forwarded_for: str) -> int:
    body = urlencode({"username": EMAIL, "password": "wrong-password"}).encode()
    headers = [
        (b"content-type", b"application/x-www-form-urlencoded"),
        (b"content-length", b"%d" % len(body)),
        (b"cookie", f"csrftoken={CSRF}".encode()),
        (b"x-csrftoken", CSRF.encode()),
        (b"x-forwarded-for", forwarded_for.encode()),
    ]
    scope = asgi_http_scope("POST", "/accounts/login/", headers)
    scope["client"] = (peer, 50123)
    sent = asgi_request(app, scope, body)
    return sent[0]["status"]


@pytest.fixture
def served_operator(transactional_db, monkeypatch):
    # The pool thread's connection closes when its request ends (it would outlive the test).
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)
    return make_operator(make_tenant("acme"), EMAIL, "owner").user


def test_served_a_new_x_forwarded_for_from_localhost_does_not_dodge_the_lockout(served_operator):
    """What a client on the server's own machine, or a local proxy passing the header on, could
    do: uvicorn believed X-Forwarded-For from 127.0.0.1 by default."""
    app = served_app()
    answers = [served_sign_in(app, "127.0.0.1", f"203.0.113.{i}") for i in range(1, 9)]
    assert answers == [200] * 4 + [429] * 4
