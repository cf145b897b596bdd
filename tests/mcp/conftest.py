from tests.support.live_server import asgi_server  # noqa: F401 - the fixture, shared
