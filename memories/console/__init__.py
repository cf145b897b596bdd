"""The operator console (docs/console.md): server-rendered pages with HTMX fragments.

- `urls.py`: every `/console/` route (namespace `console`).
- `memories.py`: the memories table, detail (Edit → Save), single and bulk actions, review
  queue, tombstones, activity.
- `threads.py`: conversations: the Threads page, a thread's detail (messages,
  summary, runs and the memories each made) and `Run extraction`.
- `pages.py`: dashboard, export/import, agents and keys, jobs, members.
- `forms.py`: the console forms (they parse operator input; services decide what is allowed).
- `memory_selectors.py`: console reads (an operator sees every memory and thread of their tenant),
  including the evidence messages shown next to extracted memories.
- `view_helpers.py`: page-or-fragment rendering, the one mapping of service errors
  (`service_errors`), Markdown, diffs.

Access (login, current tenant, roles) is `accounts.console.require_role`; template tags live in
`memories/templatetags/`, where Django looks for them.
"""
