"""`{{ value|score }}`: a score from 0 to 1 as the CLI shows it (crawls.diffing.shown_score)."""

from django import template

from crawls.diffing import shown_score

register = template.Library()
register.filter("score", shown_score)
