"""The field validators the models need; this module imports no model.

The same rules the input checks of crawls/validation.py apply, so an admin model form
refuses what the CLI and the API refuse, in the same words.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as FieldError
from django.core.validators import MaxValueValidator, MinValueValidator

from archiver.errors import ConfigError
from crawls.config import MAX_SIZE
from crawls.rules import parse_tags

# Highest accepted value of each quota; all fit their PositiveInteger columns.
QUOTA_LIMITS = {
    "max_concurrent_crawls": 10_000,
    "storage_quota_bytes": MAX_SIZE,
    "exec_minutes_quota": 10**9,
    "max_pages_per_crawl": 100_000_000,
}


def quota_validators(field: str) -> list:
    """The Org column's validators: the same range as OrgInput, for the admin's model form."""
    return [MinValueValidator(1), MaxValueValidator(QUOTA_LIMITS[field])]


def validate_tags(value) -> None:
    """A model form (Crawl.tags, Schedule.tags) refuses what parse_tags refuses, in its words."""
    try:
        parse_tags(value)
    except ConfigError as exc:
        raise FieldError(str(exc)) from None
