"""The fleet's Redis Lua, kept in ``.lua`` files beside the modules that run them.

Every file compiles in a real redis-server (no Lua linter ships with the project, so
Redis's own compiler is the check), no Python module carries a script in a string, and a
script that must learn some of its keys before it runs (dropping a policy from every set)
stays right when the sets change between its caller's read and its write.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from workers.fleet.lua_scripts import RedisClock
from workers.fleet.policy_store import PolicyStore
from workers.fleet.redis_client import connect
from workers.policy_engine.policies.documents import read_files
from workers.policy_engine.policies.importer import import_documents

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LUA_FOLDERS = ("workers", "scheduler")


def _lua_files() -> list[Path]:
    return sorted(path for folder in LUA_FOLDERS for path in (ROOT / folder).rglob("*.lua"))


def test_every_lua_file_compiles_in_redis(redis_url: str) -> None:
    files = _lua_files()
    named = {
        match
        for folder in LUA_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        for match in re.findall(
            r'(?:lua_source|_script)\("(\w+)"\)', path.read_text(encoding="utf-8")
        )
    }
    assert named and named <= {path.stem for path in files}, "every script a module loads exists"
    client = redis.Redis.from_url(redis_url)
    refused = {}
    for path in files:
        try:
            client.script_load(path.read_text(encoding="utf-8"))
        except redis.ResponseError as exc:
            refused[str(path.relative_to(ROOT))] = str(exc)
    assert refused == {}


def test_no_python_module_holds_a_lua_script() -> None:
    holders = {
        str(path.relative_to(ROOT))
        for folder in (*LUA_FOLDERS, "assay", "schemas", "notifier")
        if (ROOT / folder).is_dir()
        for path in (ROOT / folder).rglob("*.py")
        if "redis.call" in path.read_text(encoding="utf-8")
    }
    assert holders == set(), sorted(holders)


def test_a_dropped_policy_leaves_a_set_imported_while_it_was_being_dropped(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The drop reads the set names, then another import puts the policy in a new set before
    # the drop writes: the policy must not stay a member of that set once it is dropped.
    policies, refusals = import_documents(
        read_files([ROOT / "examples" / "policies" / "vap-trusted-registries.yaml"])
    )
    assert not refusals and len(policies) == 1
    dropper = PolicyStore(connect(redis_url), prefix="race")
    importer = PolicyStore(connect(redis_url), prefix="race")
    dropper.save(policies)
    read_sets = dropper.client.smembers
    reads: list[int] = []

    def sets_then_an_import(key: str) -> Any:
        names = read_sets(key)
        if not reads:
            importer.save(policies, "team-b")
        reads.append(1)
        return names

    monkeypatch.setattr(dropper.client, "smembers", sets_then_an_import)
    assert dropper.drop(policies[0].name) is True
    assert importer.get(policies[0].name) is None
    assert importer.set_members("team-b") == [], "no set names a policy that is gone"
    assert len(reads) == 2, "the drop read the sets again after they changed"


def test_a_worker_whose_own_clock_is_off_passes_redis_time(redis_url: str) -> None:
    # Leases, UTC periods and rate-limit windows are on Redis's clock: a worker whose own
    # clock is a day and a half off still passes the scripts Redis's time, to the millisecond.
    client = redis.Redis.from_url(redis_url)
    skewed = RedisClock(client, monotonic=lambda: time.monotonic() + 129_600.0)
    for _ in range(3):
        seconds, micros = client.time()
        assert abs(skewed.now_ms() - (int(seconds) * 1000 + int(micros) // 1000)) < 50
        time.sleep(0.05)
