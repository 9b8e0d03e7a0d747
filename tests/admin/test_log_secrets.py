"""No log of either gunicorn of scripts/start.sh holds a collection's public link secret or a
replay capability's signature (issue 36: public links were written in clear to
data/run/replay-access.log, where capabilities were already cut)."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request

from crawls.models.collections import LINK_PREFIX
from tests.admin.browsing import wait_until


def get(url: str, referer: str) -> None:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Referer": referer})
    try:
        direct.open(request, timeout=30).read()
    except urllib.error.HTTPError as answer:  # an unknown link is a 404: logged all the same
        answer.read()


def test_no_log_line_of_either_server_holds_a_public_link(installation, replay_url, admin_url):
    link = f"{LINK_PREFIX}{secrets.token_urlsafe(32)}"
    for base in (replay_url, admin_url):
        for path in (f"/c/{link}/", f"/c/{link}/replay.json", f"/c/{link}/files/1/a.wacz"):
            get(base + path, referer=f"{replay_url}/replay/?source=%2Fc%2F{link}%2Freplay.json")
    run = installation.data_dir / "run"
    access = [run / "replay-access.log", run / "admin-access.log"]
    # gunicorn writes a request's access line after its answer: wait for all six.
    wait_until(lambda: sum(log.read_text().count(" /c/") for log in access) >= 6, 30,
               "the access log lines")
    logs = [*run.glob("*.log"), *installation.data_dir.glob("*.log")]
    assert len(logs) >= 6  # both servers' access, error and output logs
    for log in logs:
        assert link[len(LINK_PREFIX):] not in log.read_text(), log.name
    assert f"/c/{LINK_PREFIX}<secret>/replay.json" in (run / "replay-access.log").read_text()
