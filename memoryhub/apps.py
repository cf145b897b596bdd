from django.apps import AppConfig


class MemoryhubConfig(AppConfig):
    name = "memoryhub"
    verbose_name = "MemoryHub"
