"""Outcomes journaled when Redis fails stay the instance's: an exit after Redis came back
must not hand those pages to the queue (another session would fetch and archive them
again), and the next session of the instance records them."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis
from archiver_crawler.journal import UNRECORDED, journaled_urls
from archiver_crawler.state import CrawlState, QueueEntry


def test_requeue_own_keeps_the_journaled_pages_and_hands_back_the_rest(redis_url):
    async def run() -> tuple[int, set[str], set[str]]:
        client = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            state = CrawlState(client, "c1", "crawl-c1-0")
            await state.load_scripts()
            urls = ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b", "http://127.0.0.1:9/c"]
            await state.add([QueueEntry(url=u, seed_id=0, depth=0) for u in urls], 100)
            for _ in urls:  # this instance claims all three
                await state.commit(None, 100, "2030-01-01T00:00:00Z")
            handed_back = await state.requeue_own(keep=[urls[0]])
            held = set(await client.hkeys("c1:p"))
            queued = {json.loads(raw)["url"] for raw in await client.zrange("c1:q", 0, -1)}
            return handed_back, held, queued
        finally:
            await client.aclose()

    handed_back, held, queued = asyncio.run(run())
    assert handed_back == 2
    assert held == {"http://127.0.0.1:9/a"}
    assert queued == {"http://127.0.0.1:9/b", "http://127.0.0.1:9/c"}


def test_journaled_urls_reads_the_journal_and_skips_damaged_lines(tmp_path):
    assert journaled_urls(tmp_path) == []
    (tmp_path / UNRECORDED).write_text('{"url": "http://x/1", "page": null}\nnot json\n{"no": "url"}\n'
                                       '{"url": "http://x/2"}\n')
    assert journaled_urls(tmp_path) == ["http://x/1", "http://x/2"]
