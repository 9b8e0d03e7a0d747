"""runner/outage.py: an outage is logged once when it starts, once a minute while it lasts,
once when it ends; the waits between tries double up to a cap (the clock is injected)."""

from __future__ import annotations

import logging

from django.db import OperationalError

from runner.outage import BACKOFF_CAP, Outage


def test_an_outage_of_ten_minutes_says_so_in_eleven_lines_and_backs_off_to_the_cap(caplog):
    now = [0.0]
    outage = Outage("runner", first_wait=0.2, clock=lambda: now[0])
    waits = []
    with caplog.at_level(logging.INFO, logger="runner.outage"):
        while now[0] < 600:
            waits.append(outage.failed(OperationalError("the connection is closed")))
            now[0] += waits[-1]
        outage.recovered()
        outage.recovered()  # nothing more to say
    lines = [record.getMessage() for record in caplog.records]
    assert waits[:4] == [0.2, 0.4, 0.8, 1.6]
    assert max(waits) == BACKOFF_CAP
    assert len(waits) > 250  # tried all along, no line per try
    assert lines[0] == ("runner: the database is unavailable (OperationalError: the connection is "
                        "closed); waiting for it")
    assert sum("still unavailable" in line for line in lines) == 9  # once a minute (the first at 60 s and more)
    assert lines[-1].startswith("runner: the database is back after 601")
    assert len(lines) == 11
