"""The secret scanner against a true-positive corpus, its near misses and the non-secrets of
programming conversations (no database)."""

from __future__ import annotations

import logging
import random
import re
import string
import sys
import time
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memories.secrets_scan import RULE_NAMES, SecretFinding, find_secret, normalise
from tests.support.nonsecret_corpus import NON_SECRET_OBJECTS, NON_SECRETS, REPORTED
from tests.support.secret_corpus import (
    FALSE_POSITIVE_OBJECTS,
    FALSE_POSITIVES,
    TRUE_POSITIVES,
    full_width,
    zero_width_split,
)

TP_IDS = [f"{rule}-{index}" for index, (rule, _, _) in enumerate(TRUE_POSITIVES)]
NEEDS_CONTEXT = {
    "aws_secret_access_key",
    "azure_connection_string",
    "bearer_token",
    "generic_secret",
    "url_password",
}
UUID_RE = re.compile(r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")
# The near misses of the recall corpus, then the non-secrets of programming conversations.
NEGATIVES = FALSE_POSITIVES + NON_SECRETS
FP_IDS = [f"fp-{index}" for index in range(len(FALSE_POSITIVES))] + [
    f"ns-{index}" for index in range(len(NON_SECRETS))
]


def test_every_rule_has_a_true_positive_example():
    assert {rule for rule, _, _ in TRUE_POSITIVES} == RULE_NAMES
    assert len(RULE_NAMES) >= 30


@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_true_positive_is_found_with_its_rule(rule, text, secret):
    assert find_secret(text, "text") == SecretFinding(rule=rule, field="text")
    # The credential alone, without its surrounding text, is found too, unless it is only a
    # secret by context: the value of a secret-named assignment, or a password in a URL.
    if rule not in NEEDS_CONTEXT and not UUID_RE.fullmatch(secret):
        assert find_secret(secret, "text") == SecretFinding(rule=rule, field="text")


@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_true_positive_split_by_zero_width_characters_is_found(rule, text, secret):
    split = zero_width_split(text, secret)
    assert split != text
    assert find_secret(split, "text") == SecretFinding(rule=rule, field="text")


@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_true_positive_in_full_width_forms_is_found(rule, text, secret):
    wide = full_width(text)
    assert secret not in wide
    assert find_secret(wide, "text") == SecretFinding(rule=rule, field="text")


@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_true_positive_nested_in_data_and_tags_reports_the_field_path(rule, text, secret):
    data = {
        "name": "deploy notes",
        "count": 3,
        "credentials": {"user": "deploy", "token": text, "expires": None},
    }
    assert find_secret(data, "data") == SecretFinding(rule=rule, field="data.credentials.token")

    tags = ["infra", "prod", zero_width_split(text, secret)]
    assert find_secret(tags, "tags") == SecretFinding(rule=rule, field="tags[2]")

    deep = {"items": [{"notes": ["fine", {"body": full_width(text)}]}]}
    assert find_secret(deep, "data") == SecretFinding(
        rule=rule, field="data.items[0].notes[1].body"
    )


@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_finding_never_contains_the_value(rule, text, secret, caplog):
    with caplog.at_level(logging.DEBUG):
        finding = find_secret({"credentials": {"token": text}}, "data")
    assert finding is not None
    for rendered in (repr(finding), str(finding), finding.rule, finding.field):
        assert secret not in rendered
        assert secret[:12] not in rendered
    assert caplog.records == []


def test_secret_in_a_dict_key_is_reported_at_the_parent_path():
    _, _, secret = next(tp for tp in TRUE_POSITIVES if tp[0] == "github_token")
    finding = find_secret({"notes": {secret: "value"}}, "data")
    assert finding == SecretFinding(rule="github_token", field="data.notes")
    assert secret not in repr(finding)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"password": "Zq8#vR2!mK9@xL4$"}, "data.password"),
        ({"db": {"DB_PASSWORD": "u7Rk2PqX9mWz4Lt"}}, "data.db.DB_PASSWORD"),
        ({"apiKey": "3f9a1c7e5b2d8f4a6c0e9b1d7f3a5c8e"}, "data.apiKey"),
        ({"client_secret": "Xk3-pQ9_vL2-mR7_tZ5"}, "data.client_secret"),
    ],
)
def test_random_value_under_a_secret_named_key_is_a_generic_secret(value, field):
    assert find_secret(value, "data") == SecretFinding(rule="generic_secret", field=field)


