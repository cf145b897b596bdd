"""How the secret scan judges a value that is a secret only by where it stands: assigned to a
secret-looking name (`api_key = …`, `{"password": …}`) or sent as a bearer token.

Such a value is a credential when it looks random: long enough, of high entropy, and neither
a placeholder (`<API_KEY>`, `YOUR_TOKEN`, `xxxx`, `changeme`, `${TOKEN}`, `{{ secrets.X }}`)
nor words (`settings.DB_PASSWORD`, `hunter2`, `pending-approval-2024`) nor a URL.

Two more shapes name where a credential lives instead of holding it (`names_a_file`,
`is_code`), so chat about code keeps working:

- a file name or path: a known file extension (`….json`, `….pem`), a root (`/`, `~/`, `./`,
  `..\\`, `C:\\`, `\\\\server`), a relative path under a directory word (`keys/…`), or a secret
  store's reference (`vault:secret/data/db#password`, `arn:aws:secretsmanager:…`);
- code: a call or subscript (`getToken(`, `os.environ[`), attribute access
  (`credential.ApiKey`), or an identifier concatenated, dereferenced or aliased
  (`"KEY="+apiKeyValue`, `*db_password`).

Either holds only if every piece between the separators reads as a name: words
(`AppData`, `ToBase64String`), one case (`9d9af53bf1a0`, `ABC123DEFG`) or short. A random key
interleaves cases and digits throughout, so `Zk9s8dLq0Xw3Pm1Ty7R.json` or `/aB3dE6…` stays a
secret, and base64's `+` and `=` never occur in a path here.

Every regex is linear: possessive bodies, no nested quantifier that can backtrack.
"""

from __future__ import annotations

import math
import re
from collections import Counter

# Markers of documentation placeholders, in the casings people write them. Exact casings
# (not case-folded) keep the odds that a real random key contains one negligible.
_PLACEHOLDER_WORDS = (
    "xxxx",
    "your",
    "example",
    "placeholder",
    "redacted",
    "dummy",
    "sample",
    "changeme",
    "change_me",
    "change-me",
    "insert",
    "replace",
    "fake",
)
PLACEHOLDER_RE = re.compile(
    "|".join(
        re.escape(variant)
        for word in _PLACEHOLDER_WORDS
        for variant in (word, word.upper(), word.title())
    )
    + r"|\*\*\*|\.\.\.|<|>|\$\{|\{\{|%\("
)

# A "wordy" value is made of words, numbers and separators: identifiers (`settings.DB_PASS`,
# `os.getenv`), paths, dates, slugs (`pending-approval-2024`, `gpt-4o-mini`), emails, and
# `hunter2`-style word-plus-digits. Random keys are not: they interleave letters and digits, or
# mix case at random.
_WORD = r"(?:(?:[A-Z]?[a-z]+(?:[A-Z][a-z]+)*|[A-Z]+[a-z]*)[0-9]*|[0-9]+[a-z]?)"
_SEP = r"[-_./:@\\ ~]"
WORDY_RE = re.compile(rf"{_SEP}*{_WORD}(?:{_SEP}+{_WORD})*{_SEP}*")
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S*")


def shannon_entropy(text: str) -> float:
    """Bits per character of `text` (0 for an empty string)."""
    length = len(text)
    if not length:
        return 0.0
    return -sum(n / length * math.log2(n / length) for n in Counter(text).values())


def is_placeholder(text: str) -> bool:
    return bool(PLACEHOLDER_RE.search(text)) or len(set(text)) <= 2


def looks_random(value: str, *, min_len: int = 10, min_entropy: float = 3.0) -> bool:
    """A generic secret value: long enough, high entropy, and not words or a placeholder."""
    value = value.rstrip(".,;:)]}\\")
    return (
        len(value) >= min_len
        and value[0] not in "$%{[<(>"
        and not is_placeholder(value)
        and not WORDY_RE.fullmatch(value)
        and not _URL_RE.fullmatch(value)
        and shannon_entropy(value) >= min_entropy
    )


# --- names: does a piece between separators read as a name? ------------------------------
# A piece split into words (`To`, `Base`, `64`, `String`): a name has few one-letter words, at
# most one run of digits, and words of three letters on average; a random key (`aB3dE6`) does
# not. Each alternative starts on a different character class, so `findall` never backtracks
# more than one uppercase run.
_NAME_PART_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def _reads_as_identifier(piece: str) -> bool:
    parts = _NAME_PART_RE.findall(piece)
    words = [part for part in parts if not part.isdigit()]
    return (
        bool(words)
        and len(parts) - len(words) <= 1
        and sum(len(word) == 1 for word in words) <= 1
        and sum(map(len, words)) >= 3 * len(words)
    )


def _identifier_piece(piece: str) -> bool:
    """`ApiKey`, `b64decode`, `ToBase64String`, `DB`, `v1`; not `aB3dE6gH9`, `a8f3k2m9x7`."""
    return len(piece) <= 3 or bool(WORDY_RE.fullmatch(piece)) or _reads_as_identifier(piece)


def _file_piece(piece: str) -> bool:
    """Words, or one case: a hash or project number (`9d9af53bf1a0`, `379922`), an id
    (`ABC123DEFG`). Not `Zk9s8dLq0Xw3`."""
    return piece.islower() or piece.isupper() or piece.isdigit() or bool(WORDY_RE.fullmatch(piece))


