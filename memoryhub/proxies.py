"""Who the client is, and whether it came over HTTPS, behind reverse proxies we trust.

One rule, applied everywhere the client's address or scheme matters (sign-in lockouts, the
access log, HTTPS detection and the redirect to it):

- the client is the peer (the address the TCP connection came from) unless the peer is one of
  `MEMORYHUB_TRUSTED_PROXIES`. Then `X-Forwarded-For` is walked from the right: hops that are
  trusted proxies too are skipped, and the first one that is not is the client (the right-most
  untrusted hop: everything left of it was written by the client and proves nothing). When
  every hop is trusted, the left-most is the client. A hop that is not an IP address stops the
  walk: the last good address reached (a trusted hop, or the peer) is the client. Never an
  error: the headers are whatever a client sent;
- the scheme is the connection's own, except that a trusted peer's `X-Forwarded-Proto` (its
  right-most value) says whether the client reached that proxy over `https` or `http`;
- from any other peer, every forwarded header (`X-Forwarded-*`, `Forwarded`, `X-Real-IP`) is
  removed from the request, so nothing downstream (Django, django-axes, a view) can read one.
  Unset or empty, no peer is trusted: forwarded headers never count.

Served by `serve` (uvicorn, ASGI), the ASGI app applies it to every request before anything
else sees it (`resolve_scope`), `/mcp` included; uvicorn's own proxy-header handling is off
(`serve` says why). Outside ASGI (the test client, `runserver`, WSGI) `TrustedProxyMiddleware`
applies it to the Django request; a request the ASGI app has resolved is left as it is.
See docs/operations.md#behind-a-reverse-proxy.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:  # settings import this module: nothing of Django's request machinery yet
    from django.http import HttpRequest, HttpResponse

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# The headers a proxy sets to describe its client; from an untrusted peer they are dropped.
FORWARDED_HEADERS = (
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-server",
    "x-real-ip",
    "forwarded",
)
_HEADER_NAMES = frozenset(name.encode() for name in FORWARDED_HEADERS)
_META_NAMES = tuple("HTTP_" + name.upper().replace("-", "_") for name in FORWARDED_HEADERS)
# Set on a request (its ASGI scope, its WSGI environ) once the rule has been applied to it.
RESOLVED_KEY = "memoryhub.proxies.resolved"
# The most X-Forwarded-For hops looked at, from the right: more proxies than this in a row is
# no real deployment, and a header padded with trusted addresses costs nothing to walk.
MAX_HOPS = 32

_BRACKETED = re.compile(r"\[([^\]]*)\](?::\d{1,5})?")  # [2001:db8::1] or [2001:db8::1]:443
_IPV4_PORT = re.compile(r"(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}")  # 203.0.113.7:51234


def parse_trusted_proxies(
    raw: str, *, name: str = "MEMORYHUB_TRUSTED_PROXIES"
) -> tuple[Network, ...]:
    """Addresses and CIDR networks, IPv4 or IPv6, separated by commas and/or spaces. A value
    that is neither stops the process at start-up, named, rather than trusting less (or more)
    than the operator meant; so does a network with host bits set (`10.0.0.1/8`: a typo for
    one address or for the network?)."""
    networks = []
    for entry in re.split(r"[\s,]+", raw.strip()):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"{name}: {entry!r} is not an IP address or CIDR network ({exc})"
            ) from None
    return tuple(networks)


def _address(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # An IPv4 client seen through a dual-stack socket (::ffff:10.0.0.1) is that IPv4 address.
    return getattr(address, "ipv4_mapped", None) or address


def _hop(text: str) -> Address | None:
    """One `X-Forwarded-For` entry as an address (a port, as some proxies add, dropped), or
    None when it is not one. An IPv6 zone (`fe80::1%eth0`) names another host's interface, and
    would carry free text into the logs: not an address here."""
    text = text.strip()
    if "%" in text:
        return None
    if (match := _BRACKETED.fullmatch(text)) or (match := _IPV4_PORT.fullmatch(text)):
        text = match.group(1)
    return _address(text)


def _is_trusted(address: Address, trusted: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in trusted)


@dataclass(frozen=True)
class Resolved:
    client: str  # the client's address (the peer's, as given, unless a trusted proxy said)
    scheme: str  # "http" or "https" (or the connection's own)
    via_proxy: bool  # the peer is a trusted proxy: its forwarded headers counted


def resolve(
    peer: str,
    forwarded_for: str | None,
    forwarded_proto: str | None,
    scheme: str,
    trusted: tuple[Network, ...] | None = None,
) -> Resolved:
    """The client and scheme of a request from `peer` over `scheme` carrying these header
    values (each header's values joined by commas, in order): see the module docstring."""
    if trusted is None:
        trusted = settings.MEMORYHUB_TRUSTED_PROXIES
    peer_address = _address(peer) if trusted and peer else None
    if peer_address is None or not _is_trusted(peer_address, trusted):
        return Resolved(client=peer, scheme=scheme, via_proxy=False)
    client = peer_address
    for text in reversed((forwarded_for or "").rsplit(",", MAX_HOPS)[-MAX_HOPS:]):
        hop = _hop(text)
        if hop is None:  # garbage (or no header at all): the last good address stands
            break
        client = hop
        if not _is_trusted(hop, trusted):
            break
    proto = (forwarded_proto or "").rsplit(",", 1)[-1].strip().lower()
    return Resolved(
        client=str(client),
        scheme=proto if proto in ("http", "https") else scheme,
        via_proxy=True,
    )


def resolve_scope(scope: dict) -> None:
    """Apply the rule to an ASGI HTTP scope, in place: `client` and `scheme` become the
    resolved ones, and an untrusted peer's forwarded headers are dropped. A header whose name
    spells one of them with underscores (`x_forwarded_for`) is dropped whoever sent it: a WSGI
    environ cannot tell it from the real one, and no proxy writes it."""
    if scope.get(RESOLVED_KEY):
        return
    forwarded_for: list[str] = []
    forwarded_proto: list[str] = []
    kept = []
    for name, value in scope.get("headers", ()):
        if b"_" in name and name.replace(b"_", b"-") in _HEADER_NAMES:
            continue
        if name == b"x-forwarded-for":
            forwarded_for.append(value.decode("latin-1"))
        elif name == b"x-forwarded-proto":
            forwarded_proto.append(value.decode("latin-1"))
        kept.append((name, value))
    client = scope.get("client")
    peer = client[0] if client else ""
    resolved = resolve(
        peer, ",".join(forwarded_for), ",".join(forwarded_proto), scope.get("scheme", "http")
    )
    if resolved.via_proxy:
        if resolved.client != peer:
            scope["client"] = (resolved.client, 0)  # the client's port is not known
        scope["scheme"] = resolved.scheme
    else:
        kept = [(name, value) for name, value in kept if name not in _HEADER_NAMES]
    scope["headers"] = kept
    scope[RESOLVED_KEY] = True


def _resolved_already(meta: dict) -> bool:
    scope = meta.get("asgi.scope")
    return bool(meta.get(RESOLVED_KEY) or (scope is not None and scope.get(RESOLVED_KEY)))


def _resolve_meta(meta: dict) -> Resolved:
    return resolve(
        meta.get("REMOTE_ADDR", ""),
        meta.get("HTTP_X_FORWARDED_FOR"),
        meta.get("HTTP_X_FORWARDED_PROTO"),
        meta.get("wsgi.url_scheme", "http"),
    )


def resolve_request(request: HttpRequest) -> None:
    """Apply the rule to a Django request, in place (its WSGI environ): `REMOTE_ADDR` becomes
    the client's address, `wsgi.url_scheme` its scheme (what `request.is_secure()` reads), and
    an untrusted peer's forwarded headers are removed."""
    meta = request.META
    if _resolved_already(meta):
        return
    resolved = _resolve_meta(meta)
    meta["REMOTE_ADDR"] = resolved.client
    meta["wsgi.url_scheme"] = resolved.scheme
    if not resolved.via_proxy:
        for name in _META_NAMES:
            meta.pop(name, None)
    meta[RESOLVED_KEY] = True


def client_address(request: HttpRequest) -> str | None:
    """The client's address (django-axes' `AXES_CLIENT_IP_CALLABLE`): `REMOTE_ADDR` once the
    rule has been applied to the request, else the rule's answer for it; None without one."""
    if _resolved_already(request.META):
        return request.META.get("REMOTE_ADDR") or None
    return _resolve_meta(request.META).client or None


class TrustedProxyMiddleware:
    """Early in MIDDLEWARE, before anything reads the client's address or scheme
    (SecurityMiddleware's HTTPS redirect, sessions, CSRF, django-axes): `resolve_request`."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        resolve_request(request)
        return self.get_response(request)
