"""`eval_extraction` end to end against the scripted stand-in model (real HTTP, a throwaway
embedded PostgreSQL): the plumbing, not the quality. A tiny LoCoMo-shaped file written here;
the real dataset is never read by the tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from django.conf import settings

from bench.extraction_eval import load, recall, session_time
from memories.formation.standin_llm import operations_for
from tests.support.bench import throwaway_dir

TINY_LOCOMO = [
    {
        "sample_id": "conv-a",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound named Pixel."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I started pottery classes."},
                {
                    "speaker": "Ana",
                    "dia_id": "D1:3",
                    "text": "Look at this.",
                    "blip_caption": "a photo of a lighthouse at dusk",
                },
            ],
            "session_2_date_time": "10:02 am on 9 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "My pottery teacher lives in Porto."},
            ],
        },
        "qa": [
            {
                "question": "What is the name of Ana's greyhound?",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "Where does the pottery teacher live?",
                "evidence": ["D2:1"],
                "category": 2,
            },
            {
                "question": "Which pottery and lighthouse?",
                "evidence": ["D1:2; D1:3"],
                "category": 1,
            },
            {"question": "Unanswerable?", "evidence": ["D1:1"], "category": 5},
            {"question": "No evidence?", "evidence": [], "category": 3},
        ],
    }
]


def add_op(text: str, evidence: list[int]) -> dict:
    return {
        "op": "add",
        "text": text,
        "key": None,
        "category": "core",
        "kind": "fact",
        "tags": [],
        "confidence": 0.95,
        "mentions": [],
        "occurred_at": None,
        "evidence": evidence,
    }


def test_parsing_sessions_and_the_recall_rule(tmp_path):
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(TINY_LOCOMO))
    [conversation] = load(path)
    assert [s.number for s in conversation.sessions] == [1, 2]
    assert conversation.sessions[0].started_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert conversation.sessions[0].turns[2].text == (
        "Look at this. [shares a photo of a lighthouse at dusk]"
    )
    assert [(q.evidence, q.category) for q in conversation.questions] == [
        ({"D1:1"}, 4),
        ({"D2:1"}, 2),
        ({"D1:2", "D1:3"}, 1),
    ]
    assert session_time("garbled", 3) == datetime(2023, 1, 3, tzinfo=UTC)
    covered = [{"D1:9"}, {"D1:2"}, {"D1:3", "D1:2"}]
    assert recall({"D1:2", "D1:3"}, covered, 1) == 0.0
    assert recall({"D1:2", "D1:3"}, covered, 2) == 0.5
    assert recall({"D1:2", "D1:3"}, covered, 10) == 1.0


def test_the_bench_stand_in_model_cites_the_runs_messages():
    prompt = "## New messages\n--- 2023-05-08 (Monday) ---\n[4] user (Ana): Hi\n    more\n[5] x: y"
    [op] = operations_for(prompt)["operations"]
    assert (op["op"], op["evidence"], op["text"]) == ("add", [4, 5], "The user said: Hi")
    assert operations_for("## New messages\n(none)") == {"operations": []}


def _run(args: list[str], env_extra: dict[str, str], timeout: int = 240):
    env = dict(
        os.environ,
        MEMORYHUB_DATA_DIR=str(settings.DATA_DIR),  # the running test server as home
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        DJANGO_SETTINGS_MODULE="memoryhub.settings",
        **env_extra,
    )
    return subprocess.run(
        [sys.executable, "manage.py", "eval_extraction", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_without_a_model_it_says_so_and_exits_2(tmp_path):
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(TINY_LOCOMO))
    completed = _run(["--dataset", str(path)], {"MEMORYHUB_LLM_URL": ""}, timeout=120)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "no LLM is configured" in completed.stderr
    assert "MEMORYHUB_LLM_URL" in completed.stderr


@pytest.mark.slow
def test_eval_ingests_extracts_and_scores_evidence_recall(tmp_path, fake_llm):
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(TINY_LOCOMO))
    output = tmp_path / "eval.json"
    # Session 1's run: two memories, citing turns D1:1 and D1:2; session 2's run: nothing.
    fake_llm.queue_json(
        {
            "operations": [
                add_op("Ana adopted a greyhound named Pixel.", [1]),
                add_op("Ben started pottery classes.", [2]),
            ]
        },
        usage=(500, 50),
    )
    fake_llm.queue_json({"operations": []}, usage=(300, 10))
    completed = _run(
        ["--dataset", str(path), "--embedder", "hashing", "--output", str(output)],
        {"MEMORYHUB_LLM_URL": fake_llm.url, "MEMORYHUB_LLM_MODEL": "scripted"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]

    # Each session was one thread, its turns the messages, named and dated from the session.
    assert len(fake_llm.requests) == 2 and fake_llm.pending == 0
    first, second = (r.prompt for r in fake_llm.requests)
    assert "--- 2023-05-08 (Monday) ---" in first
    assert "[1] user (Ana): I adopted a greyhound named Pixel." in first
    assert "[2] user (Ben): Lovely! I started pottery classes." in first
    assert "[3] user (Ana): Look at this. [shares a photo of a lighthouse at dusk]" in first
    assert "[1] user (Ben): My pottery teacher lives in Porto." in second
    assert "greyhound" not in second.split("## New messages")[1]

    result = json.loads(output.read_text())
    assert result["meta"]["llm_model"] == "scripted"
    assert (result["conversations"], result["sessions"], result["messages"]) == (1, 2, 4)
    assert (result["runs"], result["states"]) == (2, {"done": 2})
    assert (result["prompt_tokens"], result["completion_tokens"]) == (800, 60)
    assert result["memories_made"] == 2 and result["memories_live"] == 2
    assert result["outcomes"]["added"] == 2
    assert result["llm_ms"]["n"] == 2 and result["server_ms"]["n"] == 2
    assert result["server_ms"]["median"] is not None and result["llm_ms"]["p95"] is not None
    assert result["embedding_model"] == "hashing-v1"
    # Q1 (D1:1) is covered by the greyhound memory: 1.0; Q2 (D2:1): no memory rests on it: 0.0;
    # Q3 (D1:2 and D1:3): the pottery memory covers one of two: 0.5. Two memories in all, so
    # both are in every top 10.
    recall_ = result["recall"]
    assert recall_["overall"]["questions"] == 3
    assert recall_["overall"]["R@10"] == 50.0 and recall_["overall"]["R@20"] == 50.0
    by_category = recall_["by_category"]
    single = by_category["4 single-hop"]
    assert (single["questions"], single["R@5"], single["R@10"]) == (1, 100.0, 100.0)
    assert by_category["2 temporal"]["R@10"] == 0.0
    assert by_category["1 multi-hop"]["R@10"] == 50.0
    assert by_category["3 open-domain"] == {
        "questions": 0,
        "R@1": None,
        "R@5": None,
        "R@10": None,
        "R@20": None,
    }
    [conversation] = result["per_conversation"]
    assert (conversation["sample_id"], conversation["runs"], conversation["questions"]) == (
        "conv-a",
        2,
        3,
    )
    assert "dataset_sha256" in result and "per_conversation" in result
    # Progress on stderr, the table on stdout; the throwaway database is gone.
    assert "conv-a session 1/2: 3 messages, 1 run(s), +2 memories" in completed.stderr
    assert "conv-a session 2/2: 1 messages, 1 run(s), +0 memories" in completed.stderr
    assert "evidence recall" in completed.stdout and "single-hop" in completed.stdout
    assert not throwaway_dir(completed.stderr).exists()


@pytest.mark.slow
def test_a_model_failing_run_after_run_stops_the_evaluation(tmp_path, fake_llm):
    data = json.loads(json.dumps(TINY_LOCOMO))
    conversation = data[0]["conversation"]
    conversation["session_3_date_time"] = "9:00 am on 1 July, 2023"
    conversation["session_3"] = [{"speaker": "Ana", "dia_id": "D3:1", "text": "Pixel is three."}]
    conversation["session_4_date_time"] = "9:00 am on 2 July, 2023"
    conversation["session_4"] = [{"speaker": "Ben", "dia_id": "D4:1", "text": "Never asked."}]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(data))
    for _ in range(4):
        fake_llm.queue_error(401)  # a bad key: not retried
    completed = _run(
        ["--dataset", str(path), "--embedder", "hashing"], {"MEMORYHUB_LLM_URL": fake_llm.url}
    )
    assert completed.returncode == 1, completed.stderr[-3000:]
    assert "evaluation stopped: 3 extraction runs in a row failed" in completed.stderr
    assert "LLMRequestError" in completed.stderr
    assert len(fake_llm.requests) == 3  # session 4 was never sent
