"""The SSRF guard: where a webhook may be sent.

A URL must be `https://` with a host and no credentials, and every address its host resolves
to must be public — not loopback, private (RFC 1918, unique local), link-local (cloud metadata
services live there), shared, reserved, multicast or unspecified. An IPv6 address that carries
an IPv4 one is judged by that IPv4 address too: mapped (`::ffff:a.b.c.d`), compatible
(`::a.b.c.d`), translated (`::ffff:0:a.b.c.d`) and NAT64 (`64:ff9b::a.b.c.d`) stand for it
alone; a 6to4 address (`2002:AABB:CCDD::`, its gateway) and a Teredo one (`2001:0::/32`, its
server and its obfuscated client) must pass both rules; the local-use NAT64 prefix
(`64:ff9b:1::/48`, its IPv4 address placed where the network chose) is never public. Numeric
spellings of an IPv4 host (`2130706433`, `0x7f000001`, `127.1`, `0177.0.0.1`) resolve to the
address they spell and are judged as it. It is checked when the endpoint is created and again, after a fresh lookup, before
every delivery, which then connects to the very address that was checked (`Target.ip`), the
original host kept for the `Host` header and TLS (SNI and certificate): a name that resolves
differently between the check and the connection cannot slip through.

`MEMORYHUB_WEBHOOK_ALLOW_INSECURE=1` (development) allows `http://` and any address.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from django.conf import settings

MAX_URL_CHARS = 2000


class Refused(Exception):
    """The URL may not be used (the message says why, naming no address beyond its kind)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as written in the URL (for Host and TLS)
    port: int
    path: str  # path and query
    ip: str  # the checked address to connect to

    @property
    def connect_url(self) -> str:
        ip = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{self.scheme}://{ip}:{self.port}{self.path}"

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (the one lookup; tests replace this function)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(cast(str, info[4][0]) for info in infos))  # an IP address


# IPv6 forms that stand for the IPv4 address in their last 32 bits.
_CARRIES_IPV4 = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        "::ffff:0:0/96",  # IPv4-mapped
        "::/96",  # IPv4-compatible (deprecated; `::` and `::1` fall in it and stay refused)
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
        "64:ff9b::/96",  # NAT64, the well-known prefix
    )
)
# Local-use NAT64: where the IPv4 address sits depends on the network's prefix length.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


def _global(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return ip.is_global and not ip.is_multicast


def public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _LOCAL_NAT64:
            return False
        if any(ip in net for net in _CARRIES_IPV4):
            return _global(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        carried = [ip.sixtofour] if ip.sixtofour is not None else list(ip.teredo or ())
        if not all(_global(v4) for v4 in carried):
            return False
    return _global(ip)


def parse(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of an acceptable URL, or Refused."""
    insecure = settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE
    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        raise Refused(f"a URL of at most {MAX_URL_CHARS} characters is required")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise Refused("the URL may not hold spaces or control characters")
    parts = urlsplit(url)
    allowed = ("https", "http") if insecure else ("https",)
    if parts.scheme not in allowed:
        raise Refused("the URL must be https://")
    if parts.username is not None or parts.password is not None:
        raise Refused("the URL may not hold credentials")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused("the URL's port is not valid") from None
    host = parts.hostname
    if not host:
        raise Refused("the URL needs a host")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, host, port, path


def check(url: str) -> Target:
    """Resolve the URL's host and check every address; the Target connects to the first."""
    scheme, host, port, path = parse(url)
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError):
        raise Refused("the URL's host does not resolve") from None
    if not addresses:
        raise Refused("the URL's host does not resolve")
    if not settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE:
        for address in addresses:
            if not public(address):
                raise Refused(
                    "the URL's host resolves to a loopback, private or link-local address"
                )
    return Target(scheme=scheme, host=host, port=port, path=path, ip=addresses[0])
