"""The formation settings' typed helper: a bad MEMORYHUB_LLM_OUTPUT stops startup."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from memoryhub.env import env_choice

MODES = ("json_schema", "json_object", "prompt")


def test_env_choice_defaults_when_unset_or_blank(monkeypatch):
    monkeypatch.delenv("MEMORYHUB_LLM_OUTPUT", raising=False)
    assert env_choice("MEMORYHUB_LLM_OUTPUT", "json_schema", MODES) == "json_schema"
    monkeypatch.setenv("MEMORYHUB_LLM_OUTPUT", "  ")
    assert env_choice("MEMORYHUB_LLM_OUTPUT", "json_schema", MODES) == "json_schema"


def test_env_choice_accepts_a_listed_value(monkeypatch):
    monkeypatch.setenv("MEMORYHUB_LLM_OUTPUT", " prompt ")
    assert env_choice("MEMORYHUB_LLM_OUTPUT", "json_schema", MODES) == "prompt"


def test_env_choice_refuses_anything_else(monkeypatch):
    monkeypatch.setenv("MEMORYHUB_LLM_OUTPUT", "yaml")
    with pytest.raises(ImproperlyConfigured, match="MEMORYHUB_LLM_OUTPUT must be one of"):
        env_choice("MEMORYHUB_LLM_OUTPUT", "json_schema", MODES)
