"""`manage.py check --deploy`: production mode with the development SECRET_KEY is an error."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from tests.support.commands import BASE_DIR, command_env

REAL_KEY = "k9Qx-" + "vT2wLr8bN5zHs3Yd7Pq1Jc6Mf4Ug0Ae" * 2


def test_production_with_the_development_key_is_an_error(settings):
    settings.MEMORYHUB_PRODUCTION = True
    settings.SECRET_KEY = settings.DEVELOPMENT_SECRET_KEY
    with pytest.raises(SystemCheckError, match=r"memoryhub\.E001"):
        call_command("check", "--deploy")


def test_a_real_key_or_local_mode_passes_our_check(settings):
    from memoryhub.checks import development_secret_key_in_production

    settings.MEMORYHUB_PRODUCTION = True
    settings.SECRET_KEY = REAL_KEY
    assert development_secret_key_in_production(None) == []
    settings.MEMORYHUB_PRODUCTION = False
    settings.SECRET_KEY = settings.DEVELOPMENT_SECRET_KEY
    assert development_secret_key_in_production(None) == []


def check_deploy(**env: str) -> subprocess.CompletedProcess:
    # (The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE for this process: async.E001 in deploy.)
    unset = {"SECRET_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    environment = {k: v for k, v in command_env().items() if k not in unset}
    environment.update(DJANGO_SETTINGS_MODULE="memoryhub.settings", **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_fails_in_production_mode_without_a_secret_key():
    done = check_deploy(MEMORYHUB_PRODUCTION="1")
    assert done.returncode != 0
    assert "memoryhub.E001" in done.stderr
    assert "SECRET_KEY is the built-in development key" in done.stderr


def test_check_deploy_is_clean_in_production_mode_with_a_secret_key():
    done = check_deploy(MEMORYHUB_PRODUCTION="1", SECRET_KEY=REAL_KEY)
    assert done.returncode == 0, done.stderr
    assert "memoryhub.E001" not in done.stdout + done.stderr
    assert "no issues" in done.stdout
    assert settings.SECRET_KEY != REAL_KEY  # the subprocess's settings are its own
