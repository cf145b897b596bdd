"""Console fixtures: operators of each role signed in, and memories stored through the services."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import make_operator
from tests.support.memories import ingest, store


@pytest.fixture
def store_memory():
    return store


@pytest.fixture
def make_thread():
    return ingest


@pytest.fixture
def login():
    """login(user) → a Django test client with that operator signed in."""

    def build(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return build


@pytest.fixture
def admin_user(tenant):
    return make_operator(tenant, "admin@acme.test", "admin").user


@pytest.fixture
def owner_client(login, owner):
    return login(owner)


@pytest.fixture
def viewer_client(login, viewer):
    return login(viewer)


@pytest.fixture
def reviewer_client(login, reviewer):
    return login(reviewer)
