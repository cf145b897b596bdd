"""What the side-by-side with mem0 (bench/versus.py) sends each system: MemoryHub's REST API
and mem0's REST server (its server/main.py), request by request, and which of the two goes first."""

from __future__ import annotations

import http.client
from dataclasses import dataclass

from bench import locomo

SYSTEMS = ("memoryhub", "mem0")
LETTER = {"memoryhub": "H", "mem0": "M"}
TOP_K = 10
# What sending on a connection the server has closed raises (load_client.Client closes its side
# then, and the next request opens a new one).
STALE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class BenchRequestError(RuntimeError):
    """A request of the comparison answered with an error (the bench stops: no figure is taken
    over failed requests)."""


@dataclass
class Request:
    method: str
    path: str
    body: dict | None
    headers: dict


class MemoryHubSide:
    """MemoryHub's REST API: one agent key per conversation, one for the single writes."""

    name = "memoryhub"

    def __init__(self, base_url: str, keys: list[str], write_key: str):
        self.base_url, self.keys, self.write_key = base_url, keys, write_key

    def _auth(self, key: str) -> dict:
        return {"Authorization": f"Bearer {key}"}

    def bulk(self, conversation: int, turn: locomo.Turn) -> Request:
        # Stored as an agent stores a conversation's turns: with their metadata (the headline
        # LoCoMo figure), every turn kept.
        body = locomo.turn_body(turn, metadata=True)
        return Request("POST", "/api/v1/memories", body, self._auth(self.keys[conversation]))

    def write(self, text: str) -> Request:
        return Request("POST", "/api/v1/memories", {"text": text}, self._auth(self.write_key))

    def search(self, conversation: int, query: str, mode: str) -> Request:
        body = {"query": query, "mode": mode, "limit": TOP_K}
        return Request("POST", "/api/v1/search", body, self._auth(self.keys[conversation]))

    def store(self, conversation: int, text: str) -> Request:
        body = {"text": text}
        return Request("POST", "/api/v1/memories", body, self._auth(self.keys[conversation]))

    def read(self, conversation: int, memory_id: str) -> Request:
        path = f"/api/v1/memories/{memory_id}"
        return Request("GET", path, None, self._auth(self.keys[conversation]))

    def stored_ids(self, status: int, answer: dict) -> list[str]:
        # 422: a turn that looks like a secret is refused, as in bench/locomo.py.
        return [] if status == 422 else [answer["memory_id"]]

    def hit_ids(self, answer: dict) -> list[str]:
        return [hit["id"] for hit in answer["memories"]]

    def accepted(self, status: int) -> bool:
        return status in (200, 201, 422)


class Mem0Side:
    """mem0's REST server (server/main.py): `POST /memories` with `infer: false` (each message
    stored as it is, no LLM), `POST /search` with a `user_id` filter; `X-API-Key` when given.
    Every `user_id` carries this run's tag, so runs against one mem0 never see each other's."""

    name = "mem0"

    def __init__(self, base_url: str, key: str | None, tag: str, sample_ids: list[str]):
        self.base_url = base_url
        self.headers = {"X-API-Key": key} if key else {}
        self.users = [f"{tag}-{sample_id}" for sample_id in sample_ids]
        self.write_user = f"{tag}-writes"

    def _add(self, text: str, user: str, metadata: dict | None = None) -> dict:
        body = {"messages": [{"role": "user", "content": text}], "user_id": user, "infer": False}
        if metadata:
            body["metadata"] = metadata
        return body

    def bulk(self, conversation: int, turn: locomo.Turn) -> Request:
        # The same metadata as MemoryHub's (mem0 keeps it with the memory; its search does not
        # rank by it), and the turn's id.
        metadata = {
            "dia_id": turn.dia_id,
            "thread_id": turn.metadata.get("thread_id"),
            "occurred_at": turn.metadata.get("occurred_at"),
        }
        body = self._add(turn.text, self.users[conversation], metadata)
        return Request("POST", "/memories", body, self.headers)

    def write(self, text: str) -> Request:
        return Request("POST", "/memories", self._add(text, self.write_user), self.headers)

    def search(self, conversation: int, query: str, mode: str) -> Request:
        body = {"query": query, "filters": {"user_id": self.users[conversation]}, "top_k": TOP_K}
        return Request("POST", "/search", body, self.headers)

    def store(self, conversation: int, text: str) -> Request:
        body = self._add(text, self.users[conversation])
        return Request("POST", "/memories", body, self.headers)

    def read(self, conversation: int, memory_id: str) -> Request:
        return Request("GET", f"/memories/{memory_id}", None, self.headers)

    def stored_ids(self, status: int, answer: dict | list) -> list[str]:
        return [item["id"] for item in _results(answer)]

    def hit_ids(self, answer: dict | list) -> list[str]:
        return [item["id"] for item in _results(answer)]

    def accepted(self, status: int) -> bool:
        return status in (200, 201)


def _results(answer: dict | list) -> list[dict]:
    """mem0 answers `{"results": [...]}` (older servers: the list alone)."""
    return answer.get("results", []) if isinstance(answer, dict) else answer


def order_of(unit: int) -> tuple[str, str]:
    """Which system goes first in the `unit`-th request or block: MemoryHub in even ones."""
    return SYSTEMS if unit % 2 == 0 else SYSTEMS[::-1]
