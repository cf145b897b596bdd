"""Webhooks: a tenant's endpoints receive its events, signed, in order per memory: once in the
normal case, at least once under faults. Import the module you need; this package re-exports
nothing.

- `signing`: the secret (shown once, kept encrypted) and `MemoryHub-Signature`.
- `addresses`: the SSRF guard — a URL's host, resolved, must be public; the connection goes to
  the address that was checked (no second lookup for DNS rebinding to slip through).
- `endpoints`: create, list, delete, enable; resend from the delivery log.
- `delivery`: the django-q2 dispatcher: events into deliveries, deliveries sent with backoff.
"""
