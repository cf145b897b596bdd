from tests.support.formation import llm, principal  # noqa: F401 - the fixtures, shared
from tests.support.live_server import asgi_server  # noqa: F401
from tests.support.pgbouncer import pgbouncer_port, through_pgbouncer  # noqa: F401
