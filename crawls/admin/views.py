"""The crawl admin's own pages: add, buttons, live JSON, downloads, replay and the log.

Every view is wrapped by `admin_site.admin_view` (staff log-in) and checks the model
permission its action needs; a refused action raises PermissionDenied (403) before
anything is written. Buttons call crawls.actions, as the CLI and the API do.
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from archiver import conf
from archiver.errors import ActionRefused
from crawls import actions, capability, storage
from crawls.admin.forms import CrawlForm, config_initial
from crawls.admin.words import group_of, one_line_reason, state_words
from crawls.cli import age, duration
from crawls.config import human_size
from crawls.downloads import file_name, serve_archive, serve_object
from crawls.models import Crawl, CrawlFile, CrawlStatus, Intent
from crawls.models.statuses import said
from crawls.reasons import error_sentence, reason_sentence

S = CrawlStatus
LIVE_LIMIT = 200  # crawls one live request may ask about
LOG_PAGE = 200
LIVE_PROCESSES = 20  # instances shown live on a crawl's page
LIVE_PAGES = 10  # newest pages shown live on a crawl's page

# Button -> (label, the permission it needs). "run_again" and the files are links.
BUTTONS = {
    "pause": ("Pause", "change"),
    "resume": ("Resume", "change"),
    "stop": ("Stop", "change"),
    "cancel": ("Cancel (discard files)", "remove"),
    "retry": ("Retry", "change"),
    "retry_failed": ("Retry failed pages", "change"),
    "delete": ("Delete with its files", "remove"),
}
PERMISSION = {"change": "crawls.change_crawl", "remove": "crawls.delete_crawl",
              "add": "crawls.add_crawl", "view": "crawls.view_crawl"}


def may(request, permission: str) -> bool:
    return request.user.has_perm(PERMISSION[permission])


def require(request, permission: str) -> None:
    if not may(request, permission):
        raise PermissionDenied


def buttons_for(crawl: Crawl) -> list[str]:
    """The buttons that make sense in the crawl's state (pure: fields only)."""
    status, intent = crawl.status, crawl.intent
    ending = intent in (Intent.STOP, Intent.CANCEL)
    shown = []
    if (status in S.NOT_STARTED or status in S.RUNNING_STATES) and not intent:
        shown.append("pause")
    if status == S.PAUSED or intent == Intent.PAUSE:
        shown.append("resume")
    if status in S.ACTIVE and not ending:
        shown += ["stop", "cancel"]
    if status in (S.FAILED, S.CANCELED):
        shown.append("retry")
    if status in (*S.SUCCESSFUL, S.FAILED) and crawl.pages_failed:
        shown.append("retry_failed")
    if status in S.FINAL:
        shown.append("delete")
    return shown


def allowed_buttons(request, crawl: Crawl) -> list[tuple[str, str]]:
    return [(name, BUTTONS[name][0]) for name in buttons_for(crawl) if may(request, BUTTONS[name][1])]


# --- add and run again ---------------------------------------------------------------------


def add_crawl(modeladmin, request):
    require(request, "add")
    source = request.GET.get("from")
    if request.method == "POST":
        form = CrawlForm(request.POST)
        if form.is_valid():
            try:
                crawl = actions.add(form.cleaned_data["org"], form.config, form.cleaned_data["tags"])
            except ActionRefused as exc:  # the form checked all this; the org may have changed since
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Queued crawl {crawl.short_id}.")
                return HttpResponseRedirect(reverse("admin:crawls_crawl_change", args=[crawl.pk]))
    elif source:  # "run again": the form filled in with a finished crawl's configuration
        earlier = get_object_or_404(Crawl, pk=source)
        form = CrawlForm(initial={**config_initial(earlier.config), "org": earlier.org_id,
                                  "tags": earlier.tags})
    else:
        form = CrawlForm()
    context = {
        **modeladmin.admin_site.each_context(request), "opts": Crawl._meta, "form": form,
        "title": "Run a crawl again" if source else "Add a crawl", "source": source,
        "media": modeladmin.media + form.media,
    }
    return TemplateResponse(request, "admin/crawls/crawl/add_form.html", context)


def edit_crawl(modeladmin, request, pk: str):
    """The crawl form for a crawl that has not started yet; saving reconfigures it."""
    require(request, "change")
    crawl = get_object_or_404(Crawl.objects.select_related("org"), pk=pk)
    here = reverse("admin:crawls_crawl_change", args=[crawl.pk])
    if request.method == "POST":
        form = CrawlForm(request.POST)
        if form.is_valid():
            try:
                actions.edit(crawl, form.cleaned_data["org"], form.config, form.cleaned_data["tags"])
            except ActionRefused as exc:
                messages.warning(request, str(exc))
            else:
                messages.success(request, f"Changed crawl {crawl.short_id}.")
            return HttpResponseRedirect(here)
    else:
        form = CrawlForm(initial={**config_initial(crawl.config), "org": crawl.org_id, "tags": crawl.tags})
    context = {
        **modeladmin.admin_site.each_context(request), "opts": Crawl._meta, "form": form,
        "title": f"Edit crawl {crawl.short_id}", "media": modeladmin.media + form.media,
        "submit": "Save the crawl",
    }
    return TemplateResponse(request, "admin/crawls/crawl/add_form.html", context)


def editable(crawl: Crawl) -> bool:
    return crawl.status in S.NOT_STARTED and not crawl.has_runtime


# --- buttons -------------------------------------------------------------------------------


