"""Code shared by the test modules: stand-in servers, helpers, corpora, and the fixtures that
more than one directory uses (each conftest imports those it needs). Never a test."""
