from django.apps import AppConfig


class CrawlsConfig(AppConfig):
    name = "crawls"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from crawls import checks  # noqa: F401 - registers the system checks