def test_secret_named_key_keeps_the_specific_rule_of_its_value():
    _, _, secret = next(tp for tp in TRUE_POSITIVES if tp[0] == "heroku_api_key" and "-" in tp[2])
    assert find_secret({"heroku_api_key": secret}, "data") == SecretFinding(
        rule="heroku_api_key", field="data.heroku_api_key"
    )


@pytest.mark.parametrize("text", NEGATIVES, ids=FP_IDS)
def test_false_positive_passes(text):
    assert find_secret(text, "text") is None


@pytest.mark.parametrize("text", NEGATIVES, ids=FP_IDS)
def test_false_positive_passes_in_full_width_and_nested(text):
    assert find_secret(full_width(text), "text") is None
    assert find_secret({"notes": [text, {"body": text}]}, "data") is None


@pytest.mark.parametrize("value", FALSE_POSITIVE_OBJECTS + NON_SECRET_OBJECTS)
def test_false_positive_object_passes(value):
    assert find_secret(value, "data") is None


def test_a_long_ordinary_text_passes():
    text = " ".join(FALSE_POSITIVES) * 4
    assert len(text) > 16_000
    assert find_secret(text, "text") is None


@pytest.mark.parametrize("value", [None, 12345678901234567890, 3.14, True, b"ghp_bytes"])
def test_non_string_scalars_are_ignored(value):
    assert find_secret(value, "data") is None
    assert find_secret({"token": value, "list": [value]}, "data") is None


def test_top_level_path_without_a_field_name():
    _, text, _ = next(tp for tp in TRUE_POSITIVES if tp[0] == "npm_token")
    assert find_secret({"a": [text]}, "") == SecretFinding(rule="npm_token", field="a[0]")


def test_deeply_nested_data_does_not_exhaust_the_stack():
    _, text, _ = next(tp for tp in TRUE_POSITIVES if tp[0] == "stripe_key")
    value: object = text
    for _ in range(5_000):
        value = {"x": [value]}
    finding = find_secret(value, "data")
    assert finding is not None and finding.rule == "stripe_key"
    assert finding.field == "data" + ".x[0]" * 5_000


@pytest.mark.parametrize(
    "char",
    ["\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2060", "\u2061", "\u2062"]  # noqa: RUF005  two rows
    + ["\u2063", "\u2064", "\ufeff", "\u00ad", "\u180e", "\u202e", "\u2066", "\U000e0041"],
)
def test_normalise_strips_invisible_characters(char):
    assert normalise(f"sk{char}-ant{char}{char}-x") == "sk-ant-x"


def test_normalise_covers_every_format_character_of_this_python():
    format_chars = [
        chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "Cf"
    ]
    text = "a" + "".join(format_chars) + "b"
    assert normalise(text) == "ab"


def test_normalise_folds_compatibility_forms():
    assert normalise("ｇｈｐ＿ＡＢＣ　ｘ") == "ghp_ABC x"  # noqa: RUF001  full-width on purpose
    assert normalise("plain ascii stays") == "plain ascii stays"


def test_normalise_folds_other_non_ascii_to_one_placeholder_per_run():
    # No rule matches non-ASCII characters, so the rules read ASCII only.
    assert normalise("Straße\u2028und\u00a0Tür") == "Stra\0e und T\0r"
    assert normalise("东京\u200b塔 ok") == "\0 ok"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_any_json_value_scans_without_error(value):
    finding = find_secret(value, "data")
    assert finding is None or (finding.rule in RULE_NAMES and finding.field.startswith("data"))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(TRUE_POSITIVES), st.text(max_size=40), st.text(max_size=40))
def test_true_positive_is_found_whatever_surrounds_it(example, before, after):
    _, text, _ = example
    finding = find_secret(f"{before} {text} {after}", "text")
    assert finding is not None and finding.rule in RULE_NAMES


# --- non-secrets from programming conversations ---------------------------------------------


