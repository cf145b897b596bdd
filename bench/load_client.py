"""One client process of the mixed load (`bench --load`; the orchestration is in load.py).

Run as `python -m bench.load_client`: reads its configuration as one JSON line on
stdin, opens a keep-alive connection to each server it is given (`base_urls`: several nodes,
each request sent to the next one in turn, as a round-robin load balancer would), answers
`ready`, waits for a `go` line, then sends requests back to back (a closed loop: the next one
when the last has answered) for `warmup` seconds unmeasured and `duration` seconds measured,
each operation drawn from the mix. Prints
one JSON object: the latencies (ms) and the errors of each operation, how many requests the
warm-up sent, and how many of the timed ones went to each node.

Standard library only, and no Django: eight of these share two cores with the server, so the
client's own cost per request is kept small (http.client rather than httpx).
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import time
from urllib.parse import urlsplit

OPERATIONS = ("store", "search_hybrid", "recall")


class Client:
    """A keep-alive connection with an agent's key (also the latency bench's client: latency.py)."""

    def __init__(self, base_url: str, key: str):
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.connection: http.client.HTTPConnection | None = None
        self.body = b""  # the last response's body, read whole

    def request(
        self, method: str, path: str, body: dict | None = None, headers: dict | None = None
    ) -> int:
        """The response's status (its body read into `body`); a new connection after a
        transport error. `headers` are added to (or replace) the client's own for this request
        (another agent's key, another service's header)."""
        if self.connection is None:
            self.connection = http.client.HTTPConnection(
                self.host,  # type: ignore[arg-type]  # an http:// URL has a host
                self.port,
                timeout=60,
            )
        payload = None if body is None else json.dumps(body).encode()
        sent = self.headers if headers is None else self.headers | headers
        try:
            self.connection.request(method, path, body=payload, headers=sent)
            response = self.connection.getresponse()
            self.body = response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self) -> None:
        """Close the connection (the next request opens a new one)."""
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def node_of(request: int, client: int, nodes: int) -> int:
    """The node (0 … nodes - 1) that a client's `request`-th request goes to: each in turn,
    starting from its own (client i from node i mod nodes), so that the clients do not all
    reach the same node at once."""
    return (client + request) % nodes


def run(config: dict, wait_for_go=None, out=None) -> dict:
    rng = random.Random(config["seed"])
    nodes = [Client(url, config["key"]) for url in config["base_urls"]]
    mix = config["mix"]  # operation -> weight
    names = list(mix)
    weights = [mix[name] for name in names]
    facts, queries, keys = config["facts"], config["queries"], config["keys"]
    tag = config["seed"]
    counter = 0

    def send(name: str) -> int:
        nonlocal counter
        counter += 1
        client = nodes[node_of(counter, tag, len(nodes))]
        if name == "store":
            text = f"{facts[counter % len(facts)]} (load {tag}-{counter})"
            return client.request("POST", "/api/v1/memories", {"text": text})
        if name == "search_hybrid":
            query = queries[counter % len(queries)]
            return client.request("POST", "/api/v1/search", {"query": query, "mode": "hybrid"})
        return client.request("GET", f"/api/v1/memories/by-key/{rng.choice(keys)}")

    for client in nodes:
        client.request("GET", "/healthz")  # connected before the start
    if out is not None:
        out.write("ready\n")
        out.flush()
    if wait_for_go is not None:
        wait_for_go()
    latencies: dict[str, list[float]] = {name: [] for name in OPERATIONS}
    errors: dict[str, dict[str, int]] = {name: {} for name in OPERATIONS}
    began = time.monotonic()
    measure_from = began + config["warmup"]
    stop_at = measure_from + config["duration"]
    unmeasured = 0  # requests of the warm-up
    by_node = [0] * len(nodes)  # requests of the timed window sent to each node
    while True:
        name = rng.choices(names, weights)[0]
        started = time.monotonic()
        if started >= stop_at:
            break
        try:
            status = send(name)
            problem = None if status < 400 else str(status)
        except (OSError, http.client.HTTPException) as exc:
            problem = type(exc).__name__
        ended = time.monotonic()
        if started < measure_from:
            unmeasured += 1
            continue
        by_node[node_of(counter, tag, len(nodes))] += 1
        if problem is None:
            latencies[name].append((ended - started) * 1000)
        else:
            errors[name][problem] = errors[name].get(problem, 0) + 1
    return {
        "latencies": latencies,
        "errors": errors,
        "seconds": stop_at - measure_from,
        "warmup_requests": unmeasured,
        "by_node": by_node,
    }


def main() -> None:
    config = json.loads(sys.stdin.readline())
    result = run(config, wait_for_go=sys.stdin.readline, out=sys.stdout)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
