"""Secret redaction for conversation messages: a transcript is not rejected for a
pasted token; each secret span is replaced by `[redacted:<rule>]` before anything is stored,
logged or sent to a model. Detection is `memories.secrets_scan` (the same rules that reject
secrets everywhere else)."""

from __future__ import annotations

import functools
import logging
import re

from memories.secrets_scan import secret_rule

# PEM (five dashes) and SSH2 (four dashes, spaced) private-key armour.
_PEM_BEGIN_RE = re.compile(r"-{4,5} ?BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}")
_PEM_END_RE = re.compile(r"-{4,5} ?END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)? ?-{4,5}")
# Without a footer, the block runs on over the lines that look like key material: base64,
# `Name: value` armour headers, blank lines; the first other line (prose) ends it.
_KEY_LINE_RE = re.compile(r"[ \t]*(?:[A-Za-z0-9+/=]+|[A-Za-z][A-Za-z0-9-]*:[^\n]*)?[ \t]*\r?")
# PuTTY key files: from the header line through the `Private-MAC` line, else through the N
# lines that `Private-Lines: N` announces.
_PUTTY_BEGIN_RE = re.compile(r"PuTTY-User-Key-File-\d+:")
_PUTTY_MAC_RE = re.compile(r"Private-MAC:[^\n]*")
_PUTTY_LINES_RE = re.compile(r"Private-Lines:[ \t]*(\d{1,4})[^\n]*")


def _pem_end(text: str, at: int) -> int:
    end = _PEM_END_RE.search(text, at)
    if end:
        return end.end()
    # the rest of the header's line goes too (a body may follow it there, e.g. `\\n`-escaped)
    stop = text.find("\n", at)
    while stop != -1:
        following = text.find("\n", stop + 1)
        line_end = len(text) if following == -1 else following
        if not _KEY_LINE_RE.fullmatch(text, stop + 1, line_end):
            break
        stop = following
    return len(text) if stop == -1 else stop


def _putty_end(text: str, at: int) -> int:
    mac = _PUTTY_MAC_RE.search(text, at)
    if mac:
        return mac.end()
    lines = _PUTTY_LINES_RE.search(text, at)
    if not lines:
        return len(text)
    end = lines.end()
    for _ in range(int(lines.group(1))):
        newline = text.find("\n", end + 1)
        end = len(text) if newline == -1 else newline
    return end


_TOKEN_RE = re.compile(r"\S+")
_MAX_WINDOW = 6  # tokens: the longest secret phrase (`Authorization: Bearer …`, `a = b`)


def _redacted(rule: str) -> str:
    return f"[redacted:{rule}]"


def _redact_blocks(text: str, rules: list[str]) -> str:
    """A private-key block goes whole, header to footer (or to the end of the text)."""
    for begin_re, block_end, rule in (
        (_PEM_BEGIN_RE, _pem_end, "private_key"),
        (_PUTTY_BEGIN_RE, _putty_end, "ssh_private_key"),
    ):
        out, at = [], 0
        for begin in begin_re.finditer(text):
            if begin.start() < at:
                continue
            out += [text[at : begin.start()], _redacted(rule)]
            rules.append(rule)
            at = block_end(text, begin.end())
        out.append(text[at:])
        text = "".join(out)
    return text


def _secret_in(text: str, tokens: list[re.Match[str]], first: int, last: int) -> str | None:
    return secret_rule(text[tokens[first].start() : tokens[last].end()])


def _redact_tokens(text: str, rules: list[str]) -> str:
    """Every whitespace-delimited token that holds a secret is replaced; then a secret that
    needs several tokens (`password = …`, `Bearer …`) replaces the shortest run that holds it."""
    for width in range(1, _MAX_WINDOW + 1):
        tokens = list(_TOKEN_RE.finditer(text))
        spans: list[tuple[int, int, str]] = []
        index = 0
        while index + width <= len(tokens):
            last = index + width - 1
            rule = _secret_in(text, tokens, index, last)
            if rule is None:
                index += 1
                continue
            first = index  # shrink from the left: `my password = x` redacts `password = x`
            while first < last and _secret_in(text, tokens, first + 1, last) is not None:
                first += 1
            spans.append((tokens[first].start(), tokens[last].end(), rule))
            index = last + 1
        out, at = [], 0
        for start, end, rule in spans:
            out += [text[at:start], _redacted(rule)]
            rules.append(rule)
            at = end
        out.append(text[at:])
        text = "".join(out)
        if secret_rule(text) is None:
            break
    return text


def redact(text: str) -> tuple[str, list[str]]:
    """`text` with every secret span replaced by `[redacted:<rule>]`, and the rules that fired.

    Spans are found on whitespace-delimited tokens (a private-key block goes whole); the
    result is scanned again, and if anything secret-shaped still remains (a secret spread
    over many tokens or lines) the whole text is replaced: nothing secret ever survives.
    """
    if secret_rule(text) is None:
        return text, []
    rules: list[str] = []
    redacted = _redact_tokens(_redact_blocks(text, rules), rules)
    leftover = secret_rule(redacted)
    if leftover is not None:
        rules.append(leftover)
        redacted = _redacted(leftover)
    return redacted, list(dict.fromkeys(rules))


@functools.lru_cache(maxsize=4096)
def _holds_secret(word: str) -> bool:
    return secret_rule(word) is not None


class RedactSecrets(logging.Filter):
    """A log handler's filter (`LOGGING` in settings): a record whose message, traceback or
    stack holds anything secret-shaped (a model server's error body quoting a key, an
    exception quoting a model's answer or a client's input) is logged with those spans
    redacted, as message content is. The record is changed in place, so the handlers after
    this one see it redacted too.

    A record may say which of its arguments are free text (`extra={"free_text": (...)}`: the
    access log's route, tenant and agent; the rest of its line is a method from a fixed set and
    numbers): then only those are scanned, each once per process (they repeat on every
    request), and the whole line is redacted as usual if one of them holds a secret."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        words = getattr(record, "free_text", None)
        if words is None or any(_holds_secret(word) for word in words):
            message, rules = redact(record.getMessage())
            if rules:
                record.msg, record.args = message, ()
        if record.exc_info and not record.exc_text:
            # What a formatter would print; kept on the record, it is printed instead.
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)[0]
        if record.stack_info:
            record.stack_info = redact(record.stack_info)[0]
        return True
