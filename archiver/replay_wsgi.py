"""The replay origin's WSGI application (scripts/start.sh serves it with a gunicorn of its
own on ARCHIVER_REPLAY_URL's address): archiver/replay_settings.py, never the admin's."""

import os

from django.core.wsgi import get_wsgi_application

# Not setdefault: a DJANGO_SETTINGS_MODULE naming the admin's settings must not win here.
os.environ["DJANGO_SETTINGS_MODULE"] = "archiver.replay_settings"
application = get_wsgi_application()
