"""Django admin for memories: view only (changes go through the services), owner counts shown."""

from __future__ import annotations

import pytest
from django.urls import reverse

from memories.models import Memory, MemoryRevision, OwnerCount


@pytest.fixture
def superuser_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root@example.test", "root@example.test", "x")
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_memories_revisions_and_owner_counts_are_view_only(superuser_client, api_client, agent):
    memory_id = api_client.post("/api/v1/memories", {"text": "Likes tea"}, format="json").json()[
        "memory_id"
    ]
    count = OwnerCount.objects.get(tenant_id=agent.tenant_id, owner_id=agent.pk)
    revision = MemoryRevision.objects.get()

    listed = superuser_client.get(reverse("admin:memories_ownercount_changelist"))
    assert listed.status_code == 200
    assert list(listed.context["cl"].result_list) == [count] and count.active == 1

    for model, pk in (
        ("memory", memory_id),
        ("memoryrevision", revision.pk),
        ("ownercount", count.pk),
    ):
        assert superuser_client.get(reverse(f"admin:memories_{model}_add")).status_code == 403
        change_url = reverse(f"admin:memories_{model}_change", args=[pk])
        page = superuser_client.get(change_url)
        assert page.status_code == 200  # a view-only page
        assert "Save" not in page.content.decode()
        assert superuser_client.post(change_url, {}).status_code == 403
        delete_url = reverse(f"admin:memories_{model}_delete", args=[pk])
        assert superuser_client.post(delete_url, {"post": "yes"}).status_code == 403
    assert Memory.objects.get().text == "Likes tea"
    assert MemoryRevision.objects.count() == 1
