"""`python manage.py screenshots` (`make screenshots`): the console's pages as PNG files in
docs/screenshots/, as the README and the docs show them.

On a throwaway embedded PostgreSQL (nothing touches your data): `seed_demo`, thirty days of
made-up activity (`memories.demo_history`), a second tenant with nothing in it (its dashboard's
first steps), then the real server and the system Chromium (`/usr/bin/chromium`, driven by
Playwright; no browser is downloaded) signed in as the demo operator, one page after another.
"""

from __future__ import annotations

import secrets
from io import StringIO
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from accounts.models import Agent
from accounts.services import operator_create, operator_password_reset, tenant_get_or_create
from memories.demo_history import seed_history
from memories.embeddings import reset_embedder
from memories.models import Memory, Thread
from memoryhub.throwaway import ApiServer, throwaway_database

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # a dev dependency (pyproject's `dev` extra)
    sync_playwright = None  # type: ignore[assignment]

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 880}
DEMO_EMAIL, FRESH_EMAIL = "admin@example.com", "new@example.com"


def pages(ids: dict[str, str]) -> dict[str, str]:
    """Screenshot name → the console URL it shows."""
    return {
        "dashboard": "/console/",
        "getting-started": "/console/",  # as the operator of a tenant with nothing yet
        "memories": "/console/memories/",
        "search": "/console/memories/?q=email+contact",
        "memory-pending": f"/console/memories/{ids['pending']}/",
        "review": "/console/review/",
        "subject": "/console/subjects/alice/",
        "threads": "/console/threads/",
        "thread": f"/console/threads/{ids['thread']}/",
        "tombstones": "/console/tombstones/",
        "activity": "/console/activity/",
        "export": "/console/export/",
        "agents": "/console/agents/",
        "agent-new-key": "/console/agents/demo-agent/",  # after `Create key`
        "jobs": "/console/jobs/",
    }


class Command(BaseCommand):
    help = "Refresh the console screenshots in docs/screenshots/ (a throwaway database)."

    def add_arguments(self, parser):
        parser.add_argument("--output", type=Path, default=Path("docs/screenshots"))
        parser.add_argument("--only", nargs="*", help="these screenshots only (names as files)")

    def handle(self, *args, **opts):
        if sync_playwright is None or not Path(CHROMIUM).exists():
            raise CommandError(f"needs Playwright (pip install playwright) and {CHROMIUM}")
        output: Path = opts["output"]
        output.mkdir(parents=True, exist_ok=True)
        saved = settings.MEMORYHUB_EMBEDDER
        settings.MEMORYHUB_EMBEDDER = "hashing"  # the server's too: fast, and no model to load
        reset_embedder()
        try:
            with throwaway_database(self.stdout.write) as data_dir:
                password, ids = self.seed()
                with ApiServer(data_dir, embedder="hashing") as server:
                    wanted = pages(ids)
                    if opts["only"]:
                        wanted = {k: v for k, v in wanted.items() if k in opts["only"]}
                    self.shoot(server.base_url, password, wanted, output)
        finally:
            settings.MEMORYHUB_EMBEDDER = saved
            reset_embedder()

    def seed(self) -> tuple[str, dict[str, str]]:
        call_command("seed_demo", stdout=StringIO())  # its key and password are not needed
        password = secrets.token_urlsafe(12)
        operator_password_reset(email=DEMO_EMAIL, password=password)
        agent = Agent.objects.get(tenant__slug="demo", slug="demo-agent")
        seed_history(tenant=agent.tenant, agent=agent)
        operator_create(
            tenant=tenant_get_or_create(slug="fresh", name="A new tenant"),
            email=FRESH_EMAIL,
            password=password,
            role="owner",
        )
        pending = Memory.objects.get(
            tenant=agent.tenant, text="Alice might be relocating to Lisbon."
        )
        thread = Thread.objects.get(tenant=agent.tenant, thread_id="support-42")
        self.stdout.write("seeded the demo tenant with thirty days of activity")
        return password, {"pending": pending.pk, "thread": str(thread.pk)}

    def shoot(self, base_url: str, password: str, wanted: dict[str, str], output: Path) -> None:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            try:
                pages_of: dict[str, list[tuple[str, str]]] = {DEMO_EMAIL: [], FRESH_EMAIL: []}
                for name, url in wanted.items():
                    user = FRESH_EMAIL if name == "getting-started" else DEMO_EMAIL
                    pages_of[user].append((name, url))
                for email, shots in pages_of.items():
                    if not shots:
                        continue
                    context = browser.new_context(
                        base_url=base_url,
                        viewport=VIEWPORT,  # type: ignore[arg-type]  # a ViewportSize
                    )
                    page = context.new_page()
                    page.goto("/accounts/login/")
                    page.get_by_label("Email").fill(email)
                    page.get_by_label("Password").fill(password)
                    page.get_by_role("button", name="Log in").click()
                    page.wait_for_url("**/console/")
                    for name, url in shots:
                        self.photograph(page, name, url, output)
                    context.close()
            finally:
                browser.close()

    def photograph(self, page, name: str, url: str, output: Path) -> None:
        page.goto(url)
        if name == "agent-new-key":
            page.locator("#keys").get_by_label("Name").fill("laptop")
            page.get_by_role("button", name="Create key").click()
            page.locator("[data-new-key]").wait_for()
            page.locator("#keys").scroll_into_view_if_needed()
        path = output / f"{name}.png"
        page.screenshot(path=str(path))
        self.stdout.write(f"wrote {path} ({path.stat().st_size // 1024} KB)")
