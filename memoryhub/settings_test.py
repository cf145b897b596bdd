"""The test suite's settings: memoryhub/settings.py with the defaults tests need. Each is the
default of its environment variable, so a test, or a process it starts with these settings,
can still set the variable as a deployment would."""

from __future__ import annotations

from pathlib import Path

from memoryhub.env import environment_defaults

with environment_defaults(
    # A server of its own, so a test run never touches the development database.
    MEMORYHUB_DATA_DIR=str(Path(__file__).resolve().parent.parent / "var" / "test"),
    # One connection per thread, as Django's test cases expect (their transaction holds it).
    MEMORYHUB_DB_POOL="0",
    # A test that breaks the connection on purpose must not put the rest of the run in
    # "outage" mode (every request answered 503 until a probe succeeds).
    MEMORYHUB_DB_FAIL_FAST="0",
    # Tests run the webhook dispatcher themselves, when they mean to.
    MEMORYHUB_WEBHOOK_NUDGE="0",
    # Deterministic vectors, no model to load.
    MEMORYHUB_EMBEDDER="hashing",
    # The tests that build the local model compare the model's own vectors, and need no
    # database to pick them; the tests of `auto` set it.
    MEMORYHUB_EMBEDDER_PRECISION="fp32",
    # No test's vectors outlive it in /dev/shm; the shared cache's tests give it a file of theirs.
    MEMORYHUB_EMBEDDING_SHARED_CACHE="0",
    # Frozen in a test process, what earlier tests allocated would never be collected.
    MEMORYHUB_GC_FREEZE="0",
    # A read's access count and time are in the database when the request returns.
    MEMORYHUB_ACCESS_BUMP="sync",
):
    from memoryhub.settings import *  # noqa: F403

# The default hasher is slow on purpose; tests create and sign in users all the time.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Jobs run at once in the process that enqueues them, inside the test's transaction.
Q_CLUSTER = {**Q_CLUSTER, "sync": True}  # noqa: F405
# The embedded test server's data is thrown away: it runs without durability (no fsync).
if EMBEDDED_DB is not None:  # noqa: F405
    DATABASES["default"]["EMBEDDED_THROWAWAY"] = True  # type: ignore[typeddict-unknown-key]  # noqa: F405
