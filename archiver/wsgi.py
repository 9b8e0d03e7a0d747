import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
application = get_wsgi_application()


def _settle() -> None:
    """Load every view now and freeze what start-up made.

    The API's slowest requests were the garbage collector's: a full collection walks every
    object of the process, and start-up leaves ~10^5 of them (Django, ninja, pydantic's
    schemas) that never die. Frozen, they are out of every collection's walk (issue 27
    measured the list's p99 at 100,000 crawls at ~48 ms, ~17 ms with the collector frozen;
    bench/api.py). Done in each gunicorn worker (this module is imported after the fork).
    """
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - imports the URL conf, the admin's and the API's views
    gc.collect()
    gc.freeze()


_settle()
