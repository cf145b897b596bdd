"""Sign-in throttling (django-axes): 5 failures for one user from one address lock that pair
out for 15 minutes; the login page says so; admins see the attempts and lockouts."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.conf import settings
from django.test import Client
from django.utils import timezone

from tests.factories import TEST_PASSWORD, make_operator

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
