"""The operator console (SPEC §6): server-rendered pages with HTMX fragments.

- `urls.py`: every `/console/` route (namespace `console`).
- `memories.py`: the memories table, detail (Edit → Save), single and bulk actions, review
  queue, tombstones, activity.
- `pages.py`: dashboard, export/import, agents and keys, jobs, members.
- `forms.py`: the console forms (they parse operator input; services decide what is allowed).
- `selectors.py`: console reads (an operator sees every memory of their tenant).
- `common.py`: page-or-fragment rendering, the one mapping of service errors
  (`service_errors`), Markdown, diffs.

Access (login, current tenant, roles) is `accounts.console.require_role`; template tags live in
`memories/templatetags/`, where Django looks for them.
"""
