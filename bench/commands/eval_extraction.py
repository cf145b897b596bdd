"""`python -m bench eval_extraction` (or `python manage.py eval_extraction`): memory formation
measured on LoCoMo (docs/formation.md).

    python -m bench eval_extraction --dataset ../shared/datasets/locomo10.json \\
        [--conversations N] [--sessions N] [--roles user|alternate] [--embedder auto] \\
        [--output results.json]

Needs a model (`MEMORYHUB_LLM_URL`, ...): without one it says so and exits with status 2.
Everything happens in a throwaway embedded PostgreSQL in a temp dir (as `bench` does), so an
evaluation never writes to a real database; the model is the configured one. How the
conversations are ingested, extracted and scored: bench/extraction_eval.py.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounts.services import tenant_get_or_create
from bench.extraction_eval import (
    CATEGORIES,
    HEADLINE_K,
    KS,
    ROLES,
    EvaluationAborted,
    evaluate,
)
from memories.embeddings import get_embedder, reset_embedder
from memories.formation.llm import llm_configured
from memoryhub.throwaway import throwaway_database

DEFAULT_DATASET = settings.BASE_DIR.parent / "shared" / "datasets" / "locomo10.json"
NO_LLM = (
    "eval_extraction needs a model: no LLM is configured (set MEMORYHUB_LLM_URL, and "
    "MEMORYHUB_LLM_MODEL / MEMORYHUB_LLM_API_KEY as needed, to an OpenAI-compatible "
    "chat-completions endpoint)"
)


class Command(BaseCommand):
    help = "Evaluate memory formation on LoCoMo: evidence recall of extracted memories."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
        parser.add_argument("--conversations", type=int, help="the first N conversations only")
        parser.add_argument(
            "--sessions", type=int, help="the first N sessions of each conversation only"
        )
        parser.add_argument(
            "--roles",
            choices=ROLES,
            default="user",
            help="user: both speakers are `user` (named); alternate: the second is `assistant`",
        )
        parser.add_argument(
            "--embedder", default="auto", help="embedder: auto, local, hashing, openai"
        )
        parser.add_argument("--output", type=Path, help="write the results as JSON here")

    def handle(self, *args, **opts):
        if not llm_configured():
            raise CommandError(NO_LLM, returncode=2)
        dataset = opts["dataset"]
        if not dataset.exists():
            raise CommandError(f"LoCoMo dataset not found at {dataset} (use --dataset PATH)")
        for name in ("conversations", "sessions"):
            if opts[name] is not None and opts[name] < 1:
                raise CommandError(f"--{name} must be positive")
        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("django-q").setLevel(logging.WARNING)  # one line per enqueued run
        started_at = timezone.now().isoformat()
        started = time.monotonic()
        saved = settings.MEMORYHUB_EMBEDDER, settings.MEMORYHUB_ACCESS_BUMP
        settings.MEMORYHUB_EMBEDDER = opts["embedder"]
        # The scoring searches are not an agent's reads: no access stamps (and no background
        # flusher outliving the throwaway database).
        settings.MEMORYHUB_ACCESS_BUMP = "off"
        reset_embedder()
        try:
            with throwaway_database(self.err):
                tenant = tenant_get_or_create(slug="eval-extraction")
                result = evaluate(
                    path=dataset,
                    tenant=tenant,
                    conversations=opts["conversations"],
                    sessions=opts["sessions"],
                    roles=opts["roles"],
                    err=self.err,
                )
                result["embedding_model"] = get_embedder().model_name
        except EvaluationAborted as exc:
            raise CommandError(f"evaluation stopped: {exc}") from None
        finally:
            settings.MEMORYHUB_EMBEDDER, settings.MEMORYHUB_ACCESS_BUMP = saved
            reset_embedder()
        result = {
            "meta": {
                "started_at": started_at,
                "seconds": round(time.monotonic() - started, 1),
                "llm_model": settings.MEMORYHUB_LLM_MODEL,
                "llm_output": settings.MEMORYHUB_LLM_OUTPUT,
            },
            **result,
        }
        self.table(result)
        if opts["output"]:
            opts["output"].write_text(json.dumps(result, indent=2) + "\n")
            self.err(f"wrote {opts['output']}")

    def err(self, line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def table(self, result: dict) -> None:
        out = self.stdout.write
        subset = ""
        if (
            result["conversations"] < result["of_conversations"]
            or result["sessions_per_conversation"]
        ):
            subset = f" (subset: {result['conversations']} of {result['of_conversations']})"
        out(
            f"LoCoMo memory formation, model {result['meta']['llm_model']}, embedder "
            f"{result['embedding_model']}, roles {result['roles']}{subset}"
        )
        out(
            f"{result['sessions']} sessions, {result['messages']} messages, {result['runs']} runs "
            f"{result['states']}, {result['memories_made']} memories made "
            f"({result['memories_live']} live), tokens {result['prompt_tokens']} prompt + "
            f"{result['completion_tokens']} completion"
        )
        llm, server = result["llm_ms"], result["server_ms"]
        out(
            f"run latency ms: model median {llm['median']} p95 {llm['p95']}; "
            f"server median {server['median']} p95 {server['p95']}"
        )
        out("")
        out(
            f"{'evidence recall':<18}{'questions':>10}" + "".join(f"{'R@' + str(k):>8}" for k in KS)
        )
        rows = [("overall", result["recall"]["overall"])]
        rows += [
            (label, result["recall"]["by_category"][f"{n} {label}"])
            for n, label in CATEGORIES.items()
        ]
        for label, row in rows:
            cells = "".join(
                f"{row[f'R@{k}']:>8.1f}" if row[f"R@{k}"] is not None else f"{'-':>8}" for k in KS
            )
            out(f"{label:<18}{row['questions']:>10}{cells}")
        out(
            f"(headline: R@{HEADLINE_K} overall = {result['recall']['overall'][f'R@{HEADLINE_K}']})"
        )