def press(modeladmin, request, pk: str, button: str):
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if button not in BUTTONS:
        raise Http404("no such button")
    require(request, BUTTONS[button][1])
    crawl = get_object_or_404(Crawl.objects.select_related("org"), pk=pk)
    here = reverse("admin:crawls_crawl_change", args=[crawl.pk])
    try:
        done = carry_out(crawl, button)
    except ActionRefused as exc:
        messages.warning(request, str(exc))
        return HttpResponseRedirect(here)
    messages.success(request, done)
    if button == "delete":
        return HttpResponseRedirect(reverse("admin:crawls_crawl_changelist"))
    return HttpResponseRedirect(here)


# What each button does (crawls/actions.py): the same functions as the CLI and the API.
ACTIONS = {"pause": actions.pause, "resume": actions.resume, "stop": actions.stop,
           "cancel": actions.cancel, "retry": actions.retry,
           "retry_failed": actions.retry_failed_pages, "delete": actions.delete}


def carry_out(crawl: Crawl, button: str) -> str:
    """One button's action, in the admin's words; ActionRefused says why it was refused."""
    done = ACTIONS[button](crawl)
    if button == "delete":
        return f"Deleted crawl {crawl.short_id} and {done.count} file(s)."
    if button == "retry_failed":
        return f"Queued crawl {crawl.short_id} again for its {done.count} failed page(s)."
    return f"{BUTTONS[button][0]}: crawl {crawl.short_id}: {said(crawl.status)}" + (
        f" ({crawl.intent} requested)" if crawl.intent else "") + "."


# --- live ----------------------------------------------------------------------------------


def live_row(crawl: Crawl, now) -> dict:
    """What the list and the detail page refresh for one crawl."""
    return {
        "id": crawl.id,
        "status": crawl.status,
        "intent": crawl.intent,
        "state": state_words(crawl),
        "group": group_of(crawl),
        # what the crawl's page compares to know its buttons are out of date
        "internal": crawl.status + (f" ({crawl.intent} requested)" if crawl.intent else ""),
        "reason_line": one_line_reason(crawl),
        "final": crawl.is_final,
        "reason": reason_sentence(crawl),
        "error": error_sentence(crawl),
        "pages_done": crawl.pages_done,
        "pages_found": crawl.pages_found,
        "pages_failed": crawl.pages_failed,
        "size": human_size(crawl.size_bytes),
        "running_time": duration(crawl.elapsed_now(now)),
        # counted up to now from its running instances, so it grows while the crawl runs
        "execution_time": duration(crawl.exec_now(now)),
        "age": age(crawl.created_at, now),
        "scale": crawl.scale,
    }


def live_detail(crawl: Crawl, now) -> dict:
    """What a crawl's own page refreshes besides its row: instances and newest pages."""
    return {
        "processes": [live_process(p, now) for p in crawl.processes.order_by("-created_at")[:LIVE_PROCESSES]],
        "pages": [
            {"url": page.url, "status": page.status, "http_status": page.http_status or "-"}
            for page in crawl.snapshots.order_by("-id")[:LIVE_PAGES]
        ],
    }


def live_process(process, now) -> dict:
    """One row of a crawl's instances table; its pages and size once the session ended."""
    pages, size = process.counts_shown()
    exit_text = "-" if process.exit_code is None else f"{process.exit_code} {process.exit_reason}".strip()
    return {"hostname": process.hostname, "status": process.status, "exit": exit_text,
            "pages": pages, "size": size, "started": age(process.started_at, now)}


def live(modeladmin, request):
    require(request, "view")
    ids = request.GET.getlist("id")[:LIVE_LIMIT]
    now = timezone.now()
    crawls = list(Crawl.objects.filter(pk__in=ids).with_running_processes())
    rows = [live_row(crawl, now) for crawl in crawls]
    if request.GET.get("detail") and len(crawls) == 1:
        rows[0].update(live_detail(crawls[0], now))
    return JsonResponse({"crawls": rows}, headers={"Cache-Control": "no-store"})


# --- files and replay ----------------------------------------------------------------------


def download(modeladmin, request, pk: str, file_pk: int, name: str):
    require(request, "view")
    crawl_file = get_object_or_404(CrawlFile, pk=file_pk, crawl_id=pk)
    if storage.is_object(crawl_file):
        return serve_object(request, crawl_file, file_name(crawl_file))
    return serve_archive(request, conf.get().data_dir, crawl_file.path, file_name(crawl_file))


def download_url(crawl_file: CrawlFile) -> str:
    return reverse("admin:crawls_crawl_download",
                   args=[crawl_file.crawl_id, crawl_file.pk, file_name(crawl_file)])


def replay(modeladmin, request, pk: str):
    """The crawl replayed in a frame of the replay origin, to a capability for this crawl
    (crawls/capability.py): archived pages never run on the admin's origin."""
    require(request, "view")
    crawl = get_object_or_404(Crawl, pk=pk)
    if not crawl.files.exists():
        raise Http404("this crawl has no archive files yet")
    token = capability.mint(crawl.id, time.time())
    query = urlencode({key: request.GET[key] for key in ("url", "ts") if request.GET.get(key)})
    context = {
        **modeladmin.admin_site.each_context(request), "opts": Crawl._meta, "crawl": crawl,
        "title": f"Replay of crawl {crawl.short_id}",
        "frame": f"{conf.get().replay_url}/c/{token}/" + (f"?{query}" if query else ""),
    }
    return TemplateResponse(request, "admin/crawls/crawl/replay.html", context)


# --- the log -------------------------------------------------------------------------------


def log_page(modeladmin, request, pk: str):
    require(request, "view")
    crawl = get_object_or_404(Crawl, pk=pk)
    paginator = Paginator(crawl.logs.order_by("-id"), LOG_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    context = {
        **modeladmin.admin_site.each_context(request), "opts": Crawl._meta, "crawl": crawl,
        "title": f"Log of crawl {crawl.short_id}", "page": page,
    }
    return TemplateResponse(request, "admin/crawls/crawl/log.html", context)
