"""The benchmarks and their harness: latency over real HTTP, pruning, memory formation, the
mixed load, LoCoMo retrieval quality, the side-by-side with mem0 (docs/benchmarks.md).

Part of the repository, not of the installed package (the wheel ships `memoryhub`, `accounts`
and `memories` only): run it from a checkout, `python -m bench …` or `make bench`.
`python manage.py bench` and `eval_extraction` hand over to `bench.commands`. Everything runs
against a throwaway embedded PostgreSQL and a real uvicorn process (`memoryhub.throwaway`);
nothing touches the developer's database.
"""
