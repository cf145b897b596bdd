from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from accounts import keys
from accounts.models import Agent, ApiKey, Membership


@pytest.mark.django_db
def test_healthz_reports_database_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "database": "ok"}


@pytest.mark.django_db
def test_healthz_is_503_json_when_database_is_unreachable(client):
    original = connection.settings_dict["HOST"]
    connection.close()
    connection.settings_dict["HOST"] = "/nonexistent-socket-dir"
    try:
        response = client.get("/healthz")
    finally:
        connection.settings_dict["HOST"] = original
        connection.close()
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {"ok": False, "database": "unavailable"}


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_create_api_key_prints_only_a_working_key(client):
    output = run(
        "create_api_key", "--tenant", "t1", "--agent", "a1", "--scope", "read", "--scope", "write"
    )
    raw = output.strip()
    assert output.count("\n") == 1 and keys.is_well_formed(raw)
    row = ApiKey.objects.get()
    assert (row.tenant.slug, row.agent.slug, row.scopes) == ("t1", "a1", ["read", "write"])
    response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    assert response.json()["agent"] == "a1"


@pytest.mark.django_db
def test_create_api_key_with_subject_and_expiry():
    raw = run(
        "create_api_key",
        "--tenant",
        "t1",
        "--agent",
        "a1",
        "--subject",
        "u-9",
        "--expires-in",
        "30d",
    ).strip()
    row = ApiKey.objects.get(prefix=keys.lookup_prefix(raw))
    assert row.subject_id == "u-9" and row.expires_at is not None
    with pytest.raises(CommandError):
        run("create_api_key", "--tenant", "t1", "--agent", "a1", "--expires-in", "soon")


@pytest.mark.django_db
def test_create_operator_and_role():
    run(
        "create_operator",
        "--tenant",
        "t1",
        "--email",
        "Ops@Example.com",
        "--password",
        "s3cret-pass",
        "--role",
        "reviewer",
    )
    membership = Membership.objects.select_related("user").get()
    assert membership.user.username == "ops@example.com" and membership.role == "reviewer"
    assert membership.user.check_password("s3cret-pass")


@pytest.mark.django_db
def test_create_operator_reset_password_keeps_the_role_and_prints_a_new_one_once():
    run(
        "create_operator",
        "--tenant",
        "t1",
        "--email",
        "ops@example.com",
        "--password",
        "old-pass1",
        "--role",
        "owner",
    )
    out = run("create_operator", "--email", "OPS@example.com", "--reset-password")
    new = out.strip().rsplit(": ", 1)[1].split()[0]
    membership = Membership.objects.select_related("user").get()
    assert membership.role == "owner"  # untouched, unlike a create_operator without --role
    assert membership.user.check_password(new) and not membership.user.check_password("old-pass1")
    assert "changed" in run(
        "create_operator",
        "--email",
        "ops@example.com",
        "--reset-password",
        "--password",
        "chosen-pass",
    )
    membership.user.refresh_from_db()
    assert membership.user.check_password("chosen-pass")
    with pytest.raises(CommandError, match=r"No operator nobody@example\.com"):
        run("create_operator", "--email", "nobody@example.com", "--reset-password")
    with pytest.raises(CommandError, match="--tenant and --password are required"):
        run("create_operator", "--email", "ops@example.com")


