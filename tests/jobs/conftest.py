"""Fixtures for the job tests: a fixed clock. Their bulk memory builders are in
tests/support/jobs.py, the subprocess runner for the management commands in
tests/support/commands.py."""

from __future__ import annotations

import pytest

from tests.support.jobs import NOW


@pytest.fixture
def now():
    return NOW
