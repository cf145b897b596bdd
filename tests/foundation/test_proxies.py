"""The client's address and scheme behind reverse proxies (`memoryhub.proxies`): only the
proxies in MEMORYHUB_TRUSTED_PROXIES are believed, the right-most untrusted hop of their
X-Forwarded-For is the client, and anyone else's forwarded headers are dropped."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler
from django.db import connections
from django.http import HttpResponse
from django.test import Client, RequestFactory

from memoryhub import asgi, supervisor
from memoryhub.proxies import (
    MAX_HOPS,
    TrustedProxyMiddleware,
    parse_trusted_proxies,
    resolve,
    resolve_scope,
)
from tests.factories import asgi_http_scope, asgi_request
from tests.support.commands import BASE_DIR, command_env

PROXIES = parse_trusted_proxies("10.0.0.0/8, 127.0.0.1 2001:db8:f::/48")


def client_of(peer: str, forwarded_for: str | None, trusted=PROXIES) -> str:
    return resolve(peer, forwarded_for, None, "http", trusted).client


# --- The setting ------------------------------------------------------------------------------


def test_the_setting_takes_addresses_and_networks_separated_by_commas_or_spaces():
    networks = parse_trusted_proxies(" 127.0.0.1,10.0.0.0/8  ::1\n2001:db8::/32 ,")
    assert [str(n) for n in networks] == ["127.0.0.1/32", "10.0.0.0/8", "::1/128", "2001:db8::/32"]
    assert parse_trusted_proxies("") == () and parse_trusted_proxies(" , ") == ()


@pytest.mark.parametrize("bad", ["10.0.0.300", "proxy.internal", "10.0.0.1/8", "::1/129", "*"])
def test_a_bad_entry_is_named_in_the_error(bad):
    with pytest.raises(ImproperlyConfigured, match="MEMORYHUB_TRUSTED_PROXIES") as raised:
        parse_trusted_proxies(f"127.0.0.1, {bad}")
    assert repr(bad) in str(raised.value)


def test_a_bad_entry_stops_the_process_at_start_up():
    environment = command_env() | {"MEMORYHUB_TRUSTED_PROXIES": "10.0.0.0/8,10.0.0.999"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured: MEMORYHUB_TRUSTED_PROXIES: '10.0.0.999'" in done.stderr


def test_unset_it_trusts_no_one(settings):
    assert settings.MEMORYHUB_TRUSTED_PROXIES == ()
    assert resolve("127.0.0.1", "203.0.113.7", "https", "http") == resolve(
        "127.0.0.1", None, None, "http"
    )
    assert client_of("127.0.0.1", "203.0.113.7", trusted=()) == "127.0.0.1"


# --- The rule ---------------------------------------------------------------------------------


def test_an_untrusted_peer_is_the_client_whatever_it_forwards():
    assert client_of("198.51.100.20", "203.0.113.7") == "198.51.100.20"
    resolved = resolve("198.51.100.20", "203.0.113.7", "https", "http", PROXIES)
    assert (resolved.scheme, resolved.via_proxy) == ("http", False)


def test_a_trusted_peer_names_its_client():
    assert client_of("10.1.2.3", "203.0.113.7") == "203.0.113.7"
    assert client_of("2001:db8:f::10", "2001:db8:1::7") == "2001:db8:1::7"
    assert client_of("10.1.2.3", "2001:DB8:1:0::7") == "2001:db8:1::7"  # written canonically


def test_the_right_most_untrusted_hop_is_the_client():
    # What the client wrote itself (left) proves nothing; the proxies' own hops are skipped.
    assert client_of("10.0.0.2", "1.1.1.1, 203.0.113.7, 10.0.0.9, 10.0.0.1") == "203.0.113.7"
    assert client_of("127.0.0.1", "6.6.6.6,198.51.100.1,10.9.9.9") == "198.51.100.1"
    # Two headers are one list, in order.
    assert client_of("10.0.0.2", "6.6.6.6, 203.0.113.7,10.0.0.5") == "203.0.113.7"


def test_when_every_hop_is_trusted_the_left_most_is_the_client():
    assert client_of("10.0.0.2", "10.0.0.7, 10.0.0.8, 127.0.0.1") == "10.0.0.7"
    assert client_of("10.0.0.2", "2001:db8:f::1") == "2001:db8:f::1"


@pytest.mark.parametrize(
    ("forwarded_for", "client"),
    [
        (None, "10.0.0.2"),  # no header: the peer
        ("", "10.0.0.2"),
        ("unknown", "10.0.0.2"),  # garbage at once: the peer
        ("203.0.113.7, not-an-ip", "10.0.0.2"),
        ("203.0.113.7, , 10.0.0.5", "10.0.0.5"),  # stops at the empty hop: the last good one
        ("203.0.113.7, 10.0.0.5, 999.1.1.1, 10.0.0.6", "10.0.0.6"),
        ("203.0.113.7,10.0.0.5\x00", "10.0.0.2"),
        ("203.0.113.7, 010.0.0.5", "10.0.0.2"),  # leading zeros: ambiguous, refused
        ("203.0.113.7:51234", "203.0.113.7"),  # ports, as some proxies write them
        ("[2001:db8:1::7]:443", "2001:db8:1::7"),
        ("[2001:db8:1::7]", "2001:db8:1::7"),
        ("2001:db8:1::7:443", "2001:db8:1::7:443"),  # a valid IPv6 address, taken as one
        ("::ffff:203.0.113.7", "203.0.113.7"),  # an IPv4 client on a dual-stack socket
        ("203.0.113.7, fe80::1%eth0 x", "10.0.0.2"),  # a zone: free text, refused
    ],
)
def test_odd_forwarded_for_values_never_raise(forwarded_for, client):
    assert client_of("10.0.0.2", forwarded_for) == client


def test_an_ipv4_peer_on_a_dual_stack_socket_is_matched_as_ipv4():
    assert client_of("::ffff:10.0.0.2", "203.0.113.7") == "203.0.113.7"
    assert client_of("::ffff:198.51.100.20", "203.0.113.7") == "::ffff:198.51.100.20"


def test_a_peer_that_is_no_address_is_never_trusted():
    assert client_of("", "203.0.113.7") == ""
    assert client_of("unix-socket", "203.0.113.7") == "unix-socket"


def test_a_long_chain_of_trusted_hops_is_walked_only_so_far():
    chain = ", ".join(["203.0.113.7"] + ["10.0.0.1"] * (MAX_HOPS + 5))
    assert client_of("10.0.0.2", chain) == "10.0.0.1"  # the last one looked at
    short = ", ".join(["203.0.113.7"] + ["10.0.0.1"] * (MAX_HOPS - 1))
    assert client_of("10.0.0.2", short) == "203.0.113.7"


@pytest.mark.parametrize(
    ("peer", "proto", "scheme"),
    [
        ("10.0.0.2", "https", "https"),
        ("10.0.0.2", "HTTPS ", "https"),
        ("10.0.0.2", "http, https", "https"),  # the right-most value: the trusted proxy's
        ("10.0.0.2", "https, http", "http"),
        ("10.0.0.2", "http", "http"),
        ("10.0.0.2", "gopher", "http"),  # nonsense: the connection's own
        ("10.0.0.2", None, "http"),
        ("198.51.100.20", "https", "http"),  # not a trusted proxy: ignored
    ],
)
def test_the_scheme_is_https_only_when_a_trusted_proxy_says_so(peer, proto, scheme):
    assert resolve(peer, None, proto, "http", PROXIES).scheme == scheme


def test_a_direct_tls_connection_stays_https():
    assert resolve("198.51.100.20", None, "http", "https", PROXIES).scheme == "https"


# --- The ASGI scope ---------------------------------------------------------------------------

FORWARDED = [
    (b"x-forwarded-for", b"203.0.113.7"),
    (b"x-forwarded-proto", b"https"),
    (b"x-forwarded-host", b"evil.example"),
    (b"x-real-ip", b"203.0.113.8"),
    (b"forwarded", b"for=203.0.113.9;proto=https"),
]


def scope_from(peer: str, headers) -> dict:
    scope = asgi_http_scope("GET", "/", [(b"accept", b"*/*"), *headers])
    scope["client"] = (peer, 50123)
    return scope


def test_an_untrusted_peers_forwarded_headers_are_dropped_from_the_scope(settings):
    settings.MEMORYHUB_TRUSTED_PROXIES = PROXIES
    scope = scope_from("198.51.100.20", FORWARDED)
    resolve_scope(scope)
    assert scope["client"] == ("198.51.100.20", 50123) and scope["scheme"] == "http"
    assert scope["headers"] == [(b"host", b"testserver"), (b"accept", b"*/*")]


def test_a_trusted_peers_client_and_scheme_go_into_the_scope(settings):
    settings.MEMORYHUB_TRUSTED_PROXIES = PROXIES
    scope = scope_from("10.0.0.2", [(b"x-forwarded-for", b"6.6.6.6, 203.0.113.7"), *FORWARDED[1:]])
    resolve_scope(scope)
    assert scope["client"] == ("203.0.113.7", 0) and scope["scheme"] == "https"
    assert (b"x-forwarded-for", b"6.6.6.6, 203.0.113.7") in scope["headers"]
    resolve_scope(scope)  # once only: a second pass would take the client for the peer
    assert scope["client"] == ("203.0.113.7", 0) and scope["scheme"] == "https"


def test_repeated_forwarded_for_headers_are_read_in_order(settings):
    settings.MEMORYHUB_TRUSTED_PROXIES = PROXIES
    headers = [(b"x-forwarded-for", b"203.0.113.7"), (b"x-forwarded-for", b"198.51.100.1")]
    scope = scope_from("10.0.0.2", headers)
    resolve_scope(scope)
    assert scope["client"][0] == "198.51.100.1"


def test_underscore_spellings_are_dropped_even_from_a_trusted_peer(settings):
    # A WSGI environ would merge `x_forwarded_for` into HTTP_X_FORWARDED_FOR.
    settings.MEMORYHUB_TRUSTED_PROXIES = PROXIES
    headers = [(b"x-forwarded-for", b"203.0.113.7"), (b"x_forwarded_for", b"6.6.6.6")]
    scope = scope_from("10.0.0.2", [*headers, (b"x_forwarded_proto", b"https")])
    resolve_scope(scope)
    assert scope["client"][0] == "203.0.113.7" and scope["scheme"] == "http"
    assert [name for name, _ in scope["headers"]] == [b"host", b"accept", b"x-forwarded-for"]


# --- Django requests --------------------------------------------------------------------------


def through_middleware(**meta):
    seen = {}

    def view(request):
        seen.update(
            client=request.META["REMOTE_ADDR"],
            secure=request.is_secure(),
            headers=sorted(k for k in request.META if "FORWARDED" in k or "REAL_IP" in k),
        )
        return HttpResponse()

    TrustedProxyMiddleware(view)(RequestFactory().get("/", **meta))
    return seen


def test_is_secure_believes_only_a_trusted_proxy(settings):
    settings.MEMORYHUB_TRUSTED_PROXIES = PROXIES
    forwarded = {"HTTP_X_FORWARDED_FOR": "203.0.113.7", "HTTP_X_FORWARDED_PROTO": "https"}
    spoofed = through_middleware(REMOTE_ADDR="198.51.100.20", HTTP_X_REAL_IP="1.2.3.4", **forwarded)
    assert spoofed == {"client": "198.51.100.20", "secure": False, "headers": []}
    proxied = through_middleware(REMOTE_ADDR="10.0.0.2", **forwarded)
    assert proxied == {
        "client": "203.0.113.7",
        "secure": True,
        "headers": ["HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO"],
    }
    settings.MEMORYHUB_TRUSTED_PROXIES = ()
    assert through_middleware(REMOTE_ADDR="10.0.0.2", **forwarded)["secure"] is False


def test_production_redirects_a_spoofed_https_and_not_a_trusted_proxys(settings):
    """Behind a TLS-terminating trusted proxy the HTTPS redirect must not loop; straight from
    a client, `X-Forwarded-Proto: https` must not pass for HTTPS."""
    settings.SECURE_SSL_REDIRECT = True
    settings.MEMORYHUB_TRUSTED_PROXIES = PROXIES
    https = {"HTTP_X_FORWARDED_PROTO": "https"}
    proxied = Client(REMOTE_ADDR="10.0.0.2").get("/accounts/login/", **https)
    assert proxied.status_code == 200
    spoofed = Client(REMOTE_ADDR="198.51.100.20").get("/accounts/login/", **https)
    assert spoofed.status_code == 301
    assert spoofed["Location"] == "https://testserver/accounts/login/"


def access_line(caplog) -> str:
    (line,) = [r.getMessage() for r in caplog.records if r.name == "memoryhub.access"]
    return line


def test_the_access_log_names_the_real_peer_or_a_trusted_proxys_client(settings, caplog):
    settings.MEMORYHUB_TRUSTED_PROXIES = PROXIES
    spoof = {"HTTP_X_FORWARDED_FOR": "203.0.113.7"}
    with caplog.at_level(logging.INFO, logger="memoryhub.access"):
        Client(REMOTE_ADDR="198.51.100.20").get("/accounts/login/", **spoof)
    assert access_line(caplog).endswith(" client=198.51.100.20")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="memoryhub.access"):
        Client(REMOTE_ADDR="10.0.0.2").get("/accounts/login/", **spoof)
    assert access_line(caplog).endswith(" client=203.0.113.7")


# --- Served (ASGI) ----------------------------------------------------------------------------


def asgi_get(path: str, peer: str, headers) -> int:
    scope = scope_from(peer, headers)
    scope["path"], scope["raw_path"] = path, path.encode()
    sent = asgi_request(asgi.application, scope)
    return sent[0]["status"]


@pytest.fixture
def served(transactional_db, monkeypatch):
    # The pool thread's connection closes when its request ends (it would outlive the test).
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)


def test_served_the_redirect_and_the_access_log_follow_the_rule(
    served, settings, caplog, monkeypatch
):
    settings.SECURE_SSL_REDIRECT = True
    settings.MEMORYHUB_TRUSTED_PROXIES = PROXIES
    # Django's middleware reads SECURE_SSL_REDIRECT when it is built: a handler built now.
    monkeypatch.setattr(asgi, "django_wsgi", WSGIHandler())
    forwarded = [(b"x-forwarded-for", b"203.0.113.7"), (b"x-forwarded-proto", b"https")]
    with caplog.at_level(logging.INFO, logger="memoryhub.access"):
        assert asgi_get("/accounts/login/", "10.0.0.2", forwarded) == 200
    assert access_line(caplog).endswith(" client=203.0.113.7")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="memoryhub.access"):
        assert asgi_get("/accounts/login/", "198.51.100.20", forwarded) == 301
    assert access_line(caplog).endswith(" client=198.51.100.20")


# --- serve ------------------------------------------------------------------------------------


@pytest.mark.parametrize("trusted", ["", "10.0.0.0/8, ::1"])
def test_serve_turns_uvicorns_proxy_headers_off_whatever_is_trusted(settings, trusted):
    """uvicorn would otherwise believe X-Forwarded-For from 127.0.0.1 and rewrite the client
    before the app applies the rule (memoryhub/proxies.py)."""
    settings.MEMORYHUB_TRUSTED_PROXIES = parse_trusted_proxies(trusted)
    web = supervisor.processes(host="127.0.0.1", port=8000, workers=2, cluster=False)[-1]
    assert "--no-proxy-headers" in web and "--proxy-headers" not in web
    assert not any(arg.startswith("--forwarded-allow-ips") for arg in web)
