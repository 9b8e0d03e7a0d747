"""docs/architecture.md names what a newcomer looks for: every Django app the settings install,
every step module of runner/steps/, and the periodic steps of the tick."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def section(title: str) -> str:
    return DOC.read_text().split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_apps_section_names_every_app_the_settings_install():
    ours = [app for app in settings.INSTALLED_APPS if (ROOT / app / "apps.py").exists()]
    assert ours, settings.INSTALLED_APPS
    apps = section("Apps")
    assert [app for app in ours if f"`{app}/`" not in apps] == []


def test_every_module_of_runner_steps_is_named():
    doc = DOC.read_text()
    modules = sorted(path.name for path in (ROOT / "runner" / "steps").glob("*.py") if path.name != "__init__.py")
    assert modules
    assert [name for name in modules if f"runner/steps/{name}" not in doc] == []


# The words the doc uses for a step whose name in the code is short.
SAID_AS = {"disk": "disk resume", "redis databases": "left-over redis databases"}


def periodic_steps() -> set[str]:
    """The names of the tick's steps after supervision, as the runner appends them
    (`("name", lambda now: ...)`, in the daemon and in the modules that attach theirs)."""
    code = "\n".join(path.read_text() for path in [*(ROOT / "runner").glob("*.py"),
                                                   *(ROOT / "runner" / "steps").glob("*.py")])
    return set(re.findall(r'\(\s*"([a-z ]+)",\s*lambda now', code))


def test_the_tick_names_every_periodic_step():
    steps = periodic_steps()
    assert {"schedules", "webhooks", "quality review", "change alerts"} <= steps
    tick = " ".join(section("The tick: observe, decide, apply").split()).lower()
    assert sorted(step for step in steps if SAID_AS.get(step, step) not in tick) == []
