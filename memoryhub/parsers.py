"""The API's JSON body parser: DRF's, with nesting too deep for Python's parser an input error.

Python's `json` module recurses once per nesting level and raises `RecursionError` near the
interpreter's recursion limit (~1000 levels); DRF only turns `ValueError` into a parse error, so
`[[[[…]]]]` a thousand deep would be a 500. The validation layer refuses anything deeper than
`memories.validation.MAX_DEPTH` with the field named; this only catches what the parser itself
cannot read.
"""

from __future__ import annotations

from rest_framework import parsers

from memoryhub.errors import InvalidInput


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise InvalidInput("JSON nested too deeply", field="body") from None
