"""The prompt files and the JSON schemas, checked without a model."""

from __future__ import annotations

from typing import Any

import pytest

from memories.formation.operations import OPERATIONS_SCHEMA, SUMMARY_SCHEMA
from memories.formation.prompts import EXTRACT_PROMPT, SUMMARIZE_PROMPT, load_prompt


@pytest.mark.parametrize("version", [EXTRACT_PROMPT, "extract.v2", SUMMARIZE_PROMPT])
def test_each_prompt_file_loads_with_its_sections(version):
    prompt = load_prompt(version)

    assert prompt.version == version
    assert "<!--" not in prompt.system  # the maintainers' note stays out of the prompt
    assert set(prompt.schema.get_identifiers()) == {"schema"}
    assert load_prompt(version) is prompt  # read once


def test_the_prompts_placeholders():
    assert set(load_prompt(EXTRACT_PROMPT).user.get_identifiers()) == {
        "summary",
        "kinds",
        "memories",
        "earlier",
        "messages",
    }
    assert set(load_prompt(SUMMARIZE_PROMPT).user.get_identifiers()) == {"summary", "messages"}


def test_the_prompts_state_the_message_and_memory_line_formats():
    system = load_prompt(EXTRACT_PROMPT).system
    assert "`[<seq>] <role>: <content>`" in system
    assert "`[<seq>] (earlier) <role>: <content>`" in system
    assert "`(<memory_id> v<version> <category>) <text>`" in system
    assert '{"operations": []}' in system


def strict_violations(schema: dict[str, Any], path: str = "$") -> list[str]:
    """Where `schema` breaks OpenAI's strict-mode rules for objects."""
    found = []
    if schema.get("type") == "object":
        if schema.get("additionalProperties") is not False:
            found.append(f"{path}: additionalProperties is not false")
        if sorted(schema.get("required", [])) != sorted(schema.get("properties", {})):
            found.append(f"{path}: not every property is required")
    for name, sub in schema.get("properties", {}).items():
        found += strict_violations(sub, f"{path}.{name}")
    if "items" in schema:
        found += strict_violations(schema["items"], f"{path}[]")
    for i, sub in enumerate(schema.get("anyOf", [])):
        found += strict_violations(sub, f"{path}|{i}")
    return found


@pytest.mark.parametrize("schema", [OPERATIONS_SCHEMA, SUMMARY_SCHEMA])
def test_the_schemas_fit_strict_structured_outputs(schema):
    assert schema["type"] == "object"  # the root may not be an anyOf
    assert "anyOf" not in schema
    assert strict_violations(schema) == []


def test_the_op_kinds_are_told_apart_by_op():
    kinds = OPERATIONS_SCHEMA["properties"]["operations"]["items"]["anyOf"]
    assert [kind["properties"]["op"]["enum"] for kind in kinds] == [
        ["add"],
        ["update"],
        ["forget"],
        ["confirm"],
    ]
