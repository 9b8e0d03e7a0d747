"""archiver's data: orgs, crawls and what they produce, and the rules of their lifecycle.

One module per aggregate (docs/architecture.md); every public name is re-exported here, so
`from crawls.models import X` is how the rest of the project reads them. Modules of this
package import each other by module (`crawls.models.org`), never this package, and only
downwards: statuses and org at the bottom, crawl above its parts, the rest above crawl.
"""

from crawls.lease import FAR_FUTURE
from crawls.models.changes import ChangeCheck, ChangeCheckStatus
from crawls.models.crawl import Crawl, CrawlQuerySet, first_text, new_id
from crawls.models.crawl_intents import MAX_SCALE
from crawls.models.crawl_limits import MAX_STALLS
from crawls.models.crawl_runner import PROGRESS_FIELDS
from crawls.models.events import CrawlEvent, CrawlMessage
from crawls.models.files import CrawlFile, CrawlLog
from crawls.models.logins import LoginFailure
from crawls.models.org import Org, OrgUsage, OrgUsageNow, month_start, storage_in_progress
from crawls.models.pages import PAGE_LOADED, Snapshot, SnapshotStatus, page_loaded
from crawls.models.process import (
    LIVE_PROCESS,
    ExitReason,
    Process,
    ProcessQuerySet,
    ProcessStatus,
    elapsed_with_uncounted,
)
from crawls.models.profiles import BrowserProfile
from crawls.models.runners import RunnerRecord
from crawls.models.schedules import Schedule
from crawls.models.statuses import (
    DISK_PAUSE,
    EVENT_FOR_FINAL,
    STOPPED_STATE,
    CrawlOrigin,
    CrawlStatus,
    Intent,
    StopReason,
)
from crawls.models.tokens import ApiToken, ApiTokenQuerySet, IdempotencyKey
from crawls.models.webhooks import (
    DeliveryQuerySet,
    DeliveryStatus,
    Webhook,
    WebhookDelivery,
    WebhookQuerySet,
)

__all__ = [
    "DISK_PAUSE", "EVENT_FOR_FINAL", "FAR_FUTURE", "LIVE_PROCESS", "MAX_SCALE", "MAX_STALLS",
    "PAGE_LOADED", "PROGRESS_FIELDS", "STOPPED_STATE",
    "ApiToken", "ApiTokenQuerySet", "BrowserProfile", "Crawl", "CrawlEvent", "CrawlFile",
    "CrawlLog", "CrawlMessage", "CrawlQuerySet", "CrawlStatus", "DeliveryQuerySet",
    "DeliveryStatus", "ExitReason", "IdempotencyKey", "Intent", "LoginFailure", "Org",
    "OrgUsage", "OrgUsageNow", "Process", "ProcessQuerySet", "ProcessStatus", "RunnerRecord",
    "Schedule", "Snapshot", "SnapshotStatus", "StopReason", "Webhook", "WebhookDelivery",
    "WebhookQuerySet",
    "elapsed_with_uncounted", "first_text", "month_start", "new_id", "page_loaded",
    "storage_in_progress",
    "ChangeCheck", "ChangeCheckStatus",
]

from crawls.models.collections import Collection  # noqa: E402  (issue 24)

__all__ += ["Collection", "CrawlOrigin"]

from crawls.models.search import INDEX_RETRY, TEXT_INDEXED, PageText  # noqa: E402

__all__ += ["INDEX_RETRY", "TEXT_INDEXED", "PageText"]

from crawls.models.dedup import (  # noqa: E402
    FileDependency,
    PayloadDigest,
    Required,
    check_deletable,
    dependent_crawls,
)

__all__ += ["FileDependency", "PayloadDigest", "Required", "check_deletable", "dependent_crawls"]

from crawls.models.qa import (  # noqa: E402  (issue 25)
    PageReview,
    QualityReview,
    ReviewStatus,
    review_state,
    review_states,
    review_summary,
)

__all__ += ["PageReview", "QualityReview", "ReviewStatus", "review_state", "review_states", "review_summary"]
