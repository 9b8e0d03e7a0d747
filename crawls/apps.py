from django.apps import AppConfig


class CrawlsConfig(AppConfig):
    name = "crawls"
    default_auto_field = "django.db.models.BigAutoField"
