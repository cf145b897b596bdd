"""The settings mypy's Django plugin loads: memoryhub.settings with a placeholder database URL.

The plugin imports the settings and sets Django up to learn the models; with a database URL
set, the settings leave the embedded PostgreSQL alone. Nothing connects to the placeholder.
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://typecheck@localhost/memoryhub")

from memoryhub.settings import *  # noqa: F403
