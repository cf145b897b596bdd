"""Secret redaction of conversation messages (docs/formation.md): spans become
`[redacted:<rule>]`."""

from __future__ import annotations

import pytest

from memories.redaction import redact
from memories.secrets_scan import find_secret, normalise
from tests.support.nonsecret_corpus import NON_SECRETS, REPORTED
from tests.support.secret_corpus import FALSE_POSITIVES, TRUE_POSITIVES, zero_width_split

# ids by index: some corpus values are random per process (xdist workers must agree on ids)
TP_IDS = [f"{rule}-{index}" for index, (rule, _, _) in enumerate(TRUE_POSITIVES)]
FP_IDS = [f"fp-{index}" for index in range(len(FALSE_POSITIVES))] + [
    f"ns-{index}" for index in range(len(NON_SECRETS))
]
CONTEXT = "Earlier today the user said:\n{}\nplease remember the rest of this."


@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_every_true_positive_is_redacted_and_the_prose_around_it_kept(rule, text, secret):
    message = CONTEXT.format(text)
    redacted, rules = redact(message)
    assert rules
    assert "[redacted:" in redacted
    assert normalise(secret) not in normalise(redacted)
    assert find_secret(redacted, "content") is None
    assert redacted.startswith("Earlier today the user said:")
    assert redacted.endswith("please remember the rest of this.")


@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_a_secret_split_by_invisible_characters_is_redacted_too(rule, text, secret):
    redacted, rules = redact(CONTEXT.format(zero_width_split(text, secret)))
    assert rules
    assert find_secret(redacted, "content") is None
    assert normalise(secret) not in normalise(redacted)


@pytest.mark.parametrize("text", FALSE_POSITIVES + NON_SECRETS, ids=FP_IDS)
def test_near_misses_are_left_alone(text):
    assert redact(CONTEXT.format(text)) == (CONTEXT.format(text), [])


def test_only_the_secret_token_goes():
    token = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    redacted, rules = redact(f"my token is {token} ok")
    assert (redacted, rules) == ("my token is [redacted:github_token] ok", ["github_token"])


def test_a_private_key_block_goes_whole_from_header_to_footer():
    body = "MIIEowIBAAKCAQEAx" + "Qz8" * 20
    text = (
        f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n{body}\n-----END RSA PRIVATE KEY-----\nbye"
    )
    assert redact(text) == ("key:\n[redacted:private_key]\nbye", ["private_key"])


def test_several_secrets_each_get_their_own_marker():
    gh = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    redacted, rules = redact(f"first {gh} then password = Zq8vLm3Xt9Rk2Wp and done")
    assert redacted == "first [redacted:github_token] then [redacted:generic_secret] and done"
    assert rules == ["github_token", "generic_secret"]


def test_a_secret_beside_a_credentials_file_loses_only_the_secret():
    secret = "Zq8vLm3Xt9Rk2WpQ7sN4"
    text = f"{REPORTED[0]}\nkey_file = 'creds.json'; api_key = '{secret}' and {REPORTED[2]}"
    assert redact(text) == (
        f"{REPORTED[0]}\nkey_file = 'creds.json'; [redacted:generic_secret] and {REPORTED[2]}",
        ["generic_secret"],
    )
