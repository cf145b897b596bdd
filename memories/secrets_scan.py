"""Secret detection for everything an agent asks us to store.

`find_secret(value, field)` scans a string, or every string value and dict key of a JSON-like
structure, and returns the first `SecretFinding(rule, field)` or None. A finding carries only
the rule name and the field path: the value is never returned, logged or put into an exception,
so a rejection can say *what* tripped without echoing the secret. This module logs nothing.

Text is NFKC-normalised and stripped of invisible format characters first, so a key split by
zero-width spaces or typed in full-width forms is still caught (remaining non-ASCII characters,
never part of a credential, are folded to one placeholder each). Rules are anchored on token
boundaries and reject placeholder-looking matches (low entropy, `xxxx`, `YOUR_…`, `EXAMPLE`),
so documentation and prose about keys and passwords stay storable; the one exception is a
private-key PEM header (`-----BEGIN … PRIVATE KEY-----`), a secret whatever follows it.

`scan_secrets(values)` is the policy on top: which fields of a write are free text
(`SECRET_SCANNED_FIELDS`), and SECRET_REJECTED for the first finding in any of them.

Order: provider-specific shapes first, then passwords in URLs, then `name = value`
assignments whose name says secret (`password`, `GITHUB_TOKEN`, `apiKey`, …) judged by the
value (`memories.secret_values`: random-looking, and not a file name, a path or code), then
bare `Bearer …` tokens. The first hit wins.

Speed: every regex starts with a literal, so `re` skips ahead with a fast substring search
instead of trying each position, and variable-length bodies are possessive (`{m,n}+`), so a
candidate never backtracks; assignments are found from a handful of keyword `str.find`s.
Prose, CJK or full-width text (which needs NFKC) and every crafted input found are scanned in
milliseconds (docs/performance.md#code-figures).
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from string import ascii_letters, digits
from typing import Any
from urllib.parse import unquote

from memories.secret_values import (
    PLACEHOLDER_RE,
    WORDY_RE,
    is_code,
    is_placeholder,
    looks_random,
    names_a_file,
    shannon_entropy,
)
from memoryhub.errors import SecretRejected


@dataclass(frozen=True)
class SecretFinding:
    rule: str
    field: str


# Every Cf (format) character of Unicode 15.1, plus invisible fillers and variation selectors
# of other categories that render as nothing. Hard-coded because enumerating all code points
# at import costs ~0.2 s; a test checks them against the running `unicodedata`.
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
    (0xE0100, 0xE01EF),
)
_INVISIBLE = "".join(chr(c) for low, high in _INVISIBLE_RANGES for c in range(low, high + 1))
# The same characters for others that must refuse them (keys: look-alikes cannot coexist).
INVISIBLE_CHARS = frozenset(_INVISIBLE)


_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]+")


def _fold_run(run: str) -> str:
    """Invisible characters vanish (joining the halves of a split key), whitespace becomes a
    space, anything else one NUL: no rule matches a non-ASCII character, so which one it was
    does not matter, and ASCII-only text lets `re` scan bytes instead of wide characters."""
    run = run.strip(_INVISIBLE)
    return "" if not run else " " if run.isspace() else "\0"


def _fold_non_ascii(error: UnicodeEncodeError) -> tuple[str, int]:
    """Codec error handler for one run of non-ASCII characters: NFKC (full-width forms become
    ASCII), then `_fold_run`. NFKC per run equals NFKC of the whole text up to combining marks
    after an ASCII letter, which fold to a NUL either way."""
    run = error.object[error.start : error.end]
    if unicodedata.is_normalized("NFKC", run):
        return _fold_run(run), error.end
    run = unicodedata.normalize("NFKC", run)
    return _NON_ASCII_RE.sub(lambda match: _fold_run(match.group()), run), error.end


_FOLD = "memoryhub.secrets_scan.fold"
codecs.register_error(_FOLD, _fold_non_ascii)  # type: ignore[arg-type]  # encoding only

# No rule can match fewer characters than this (`://a:b@c`), so shorter strings are skipped.
_MIN_SCAN_LEN = 8
# A value judged by entropy alone is at most this long; longer ones are documents, not secrets.
_MAX_SECRET_LEN = 512

_ALNUM = frozenset(ascii_letters + digits)

# Passwords in URLs that are obviously not real ones.
_PLACEHOLDER_PASSWORDS = frozenset(
    {"password", "passwd", "pass", "pwd", "pw", "secret", "changeme", "token"}
)


def normalise(text: str) -> str:
    """What the rules read: NFKC, invisible characters dropped, other non-ASCII folded."""
    if text.isascii():  # ASCII is already NFKC and holds no format characters
        return text
    return text.encode("ascii", _FOLD).decode("ascii")


# --- provider-specific rules --------------------------------------------------------------
# Accept functions: given a regex match, is it a real secret rather than a placeholder?


def _token(match: re.Match[str]) -> bool:
    secret = match.group("s") if "s" in match.re.groupindex else match.group()
    return not is_placeholder(secret) and shannon_entropy(secret) >= 3.0


def _token_not_wordy(match: re.Match[str]) -> bool:
    return _token(match) and not WORDY_RE.fullmatch(match.group("s"))


def _bearer_value(match: re.Match[str]) -> bool:
    return looks_random(match.group("s"), min_len=16)


def _url_password(match: re.Match[str]) -> bool:
    password = unquote(match.group("s"))
    return not (
        password.lower() in _PLACEHOLDER_PASSWORDS
        # a template or a string concatenated in code (`"postgres://app:"+pw+"@db"`)
        or password[0] in "$%{[<:\"'`"
        or len(set(password)) == 1
        or PLACEHOLDER_RE.search(password)
    )


_DISCORD_HEAD_RE = re.compile(r"(?<![A-Za-z0-9_\-])[MNO][A-Za-z0-9_\-]{23,27}+$")


def _discord(match: re.Match[str]) -> bool:
    # The match starts at the first dot (a literal to search for); the id part precedes it.
    head = _DISCORD_HEAD_RE.search(match.string, max(0, match.start() - 29), match.start())
    return head is not None and _token(match)


def _putty_private_lines(match: re.Match[str]) -> bool:
    header = match.string.rfind("PuTTY-User-Key-File-", max(0, match.start() - 4000), match.start())
    return header != -1 and _token(match)


@dataclass(frozen=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    accept: Callable[[re.Match[str]], bool] = _token
    # The match must not continue a longer alphanumeric run on its left. Checked in Python, not
    # with a leading look-behind, which would stop `re` from searching for the literal prefix.
    bounded: bool = True


def _rule(name: str, pattern: str, accept=_token, *, bounded: bool = True) -> _Rule:
    return _Rule(name, re.compile(pattern), accept, bounded)


_B64URL = r"[A-Za-z0-9_\-]"
_END = r"(?![A-Za-z0-9])"  # right boundary for alphanumeric bodies
_END_URL = r"(?![A-Za-z0-9_\-])"  # right boundary for base64url bodies
# A private-key PEM header is a secret on its own, whatever follows it: a paste cut
# short, or with its body elided, still says a private key was about to be stored. Five dashes
# (PEM, OpenSSH, PGP armor) or four and a space (SSH2: `---- BEGIN SSH2 ENCRYPTED PRIVATE KEY
# ----`). Public keys, certificates and requests (`BEGIN PUBLIC KEY`, `BEGIN CERTIFICATE`) are not.
_PEM_PRIVATE_HEADER = r"----[- ]BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?[- ]----"


def _always(match: re.Match[str]) -> bool:
    return True


_RULES: tuple[_Rule, ...] = (
    _rule("ssh_private_key", r"-----BEGIN OPENSSH PRIVATE KEY-----", _always, bounded=False),
    # PuTTY key files: searched from their private section, the file header checked behind it.
    _rule(
        "ssh_private_key",
        r"Private-Lines:\s*\d+\s+(?P<s>[A-Za-z0-9+/]{40})",
        _putty_private_lines,
        bounded=False,
    ),
    _rule("private_key", _PEM_PRIVATE_HEADER, _always, bounded=False),
    _rule("aws_access_key_id", r"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}" + _END),
    _rule("github_pat", r"github_pat_[A-Za-z0-9_]{60,255}+" + _END),
    _rule("github_token", r"gh[pousr]_[A-Za-z0-9]{36,251}+" + _END),
    _rule(
        "gitlab_token",
        r"gl(?:pat|dt|rt|ptt|cbt|soat|ft|imt|agent|oas|wt)-[A-Za-z0-9_\-]{20,255}+" + _END_URL,
    ),
    _rule(
        "slack_webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9_/\-]{20,200}+)",
    ),
    _rule("slack_token", r"xox[abeoprs]-[A-Za-z0-9\-]{10,250}+" + _END),
    _rule("slack_token", r"xapp-[0-9]-[A-Za-z0-9\-]{10,250}+" + _END),
    _rule("stripe_key", r"sk_(?:live|test)_[A-Za-z0-9]{20,247}+" + _END),
    _rule("stripe_key", r"rk_(?:live|test)_[A-Za-z0-9]{20,247}+" + _END),
    _rule("stripe_webhook_secret", r"whsec_[A-Za-z0-9+/]{32,100}+" + _END),
    _rule("anthropic_api_key", r"sk-ant-[A-Za-z0-9_\-]{32,400}+" + _END_URL),
    _rule(
        "openai_api_key",
        r"sk-(?!ant-)(?P<s>(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,400}+)" + _END_URL,
        _token_not_wordy,
    ),
    _rule("google_api_key", r"AIza[A-Za-z0-9_\-]{35}" + _END_URL),
    _rule("google_oauth_client_secret", r"GOCSPX-[A-Za-z0-9_\-]{28}" + _END_URL),
    _rule(
        "jwt",
        r"eyJ[A-Za-z0-9_\-]{10,4096}+\.[A-Za-z0-9_\-]{10,8192}+\.[A-Za-z0-9_\-]{0,1024}+"
        + _END_URL,
    ),
    _rule("memoryhub_api_key", r"mh_[A-Za-z0-9]{38}" + _END),
    _rule("npm_token", r"npm_[A-Za-z0-9]{36}" + _END),
    _rule("pypi_token", r"pypi-AgE[A-Za-z0-9_\-]{50,2000}+" + _END_URL),
    _rule("twilio_api_key", r"SK[0-9a-f]{32}" + _END),
    _rule("twilio_api_key", r"AC[0-9a-f]{32}" + _END),
    _rule("sendgrid_api_key", rf"SG\.{_B64URL}{{22}}\.{_B64URL}{{43}}" + _END_URL),
    _rule("mailgun_api_key", r"key-[0-9a-f]{32}" + _END),
    _rule("heroku_api_key", r"HRKU-AA[A-Za-z0-9_\-]{58}" + _END_URL),
    _rule(
        "digitalocean_token",
        r"_v1_(?<![A-Za-z0-9]do[opr]_v1_)(?<=do[opr]_v1_)[a-f0-9]{64}" + _END,
        bounded=False,
    ),
    _rule("huggingface_token", r"hf_[A-Za-z0-9]{34,40}+" + _END),
    _rule(
        "azure_connection_string",
        r"AccountKey=(?P<s>[A-Za-z0-9+/]{40,100}+={0,2})",
        bounded=False,
    ),
    _rule(
        "azure_connection_string",
        r"SharedAccessKey=(?P<s>[A-Za-z0-9+/]{40,100}+={0,2})",
        bounded=False,
    ),
    _rule(
        "discord_bot_token",
        rf"\.{_B64URL}{{6,7}}\.{_B64URL}{{27,40}}+" + _END_URL,
        _discord,
        bounded=False,
    ),
    _rule(
        "discord_webhook",
        r"discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/(?P<s>[A-Za-z0-9_\-]{60,100}+)",
    ),
    # `<8-10 digit bot id>:AA…`: searched from the `:AA` literal, the id checked behind it.
    _rule(
        "telegram_bot_token",
        r":AA(?<=[0-9]{8}:AA)(?<![0-9]{11}:AA)[A-Za-z0-9_\-]{33}" + _END_URL,
        bounded=False,
    ),
    _rule("shopify_token", r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}" + _END),
    _rule("square_token", r"sq0atp-[A-Za-z0-9_\-]{22}" + _END_URL),
    _rule("square_token", r"sq0csp-[A-Za-z0-9_\-]{43}" + _END_URL),
    _rule("square_token", r"EAAA[A-Za-z0-9_\-]{60}" + _END_URL),
    _rule("atlassian_api_token", r"ATATT3[A-Za-z0-9_\-=]{150,300}+" + _END),
    _rule("databricks_token", r"dapi[a-f0-9]{32}(?:-[0-9])?" + _END),
    _rule("groq_api_key", r"gsk_[A-Za-z0-9]{52}" + _END),
    _rule("hashicorp_vault_token", r"hv[sb]\.[A-Za-z0-9_\-]{24,300}+" + _END_URL),
    _rule("linear_api_key", r"lin_api_[A-Za-z0-9]{40}" + _END),
    _rule("postman_api_key", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _END),
    _rule("age_secret_key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}" + _END),
    # `scheme://user:password@host`; the user may be empty (`redis://:pw@host`).
    _rule(
        "url_password",
        r"://[^\s/?#@:]{0,256}+:(?P<s>[^\s/?#@]{1,256}+)@[A-Za-z0-9\[]",
        _url_password,
        bounded=False,
    ),
)

# Bare `Bearer <token>` (an `Authorization:` header is an assignment, found before this).
_BEARER_RULES: tuple[_Rule, ...] = tuple(
    _rule(
        "bearer_token",
        # Searched from a literal; the look-behinds restore the word boundary before it.
        rf"{word[1:]}(?<![A-Za-z0-9]{word})(?<={word})\s+(?P<s>[A-Za-z0-9\-._~+/]{{16,512}}+=*)",
        _bearer_value,
        bounded=False,
    )
    for word in ("Bearer", "bearer", "BEARER")
)


# --- `name = value` assignments -----------------------------------------------------------
# A name says "secret" when, lower-cased and without separators, it ends with one of these
# (`GITHUB_TOKEN`, `accessToken`, `db-password`, `client_secret`, `apiKey`). Plurals and
# longer words do not: `tokens`, `tokenizer`, `password_hint`, `secretary`, and a bare `key`.
_SECRET_NAME_BASES = (
    "secret",
    "token",
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "apikey",
    "accesskey",
    "privatekey",
    "authkey",
    "signingkey",
    "encryptionkey",
    "credential",
    "credentials",
    "authorization",
)
_SECRET_NAME_ENDINGS = _SECRET_NAME_BASES + tuple(
    base + "key" for base in _SECRET_NAME_BASES if not base.endswith("key")
)
# Every secret name contains one of these; each is found with a fast `str.find`.
_NAME_STEMS = ("secret", "token", "passw", "pwd", "key", "credential", "authorization")
_NAME_CHARS = frozenset(ascii_letters + digits + "_.-")
_NAME_END_RE = re.compile(r"[A-Za-z0-9_.\-]*+")
_ASSIGNED_VALUE_RE = re.compile(
    r"""\\?["']?\s{0,3}(?:=>|:=|=|:)\s{0,3}\\?["']?"""
    r"""(?:(?:Bearer|bearer|Token|token|Basic|basic)\s+)?(?P<s>[^\s"'`,;()\[\]{}]{1,256}+)"""
)
_AWS_SECRET_RE = re.compile(r"[A-Za-z0-9/+]{40}")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def _compact_name(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(".", "")


def _is_secret_name(name: str) -> bool:
    return _compact_name(name).endswith(_SECRET_NAME_ENDINGS)


def _classify_assignment(name: str, value: str, after: str = "") -> str | None:
    """The rule for `name = value` when `name` is a secret name, or None if `value` is not one.
    `after` is the character after `value` when it opens a call or subscript (`getToken(`)."""
    if len(value) > _MAX_SECRET_LEN:  # a long document under a secret-named key
        return None
    compact = _compact_name(name)
    value = value.rstrip(".,;:)]}\\")
    if ("aws" in compact or "secretaccesskey" in compact) and _AWS_SECRET_RE.fullmatch(value):
        real = not is_placeholder(value) and shannon_entropy(value) >= 3.0
        return "aws_secret_access_key" if real and not names_a_file(value) else None
    if "heroku" in compact and _UUID_RE.fullmatch(value):
        return "heroku_api_key"
    if not looks_random(value):
        return None
    # Where a credential lives is not one: a file, a path, a store's reference, code
    # (docs/api.md#what-the-secret-scan-refuses).
    return None if names_a_file(value) or is_code(value + after) else "generic_secret"


def _scan_assignments(text: str) -> str | None:
    low = text.lower()  # same length: `text` is ASCII once normalised
    for stem in _NAME_STEMS:
        at = low.find(stem)
        while at != -1:
            start = at
            while start and low[start - 1] in _NAME_CHARS and at - start < 64:
                start -= 1
            end = resume = _NAME_END_RE.match(text, at).end()  # type: ignore[union-attr]  # `*+`
            name = text[start:end]
            if _is_secret_name(name):
                assigned = _ASSIGNED_VALUE_RE.match(text, end)
                if assigned is not None:
                    after = text[assigned.end() : assigned.end() + 1]
                    after = after if after in ("(", "[") else ""
                    rule = _classify_assignment(name, assigned.group("s"), after)
                    if rule is not None:
                        return rule
                    resume = assigned.end()  # a value is not also a name: keeps this linear
            at = low.find(stem, resume)
    return None


RULE_NAMES: frozenset[str] = frozenset(
    {rule.name for rule in _RULES + _BEARER_RULES}
    | {"aws_secret_access_key", "heroku_api_key", "generic_secret"}
)


def _scan_rules(text: str, rules: tuple[_Rule, ...]) -> str | None:
    for rule in rules:
        search = rule.pattern.search
        match = search(text)
        while match is not None:
            start = match.start()
            if not (rule.bounded and start and text[start - 1] in _ALNUM) and rule.accept(match):
                return rule.name
            match = search(text, start + 1)
    return None


def _scan_text(text: str) -> str | None:
    """The name of the first rule that finds a secret in (normalised) `text`, or None."""
    if len(text) < _MIN_SCAN_LEN:
        return None
    return _scan_rules(text, _RULES) or _scan_assignments(text) or _scan_rules(text, _BEARER_RULES)


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def find_secret(value: object, field: str) -> SecretFinding | None:
    """The first secret in `value` (a string, or a dict/list scanned recursively), or None.

    `field` names `value` in the finding; nested values extend it (`data.credentials.token`,
    `tags[2]`). A secret found in a dict key is reported at the dict's own path, so the path
    never contains the secret. A string under a secret-named key (`{"password": "…"}`) is
    judged like an assignment. Non-string scalars are ignored.
    """
    # Depth-first in document order, iteratively so deeply nested JSON cannot exhaust the stack.
    stack: list[tuple[str, object, str | None]] = [(field, value, None)]
    while stack:
        path, item, secret_name = stack.pop()
        if isinstance(item, str):
            text = normalise(item)
            rule = _scan_text(text)
            if rule is None and secret_name is not None:
                rule = _classify_assignment(secret_name, text)
            if rule is not None:
                return SecretFinding(rule=rule, field=path)
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                name = None
                if isinstance(key, str):
                    clean_key = normalise(key)
                    rule = _scan_text(clean_key)
                    if rule is not None:
                        return SecretFinding(rule=rule, field=path)
                    name = clean_key if _is_secret_name(clean_key) else None
                children.append((_join(path, key), child, name))
            stack.extend(reversed(children))
        elif isinstance(item, (list, tuple)):
            stack.extend(
                (f"{path}[{index}]", child, None)
                for index, child in reversed(list(enumerate(item)))
            )
    return None


# The scanned fields: every free-text field an agent or operator writes, under the name its input
# gives it: store and PATCH bodies (`session_id` is `thread_id`'s alias), forget and tombstone
# reasons, the ids in confirm and thread-end URLs, the `Idempotency-Key` header, the console's
# tag and name fields, a JSONL line's provenance strings, and a kind's description and schema. Numbers, timestamps and fixed
# choices are left out: they cannot hold a credential. Every writer goes through
# `scan_secrets` (store, PATCH and corrections inside `inputs.parse_store`/`parse_update`).
SECRET_SCANNED_FIELDS = frozenset(
    {
        "text",
        "data",
        "tags",
        "tag",
        "key",
        "kind",
        "category",
        "mentions",
        "source_provider",
        "subject_id",
        "thread_id",
        "session_id",
        "reason",
        "name",
        "Idempotency-Key",
        "agent",
        "tombstone_reason",
        "tombstoned_by",
        "created_by",
        "embedding_model",
        "description",  # a webhook's (memories.webhooks.endpoints), a kind's
        "schema",
    }
)


def scan_secrets(values: Mapping[str, Any]) -> None:
    """SECRET_REJECTED (naming the rule and the field path, never the value) at the first
    secret in a free-text field of `values` (`SECRET_SCANNED_FIELDS`; strings, and lists and
    objects recursively). Pass what the client sent, before normalisation: lower-casing a tag
    would hide an `AKIA…` key. Runs before any other check that could quote the input."""
    for name, value in values.items():
        if name in SECRET_SCANNED_FIELDS:
            finding = find_secret(value, name)
            if finding is not None:
                raise SecretRejected(details={"rule": finding.rule, "field": finding.field})


def secret_rule(text: str) -> str | None:
    """The rule that finds a secret in `text` (normalised first), or None."""
    return _scan_text(normalise(text))
