"""Background jobs (docs/operations.md#background-jobs): prune, retention purge, re-embed, and
the scheduled backup (`backup`: one `pg_dump`, not batches).

Each job is a plain function taking an injectable `now` and a `progress` callback, working in
bounded batches of one transaction each; `memories.tasks.run_job` records a JobRun around it.
"""
