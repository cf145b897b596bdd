"""Retrieval (search and hydrate): what an agent finds by query and what it loads at start-up.

- `params`: the request bodies parsed and validated (`parse_search`, `parse_hydrate`);
- `ranking`: `ranked_ids`, the one-statement ranking inside PostgreSQL (also the console's);
- `search`: `memory_search`, the scope every search starts from, history hits;
- `hydrate`: `hydrate_body` / `memory_hydrate`, the budget walk;
- `formats`: the search hit of the API and hydrate's markdown block.

Callers import from the submodules.
"""
