"""Django's PostgreSQL backend for the embedded server (memoryhub/embedded_db.py): the first
connection a process makes, and `dbshell`, start the server the settings name. Importing the
settings starts nothing, so `check`, `help` or a type checker never start PostgreSQL."""

from __future__ import annotations

from django.db.backends.postgresql import base, client

from memoryhub import embedded_db


class DatabaseClient(client.DatabaseClient):
    def runshell(self, parameters):
        embedded_db.ensure_started(self.connection.settings_dict)
        super().runshell(parameters)


class DatabaseWrapper(base.DatabaseWrapper):
    client_class = DatabaseClient

    def get_connection_params(self):
        # Also what a connection pool is built from, so a pooled process starts it too.
        embedded_db.ensure_started(self.settings_dict)
        return super().get_connection_params()