@pytest.mark.parametrize("text", REPORTED, ids=["file-name", "windows-path", "concatenation"])
def test_a_credentials_file_name_path_or_expression_is_not_a_secret(text):
    # Each was refused as `generic_secret` while the scan took any random-looking value under a
    # secret-looking name for a key.
    assert find_secret(text, "text") is None


def test_recall_and_precision_over_both_corpora():
    """Recall over the secrets, precision over everything flagged, on both corpora (the
    figures in docs/benchmarks.md#secret-scan-recall-and-precision; `-s` prints them)."""
    positives = [text for _, text, _ in TRUE_POSITIVES]
    negatives = [*FALSE_POSITIVES, *NON_SECRETS]
    objects = [*FALSE_POSITIVE_OBJECTS, *NON_SECRET_OBJECTS]
    found = sum(find_secret(text, "text") is not None for text in positives)
    false_alarms = sum(find_secret(text, "text") is not None for text in negatives) + sum(
        find_secret(value, "data") is not None for value in objects
    )
    recall = found / len(positives)
    precision = found / (found + false_alarms)
    print(
        f"\nsecret scan: {len(positives)} secrets, {found} found (recall {recall:.1%}); "
        f"{len(negatives)} non-secret texts + {len(objects)} objects, {false_alarms} flagged "
        f"(precision {precision:.1%})"
    )
    assert (recall, precision) == (1.0, 1.0)


_B64 = string.ascii_letters + string.digits + "+/"
_B64URL = string.ascii_letters + string.digits + "-_"
_ALNUM = string.ascii_letters + string.digits
# Without `$` and `%`: a value opening with one reads as a template (`$VAR`, `%VAR%`).
_PUNCT = _ALNUM + "!#&*@^~-_."


def _random_keys(rng: random.Random, alphabet: str, count: int = 150) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(20, 64))) for _ in range(count)]


@pytest.mark.parametrize(
    ("template", "alphabet"),
    [
        ("api_key = '{}'", _ALNUM),
        ('{{"client_secret": "{}"}}', _B64),
        ("TOKEN={}", _B64URL),
        ('password: "{}"', _PUNCT),
        # base64 opening with its `/`; random stems named like files; a key beside a file name
        ("client_secret = /{}", _B64),
        ("private_key = '{}.json'", _ALNUM),
        ("secret = {}.pem", _B64URL),
        ("key_file = 'creds-9d9af53bf1a0.json'; db_password = {}", _PUNCT),
    ],
)
def test_random_keys_stay_secrets_beside_or_shaped_like_paths(template, alphabet):
    rng = random.Random(f"{template}{alphabet}")
    missed = [
        key for key in _random_keys(rng, alphabet) if find_secret(template.format(key), "t") is None
    ]
    assert missed == []


def _repeat(unit: str, length: int = 16_000) -> str:
    """Whole copies of `unit` to at least `length` characters."""
    return unit * (length // len(unit) + 1)


# Values that look random (not words, high entropy) and then are a path, a reference or code,
# at the longest a value may be (256 characters): each reaches every check, none ends the scan.
_ADVERSARIAL = {
    "paths": ("password=", "/home/" + "caramel-base-379922-9d9af53bf1a0/" * 7 + "sa.json"),
    "windows": ("secret=", "C:" + "\\keys\\caramel-base-379922-9d9af53bf1a0" * 5 + ".p12"),
    "references": ("secret: ", "vault:secret/" + "db-creds-a1B2c3#" * 15),
    "calls": ("token=", "config." + "getS3Client." * 20 + "x("),
    "uppercase": ("secret = ", "cfg.get" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" * 9 + "a("),
    "concatenation": ('"API_KEY="', "+config." + "getS3Client." * 20 + "x+"),
}
# and the most assignments a text can hold: no space between them
_UNSPACED = _repeat("token=a.b(")


@pytest.mark.parametrize(("name", "value"), _ADVERSARIAL.values(), ids=_ADVERSARIAL.keys())
def test_a_long_adversarial_text_scans_in_linear_time(name, value):
    text = _repeat(f"{name}{value} ")
    # A few milliseconds each; the bound only catches a backtracking regex.
    started = time.perf_counter()
    assert find_secret(text, "text") is None
    assert find_secret({"token": value}, "data") is None
    assert find_secret(_UNSPACED, "text") is None
    assert time.perf_counter() - started < 1.0
