"""The webhook receiver of docs/operations.md, run as written against real deliveries."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from accounts.principal import Principal
from memories.services.store import memory_store
from memories.webhooks import delivery, endpoints
from memoryhub.throwaway import free_port

DOC = Path(settings.BASE_DIR) / "docs" / "operations.md"


def example() -> str:
    text = DOC.read_text()
    after = text.split("<!-- receiver-example", 1)[1]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


@pytest.mark.django_db
def test_the_documented_receiver_accepts_signed_deliveries_and_refuses_forged_ones(
    settings, tenant, agent
):
    settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = True
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    created = endpoints.webhook_create(tenant=tenant, url=url, actor="operator:a@b.c")
    receiver = subprocess.Popen(
        [sys.executable, "-c", example()],
        env={"MEMORYHUB_WEBHOOK_SECRET": created.secret, "PORT": str(port), "PATH": ""},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        forged = None
        for _ in range(300):  # until it listens (bounded)
            assert receiver.poll() is None, receiver.communicate()
            try:
                forged = httpx.post(
                    url, content=b"{}", headers={"MemoryHub-Signature": "t=1,v1=00"}
                )
                break
            except httpx.TransportError:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    receiver.wait(0.05)  # waiting for the process to start (bounded)
        assert forged is not None and forged.status_code == 400
        memory = memory_store(
            principal=Principal(tenant=tenant, agent=agent), data={"text": "a fact"}
        ).memory
        counts = delivery.dispatch_webhooks()
    finally:
        receiver.terminate()
        out, err = receiver.communicate(timeout=30)
    assert counts["delivered"] == 1, (counts, err)
    assert re.fullmatch(rf"\d+ memory\.created {memory.pk}\n", out), out
