"""Batch fan-out: one predicate over many targets, enqueued as the targets stream in.

A batch is a record in the store (its live tally) plus one ordinary run per
target, each tagged with the batch id. Fan-out never builds the whole list:
it creates the record, registers and sends one run per target as the target
iterator yields it, then seals the batch so the tally knows its total. The
store's record script moves a run from ``pending`` to its verdict's counter,
once per run, when that run's verdict is recorded.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from schemas.request import EvaluationRequest, Target
from workers.fleet.dispatch import Dispatcher


def new_batch_id() -> str:
    return f"batch-{uuid.uuid4().hex[:16]}"


class EmptyBatch(ValueError):
    """The target glob matched nothing."""


def fan_out(
    dispatcher: Dispatcher,
    targets: Iterable[Target],
    *,
    text: str,
    batch_id: str | None = None,
    **request_fields: Any,
) -> tuple[str, int]:
    """Create a batch, enqueue one run per target, seal it; returns (batch id, targets sent).

    ``request_fields`` are the other ``EvaluationRequest`` fields every run
    shares (kind, profile, budget, model, api_base, toolsets). The request is
    validated on the first target, before the batch record exists, so a bad
    flag creates nothing.
    """
    batch_id = batch_id or new_batch_id()
    kind = str(request_fields.get("kind", "check"))
    store = dispatcher.store
    sent = 0
    created = False
    for target in targets:
        request = EvaluationRequest.model_validate(
            {**request_fields, "text": text, "target": target, "batch_id": batch_id}
        )
        if not created:
            store.create_batch(batch_id, kind=kind, text=text)
            created = True
        dispatcher.submit(request)
        sent += 1
    if not created:
        raise EmptyBatch("the target pattern matched nothing: check the glob and try again")
    store.seal_batch(batch_id)
    return batch_id, sent
