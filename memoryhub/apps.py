from django.apps import AppConfig


class MemoryhubConfig(AppConfig):
    name = "memoryhub"
    verbose_name = "MemoryHub"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from memoryhub import (
            checks,  # noqa: F401  (registers the system checks)
            tracing,
        )
        from memoryhub.dbtypes import register_fast_loaders

        connection_created.connect(register_fast_loaders, dispatch_uid="memoryhub-fast-loaders")
        # Every process (web, cluster, commands), before any request is served: the Django
        # instrumentation adds its middleware to settings.MIDDLEWARE.
        tracing.setup()
