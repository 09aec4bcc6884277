"""A Redis Sentinel broker for the tests: the broker's redis-server watched by one real
``redis-server --sentinel`` (quorum 1, a one-second down-after, so a failover takes seconds).

The fixture (``sentinel_broker``) is in conftest.py.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from assay.redis_process import RedisProcess, free_port
from schemas.settings import AssaySettings, load_settings
from tests.fleet_support import stop_process, wait_until

MASTER_NAME = "assay-broker"


@dataclass
class SentinelBroker:
    """The broker's redis-server, watched by one real sentinel (quorum 1)."""

    master: RedisProcess
    sentinel: subprocess.Popen[bytes]
    sentinel_port: int
    password: str | None = None  # the sentinel's own requirepass
    username: str | None = None  # an ACL user the sentinel knows ``password`` under

    @property
    def url(self) -> str:
        return f"sentinel://127.0.0.1:{self.sentinel_port}/0"

    def ask(self) -> redis.Redis:
        """A client on the sentinel itself, with its own credentials."""
        return redis.Redis(
            port=self.sentinel_port,
            username=self.username,
            password=self.password,
            decode_responses=True,
        )

    def named_master_port(self) -> int | None:
        """The port of the master the sentinel names now (None before it knows one)."""
        ask = self.ask()
        try:
            address = ask.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
            return int(address[1]) if address else None
        except redis.exceptions.ConnectionError:
            return None
        finally:
            ask.close()

    def stop(self) -> None:
        """Stop the sentinel (the servers are stopped by whoever started them)."""
        stop_process(self.sentinel)

    def knows_replica(self, port: int) -> bool:
        """The sentinel has seen this replica up, so it can promote it."""
        ask = self.ask()
        try:
            replicas = ask.sentinel_slaves(MASTER_NAME)
        finally:
            ask.close()
        return any(int(replica["port"]) == port and not replica["is_sdown"] for replica in replicas)


def start_sentinel(
    folder: Path,
    master: RedisProcess,
    password: str | None = None,
    username: str | None = None,
) -> SentinelBroker:
    """``redis-server --sentinel`` with a config it may rewrite (it does, on every change).

    ``password``: the sentinel's own ``requirepass``, or with ``username`` an ACL user
    that may do anything; clients must then authenticate to the sentinel itself.
    """
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not installed"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "sentinel.conf"
    config.write_text(
        f"port {port}\n"
        "bind 127.0.0.1\n"
        f"dir {folder}\n"
        f"logfile {folder / 'sentinel.log'}\n"
        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master.port} 1\n"
        f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
        f"sentinel failover-timeout {MASTER_NAME} 10000\n"
    )
    if password is not None and username is None:
        config.write_text(config.read_text() + f"requirepass {password}\n")
    elif password is not None:
        config.write_text(
            config.read_text()
            + "user default off\n"
            + f"user {username} on >{password} ~* &* +@all\n"
        )
    process = subprocess.Popen(
        [binary, str(config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    broker = SentinelBroker(master, process, port, password, username)
    if not wait_until(lambda: broker.named_master_port() == master.port, timeout=10):
        stop_process(process)
        log = folder / "sentinel.log"
        raise RuntimeError(f"the sentinel did not start: {log.read_text()[-2000:]}")
    return broker


SENTINEL_PASSWORD = "sentinel-only-s3cret"
SENTINEL_USER = "assay-ops"


@contextmanager
def watched_broker(folder: Path, kind: str = "open") -> Iterator[SentinelBroker]:
    """The broker's redis-server (no password of its own) watched by a sentinel that
    wants no password (``open``), its ``requirepass``, or an ACL user's password."""
    password = None if kind == "open" else SENTINEL_PASSWORD
    username = SENTINEL_USER if kind == "acl-user" else None
    master = RedisProcess(data_dir=folder / "broker").start()
    try:
        broker = start_sentinel(folder / "sentinel", master, password, username)
        try:
            yield broker
        finally:
            broker.stop()
    finally:
        master.stop()


def sentinel_settings(redis_url: str, broker: SentinelBroker, **fields: object) -> AssaySettings:
    """Settings for this broker, with the sentinel's own credentials unless ``fields`` say."""
    own: dict[str, object] = {}
    if broker.password is not None:
        own["broker_sentinel_password"] = broker.password
    if broker.username is not None:
        own["broker_sentinel_username"] = broker.username
    return load_settings(
        redis_url=redis_url,
        broker_url=broker.url,
        broker_sentinel_master=MASTER_NAME,
        **{**own, **fields},
    )
