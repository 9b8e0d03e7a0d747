"""In-memory stand-ins for the runner's launcher and progress store, for step tests.

They live under tests/, out of the installed package, so that no production module can
import them and the package needs no fakeredis. The integration tests use the real
launchers and a real Redis; these only speed up tests of the daemon's steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import fakeredis

from archiver.errors import EngineUnavailable, LaunchError
from runner.launchers.base import Instance, Launched, Launcher, LaunchSpec
from runner.progress import ProgressStore
from runner.redis_server import RedisEndpoint


@dataclass
class FakeInstance:
    spec: LaunchSpec
    running: bool = True
    exit_code: int | None = None
    oom: bool = False
    log: str = ""


@dataclass
class FakeLauncher(Launcher):
    """Instances that run until a test ends them with `exit()`."""

    name = "fake"
    instances: dict[str, FakeInstance] = field(default_factory=dict)
    fail_with: LaunchError | None = None  # raised by every launch while set
    unavailable: bool = False  # every call raises EngineUnavailable while set
    launches: int = 0

    def _check(self) -> None:
        if self.unavailable:
            raise EngineUnavailable("fake engine unreachable")

    def launch(self, spec: LaunchSpec) -> Launched:
        self._check()
        if self.fail_with:
            raise self.fail_with
        ref = f"fake-{spec.process_id}"
        args = spec.crawler_args("/crawls")
        if ref in self.instances:  # as the real launchers: never two for one row
            return Launched(ref=ref, args=args, container_id=ref)
        self.launches += 1
        spec.instance_dir.mkdir(parents=True, exist_ok=True)
        self.instances[ref] = FakeInstance(spec)
        return Launched(ref=ref, args=args, container_id=ref)

    def find(self, process_id: int, crawl_id: str, instance: int, instance_dir: Path) -> Instance | None:
        return self.inspect(f"fake-{process_id}")

    def ref_of(self, process) -> str:
        return process.container_id

    def inspect(self, ref: str) -> Instance | None:
        self._check()
        fake = self.instances.get(ref)
        if fake is None:
            return None
        return Instance(ref=ref, crawl_id=fake.spec.crawl_id, instance=fake.spec.instance,
                        process_id=fake.spec.process_id, running=fake.running,
                        exit_code=fake.exit_code, oom=fake.oom)

    def list(self) -> list[Instance]:
        self._check()
        return [self.inspect(ref) for ref in self.instances]

    def remove(self, ref: str) -> None:
        self._check()
        self.instances.pop(ref, None)

    def log_tail(self, ref: str, lines: int = 20) -> str:
        fake = self.instances.get(ref)
        return fake.log if fake else ""

    # test controls
    def running(self, crawl_id: str | None = None) -> list[str]:
        return [ref for ref, f in self.instances.items()
                if f.running and (crawl_id is None or f.spec.crawl_id == crawl_id)]

    def exit(self, ref: str, code: int, log: str = "", oom: bool = False) -> None:
        fake = self.instances[ref]
        fake.running, fake.exit_code, fake.log, fake.oom = False, code, log, oom


class MemoryStore(ProgressStore):
    """The progress store over an in-memory Redis (fakeredis): the same commands, pipelines
    and WRONGTYPE errors as a server, so the store's own parsing and give-back code runs,
    with no process to start. `down = True` makes every command raise ConnectionError,
    as an unreachable server does. The endpoint has no password, so grant() hands out the
    shared identity (the ACL rules are tested against a real server in test_redis_acl)."""

    def __init__(self, databases: int = 16):
        super().__init__(RedisEndpoint(host="memory", port=0, databases=databases))
        self._server = fakeredis.FakeServer()

    @property
    def down(self) -> bool:
        return not self._server.connected

    @down.setter
    def down(self, value: bool) -> None:
        self._server.connected = not value

    def client(self, db: int):
        if db not in self._clients:
            self._clients[db] = fakeredis.FakeRedis(server=self._server, db=db,
                                                    decode_responses=True)
        return self._clients[db]
