"""One TLS context for every outgoing HTTPS client (the model's API, webhook deliveries)."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def tls_context() -> ssl.SSLContext:
    """Building a context reads the whole CA bundle (about 0.1 s of CPU): made once, shared by
    every client and thread. Made by httpx as it would make its own, so SSL_CERT_FILE and
    SSL_CERT_DIR still count. httpx is imported here, so importing this module costs nothing."""
    import httpx

    return httpx.create_ssl_context()
