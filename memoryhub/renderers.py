"""The API's JSON renderer: DRF's output from orjson.

A hydrate answers with ~150 memory objects; orjson renders them several times faster than DRF's
`json.dumps` with its encoder class (docs/performance.md#code-figures). The bytes are DRF's: compact
separators, UTF-8, U+2028/U+2029 escaped, and every type orjson does not take natively (datetimes,
decimals, lazy strings, …) formatted by DRF's own encoder. Anything orjson refuses (an integer
beyond 64 bits, …) falls back to DRF's renderer. Floats use the shortest round-trip form, as `json`
does (exponents are written `1e-7` rather than `1e-07`). Bodies may carry `orjson.Fragment`s: JSON
text written elsewhere (hydrate's entries, built by PostgreSQL).
"""

from __future__ import annotations

import orjson
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
_default = JSONEncoder().default


class FastJSONRenderer(JSONRenderer):
    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        try:
            out = orjson.dumps(data, default=_default, option=_OPTIONS)
        except (orjson.JSONEncodeError, TypeError):
            return super().render(data, accepted_media_type, renderer_context)
        if self.get_indent(accepted_media_type, renderer_context or {}) is not None:
            # Pretty-printing is DRF's; plain data first (bodies may hold orjson.Fragments).
            return super().render(orjson.loads(out), accepted_media_type, renderer_context)
        return out.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
