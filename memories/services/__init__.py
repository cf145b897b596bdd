"""Every write to a memory. REST views, MCP tools, console views and jobs all call these
functions, so each rule lives here once. Import the module you need
(`from memories.services.store import memory_store`); this package re-exports nothing.

- `store`: store/upsert: keyed compare-and-set, dedup policies, near duplicates
  and previously corrected look-alikes, the entry cap.
- `changes`: an agent's PATCH and confirm of a memory it may change.
- `lifecycle`: forget (tombstone or purge), thread end, and the tombstone, purge and expiry
  steps the other modules share.
- `operator_actions`: the console's actions (correct, tombstone, restore, purge, approve,
  merge, add tag).
- `jsonl_import`: a JSONL backup into a tenant (parse, check, apply; all or nothing).
- `eviction`: the entry caps: the owner's cap lock, the eviction order (also spelled in SQL for
  the prune job), evicting over the cap.
- `writes`: the compare-and-set core every change goes through (conditional UPDATE + its one
  revision), the guard of an explicit precondition, the columns derived from content.
- `common`: what all of them use: embedding, advisory locks, reasons. (The secret scan is
  `memories.secrets_scan.scan_secrets`, run inside `inputs.parse_store`/`parse_update`
  and called directly for reasons, tags and the ids of confirm and thread end.)

Conventions:
- Each change is one conditional `UPDATE … WHERE id = … AND version = n` (compare-and-set) plus
  exactly one `MemoryRevision` in the same transaction. 0 rows updated means someone else won:
  with an explicit precondition that is `409 CONFLICT`; without one the write re-reads and
  retries.
- Embeddings are computed before any transaction or lock is taken; a failure raises
  `EMBEDDING_ERROR` with nothing written.
- Every change bumps `version` and sets `updated_at`, so `expected_updated_at` is as strong a
  precondition as `expected_version`.
- Services return models and plain results; response bodies are built by the callers
  (`memories.serialization`), and `Idempotency-Key` replays by `memories.idempotency`.
"""
