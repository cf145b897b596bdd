"""The secret scanner against a true-positive and a false-positive corpus (no database)."""

from __future__ import annotations

import logging
import re
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memories.secrets_scan import RULE_NAMES, SecretFinding, find_secret, normalise
from tests.memories.secret_corpus import (
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
FP_IDS = [f"fp-{index}" for index in range(len(FALSE_POSITIVES))]


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


@pytest.mark.parametrize("text", FALSE_POSITIVES, ids=FP_IDS)
def test_false_positive_passes(text):
    assert find_secret(text, "text") is None


@pytest.mark.parametrize("text", FALSE_POSITIVES, ids=FP_IDS)
def test_false_positive_passes_in_full_width_and_nested(text):
    assert find_secret(full_width(text), "text") is None
    assert find_secret({"notes": [text, {"body": text}]}, "data") is None


@pytest.mark.parametrize("value", FALSE_POSITIVE_OBJECTS)
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
    ["\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2060", "\u2061", "\u2062"]
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
    assert normalise("ｇｈｐ＿ＡＢＣ　ｘ") == "ghp_ABC x"
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