# --- file names and paths -----------------------------------------------------------------
# Extensions of the files that credentials, configuration and code live in. A dotted tail
# that is not one of these (`abc.def`) proves nothing.
_FILE_EXTENSIONS = frozenset(
    """
    json jsonl json5 pem key crt cer cert der csr crl p12 pfx p8 p7b jks keystore pub ppk asc
    gpg pgp sig age jwk jwks kdbx enc ovpn txt text md rst yaml yml toml ini cfg conf config
    env properties xml plist csv tsv log lock db sqlite sqlite3 sql bak py js mjs cjs ts tsx
    jsx go rs rb php java kt kts cs swift c h cc cpp hpp sh bash zsh ps1 psm1 bat cmd tf tfvars
    tfstate hcl html htm css zip tar gz tgz bz2 xz 7z bin dat pkl pickle ipynb pdf png jpg jpeg
    gif svg webp
    """.split()  # noqa: SIM905 - 110 words read better unquoted
)
# A path's root: drive, home, current or parent directory, or the separator itself.
_PATH_ROOT_RE = re.compile(r"(?:[A-Za-z]:|~[A-Za-z0-9_.\-]*+|\.\.?)?[\\/]++")
_PATH_SPLIT_RE = re.compile(r"[\\/]+")
# The first directory of a relative path: a lower-case or capitalised word (`keys`, `.ssh`,
# `node_modules`, `Users`), so that base64's `/` does not make a key a path.
_DIRECTORY_RE = re.compile(r"\.?[A-Z]?[a-z][a-z0-9_\-]{2,}+")
# A secret store's reference: `vault:secret/data/prod/db#password`, `arn:aws:secretsmanager:…`.
_REFERENCE_RE = re.compile(
    r"(?:arn|vault|ssm|secretsmanager|awssm|gcpsm|azkv|keyvault|sops|op|ref\+[a-z]+):"
)
_REFERENCE_SPLIT_RE = re.compile(r"[\\/:#]+")
_SEGMENT_RE = re.compile(r"[A-Za-z0-9._@~\-]++")
_PIECE_SPLIT_RE = re.compile(r"[._@~\-]+")


def _is_extension(extension: str) -> bool:
    # `.json` or `.JSON`, not `.jSoN`.
    return extension.lower() in _FILE_EXTENSIONS and (extension.islower() or extension.isupper())


def _made_of_names(segments: list[str], *, short: int = 0) -> bool:
    """Every segment is made of file-name characters, each piece between `.-_@~` a name (or
    at most `short` characters)."""
    return all(
        _SEGMENT_RE.fullmatch(segment)
        and all(
            len(piece) <= short or _file_piece(piece)
            for piece in _PIECE_SPLIT_RE.split(segment)
            if piece
        )
        for segment in segments
        if segment
    )


def names_a_file(value: str) -> bool:
    """`value` is a file name, a path, or a secret store's reference, made of names."""
    reference = _REFERENCE_RE.match(value)
    if reference is not None:
        # up to 6 characters: the random suffix of a generated name (a secret ARN's `-a1B2c3`)
        return _made_of_names(_REFERENCE_SPLIT_RE.split(value[reference.end() :]), short=6)
    root = _PATH_ROOT_RE.match(value)
    rest = value[root.end() :] if root is not None else value
    segments = [s for s in _PATH_SPLIT_RE.split(rest) if s and s not in (".", "..")]
    if not segments:
        return False
    stem, dot, extension = segments[-1].rpartition(".")
    named_file = bool(dot) and _is_extension(extension)
    if named_file:
        segments[-1] = stem
    relative = len(segments) >= 2 and bool(_DIRECTORY_RE.fullmatch(segments[0]))
    return (root is not None or named_file or relative) and _made_of_names(segments, short=3)


# --- code ---------------------------------------------------------------------------------
# An identifier chain (`credential.ApiKey`, `std::env::var`, `$request->input`, `a?.b`), perhaps
# concatenated, dereferenced or aliased (`+`, `*`, `&`), then a call or subscript, or the end.
_IDENT = r"[A-Za-z_$][A-Za-z0-9_$]*+"
_CODE_RE = re.compile(
    rf"(?P<prefix>[+*&]*+)(?P<chain>{_IDENT}(?:(?:\.|::|->|\?\.){_IDENT})*+)"
    r"(?P<end>[(\[]|\+?\Z)"
)
_MEMBER_SPLIT_RE = re.compile(r"\.|::|->|\?\.")
_IDENT_SPLIT_RE = re.compile(r"[_$]+")


def is_code(value: str) -> bool:
    """`value` (with the character after it when that opens a call or subscript) is a code
    expression made of names:

    - a call or subscript (`getToken(`, `base64.b64decode(`, `os.environ[`);
    - attribute access from a named object (`credential.ApiKey`, `self.s3Client.token`);
    - an identifier of words concatenated, dereferenced or aliased (`"KEY="+apiKeyValue`,
      `*db_password`, `&cfg`).

    A bare identifier is judged as words are, not here."""
    match = _CODE_RE.match(value)
    if match is None:
        return False
    chain = match["chain"]
    members = _MEMBER_SPLIT_RE.split(chain)
    if match["end"] in ("(", "["):
        pass
    elif len(members) >= 2:
        # An object's name is a word of three letters or more: `u.stthjh8qBj` is a dotted key.
        if len(members[0]) < 3 or not WORDY_RE.fullmatch(members[0]):
            return False
    else:
        operator = match["prefix"] or match["end"] == "+"
        return bool(operator) and bool(WORDY_RE.fullmatch(chain))
    return all(
        _identifier_piece(piece)
        for member in members
        for piece in _IDENT_SPLIT_RE.split(member)
        if piece
    )