@pytest.mark.django_db
def test_agent_policy_prints_the_resulting_policy():
    run("create_api_key", "--tenant", "t1", "--agent", "a1")
    run("create_api_key", "--tenant", "t1", "--agent", "helper")
    output = run(
        "agent_policy",
        "--tenant",
        "t1",
        "--agent",
        "a1",
        "--entry-cap",
        "50",
        "--hydration-budget",
        "4000",
        "--default-category",
        "daily",
        "--dedup-threshold",
        "0.8",
        "--default-ttl",
        "7d",
        "--reads-from",
        "helper",
        "--extraction",
        "review",
        "--extraction-idle-seconds",
        "30",
        "--review-below",
        "0.9",
        "--extraction-categories",
        "core",
        "prefs",
        "--extraction-max-operations",
        "20",
    )
    assert json.loads(output) == {
        "tenant": "t1",
        "agent": "a1",
        "entry_cap": 50,
        "hydration_budget_bytes": 4000,
        "default_category": "daily",
        "dedup_threshold": 0.8,
        "default_ttl": "7d",
        "reads_from": ["helper"],
        "extraction": "review",
        "extraction_idle_seconds": 30,
        "extraction_min_confidence": 0.5,
        "review_below": 0.9,
        "extraction_categories": ["core", "prefs"],
        "summary_threshold_bytes": 16000,
        "extraction_max_operations": 20,
        "core_max_entries": 20,
        "core_max_chars": 4000,
        "archival_max_chars": 8000,
        "context_messages": 20,
        "formation_user_scope": True,
        "max_retention": {},
    }
    assert Agent.objects.get(slug="a1").default_ttl.days == 7
    with pytest.raises(CommandError):
        run("agent_policy", "--tenant", "t1", "--agent", "a1", "--review-below", "2")
    for bound in ("0", "1001"):
        with pytest.raises(CommandError):
            run(
                "agent_policy",
                "--tenant",
                "t1",
                "--agent",
                "a1",
                "--extraction-max-operations",
                bound,
            )
    with pytest.raises(CommandError):
        run("agent_policy", "--tenant", "t1", "--agent", "a1", "--extraction-categories", "Bad!")
    with pytest.raises(CommandError):
        run("agent_policy", "--tenant", "t1", "--agent", "a1", "--reads-from", "ghost")
    with pytest.raises(CommandError):
        run("agent_policy", "--tenant", "t1", "--agent", "a1", "--dedup-threshold", "1.5")
    with pytest.raises(CommandError):
        run("agent_policy", "--tenant", "t1", "--agent", "nobody")


@pytest.mark.django_db
def test_agent_policy_sets_the_memory_model_policy():
    """The memory model's agent policy: block limits, formation's context and user scope, retention
    by category."""
    run("create_api_key", "--tenant", "t1", "--agent", "a1")
    args = ("agent_policy", "--tenant", "t1", "--agent", "a1")
    policy = json.loads(
        run(
            *args,
            "--core-max-entries",
            "5",
            "--core-max-chars",
            "900",
            "--archival-max-chars",
            "2000",
            "--context-messages",
            "8",
            "--formation-user-scope",
            "false",
            "--max-retention",
            "daily=12h",
            "core=365d",
        )
    )
    assert (policy["core_max_entries"], policy["core_max_chars"]) == (5, 900)
    assert (policy["archival_max_chars"], policy["context_messages"]) == (2000, 8)
    assert policy["formation_user_scope"] is False
    assert policy["max_retention"] == {"core": "365d", "daily": "12h"}
    cleared = json.loads(run(*args, "--max-retention", "daily=none"))
    assert cleared["max_retention"] == {"core": "365d"} and cleared["core_max_entries"] == 5
    assert json.loads(run(*args, "--formation-user-scope", "true"))["formation_user_scope"]
    for bad in (
        ("--max-retention", "daily"),
        ("--max-retention", "daily=soon"),
        ("--max-retention", "Bad!=1h"),
        ("--formation-user-scope", "maybe"),
    ):
        with pytest.raises((CommandError, SystemExit)):
            run(*args, *bad)


@pytest.mark.django_db
def test_create_api_key_with_a_memory_ttl():
    raw = run("create_api_key", "--tenant", "t1", "--agent", "a1", "--memory-ttl", "24h").strip()
    row = ApiKey.objects.get(prefix=keys.lookup_prefix(raw))
    assert row.memory_ttl == timedelta(hours=24)
    with pytest.raises(CommandError):
        run("create_api_key", "--tenant", "t1", "--agent", "a1", "--memory-ttl", "a while")
