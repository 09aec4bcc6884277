"""Which changes a webhook or Slack sink hears about: static filters, flap damping,
cannot_determine on/off, out-of-order changes. Pure functions, checked example by example
and as a property over arbitrary verdict sequences."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from notifier.policy import Decision, decide_message, matches
from schemas.fleet import CheckSummary, VerdictChange
from schemas.notify import SinkFilter, WebhookSink
from schemas.verdict import EXIT_CODES, VerdictKind
from workers.fleet.notify_feed import Told, epoch_ms

T, F = VerdictKind.TRUE, VerdictKind.FALSE
CD, PP = VerdictKind.CANNOT_DETERMINE, VerdictKind.POORLY_POSED
BASE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def change(
    old: VerdictKind, new: VerdictKind, second: int = 0, check: str = "c1", target: str = "t1"
) -> VerdictChange:
    return VerdictChange(
        check_id=check,
        run_id=f"r{second}",
        target=target,
        from_verdict=old,
        to_verdict=new,
        at=BASE + timedelta(seconds=second),
    )


def summary(verdict: VerdictKind, changed_second: int, previous: VerdictKind) -> CheckSummary:
    at = BASE + timedelta(seconds=changed_second)
    return CheckSummary(
        check_id="c1",
        kind="check",
        text="p",
        target="t1",
        verdict=verdict,
        exit_code=EXIT_CODES[verdict],
        run_id="r",
        finished_at=at,
        changed_at=at,
        previous_verdict=previous,
    )


class Sink:
    """Feeds changes through decide_message and keeps ``told`` as the feed's ack script does."""

    def __init__(self, config: SinkFilter) -> None:
        self.config = config
        self.told: Told | None = None
        self.heard: list[tuple[VerdictKind, VerdictKind]] = []

    def judge(self, c: VerdictChange, current: CheckSummary | None = None) -> Decision:
        decision = decide_message(self.config, c, current, self.told)
        remember = decision.remember
        if remember is not None:
            if decision.remember_mode == "absent":
                self.told = self.told or remember
            elif self.told is None or remember.at_ms >= self.told.at_ms:
                self.told = remember
        if decision.deliver:
            assert decision.presented_from is not None
            self.heard.append((decision.presented_from, c.to_verdict))
        return decision


def test_static_filter_takes_ids_globs_targets_and_verdicts() -> None:
    sink = SinkFilter(checks=["prod-*", "exact"], targets=["snapshot:prod-*"], to_verdicts=[F])
    assert matches(sink, change(T, F, check="prod-replicas", target="snapshot:prod-eu"))
    assert matches(sink, change(T, F, check="exact", target="snapshot:prod-us"))
    assert not matches(sink, change(T, F, check="staging-x", target="snapshot:prod-eu"))
    assert not matches(sink, change(T, F, check="prod-replicas", target="context:prod-eu"))
    assert not matches(sink, change(F, T, check="prod-replicas", target="snapshot:prod-eu"))
    assert matches(SinkFilter(), change(CD, PP))
    assert not matches(SinkFilter(from_verdicts=[T]), change(F, CD))


def test_a_bare_target_name_in_a_sink_filter_means_the_snapshot_too() -> None:
    """As ``assay checks --target prod-eu`` does: a name without a kind finds the snapshot."""
    assert matches(SinkFilter(targets=["prod-eu"]), change(T, F, target="snapshot:prod-eu"))
    assert matches(SinkFilter(targets=["prod-*"]), change(T, F, target="snapshot:prod-us"))
    assert matches(SinkFilter(targets=["prod-eu"]), change(T, F, target="prod-eu"))
    assert not matches(SinkFilter(targets=["prod-eu"]), change(T, F, target="snapshot:prod-us"))
    assert not matches(SinkFilter(targets=["context:x"]), change(T, F, target="snapshot:x"))


def test_yaml_booleans_in_verdict_lists_name_the_verdicts() -> None:
    sink = WebhookSink.model_validate(
        {
            "type": "webhook",
            "url": "http://x",
            "hmac_key": "s3cr3t-hmac",
            "to_verdicts": [False, True],
        }
    )
    assert sink.to_verdicts == [F, T]
    assert sink.hmac_key.get_secret_value() == "s3cr3t-hmac"
    assert "s3cr3t-hmac" not in repr(sink)


def test_a_plain_sink_hears_every_change_from_what_it_last_heard() -> None:
    sink = Sink(SinkFilter())
    for index, (old, new) in enumerate([(T, F), (F, CD), (CD, T)]):
        assert sink.judge(change(old, new, index)).deliver
    assert sink.heard == [(T, F), (F, CD), (CD, T)]


def test_with_cannot_determine_off_an_unclear_verdict_is_not_news() -> None:
    sink = Sink(SinkFilter(cannot_determine=False))
    assert sink.judge(change(T, CD, 0)).reason == "cannot_determine"
    assert sink.judge(change(CD, T, 1)).reason == "unchanged"  # true -> ? -> true: nothing
    assert sink.judge(change(T, CD, 2)).reason == "cannot_determine"
    assert sink.judge(change(CD, F, 3)).deliver  # true -> ? -> false: true -> false
    assert sink.heard == [(T, F)]


def test_a_check_that_started_unclear_is_not_a_change_when_cd_is_off() -> None:
    sink = Sink(SinkFilter(cannot_determine=False))
    assert sink.judge(change(CD, T, 0)).reason == "first"
    assert sink.judge(change(T, F, 1)).deliver
    assert sink.heard == [(T, F)]


def test_a_flap_shorter_than_the_minimum_duration_is_not_delivered_either_way() -> None:
    sink = Sink(SinkFilter(min_duration_seconds=60))
    now_true = summary(T, 10, F)  # at the due time the check is true again (changed at +10 s)
    assert sink.judge(change(T, F, 0), now_true).reason == "flapped"
    assert sink.judge(change(F, T, 10), now_true).reason == "unchanged"
    assert sink.heard == []


def test_a_change_that_lasted_the_minimum_duration_is_delivered() -> None:
    sink = Sink(SinkFilter(min_duration_seconds=60))
    assert sink.judge(change(T, F, 0), summary(F, 0, T)).deliver
    assert sink.heard == [(T, F)]
    # it flapped back and forth meanwhile: the latest change is judged on its own
    assert sink.judge(change(F, T, 100), summary(F, 130, T)).reason == "flapped"
    assert sink.judge(change(T, F, 130), summary(F, 130, T)).reason == "unchanged"
    assert sink.heard == [(T, F)]


def test_an_older_change_after_a_newer_one_was_told_is_dropped() -> None:
    sink = Sink(SinkFilter())
    assert sink.judge(change(F, T, 5)).deliver  # another replica delivered the newer one
    assert sink.judge(change(T, F, 3)).reason == "stale"
    assert sink.told == Told(T, epoch_ms(BASE + timedelta(seconds=5)))


verdicts = st.sampled_from([T, F, PP, CD])


@given(st.lists(verdicts, min_size=1, max_size=25), st.booleans())
def test_a_sink_hears_exactly_the_changes_of_the_verdicts_it_cares_about(
    sequence: list[VerdictKind], cannot_determine: bool
) -> None:
    """Recorded verdicts in order, each change judged as it is read (no damping):
    the sink hears the sequence with ignored verdicts dropped and repeats collapsed."""
    sink = Sink(SinkFilter(cannot_determine=cannot_determine))
    for second in range(1, len(sequence)):
        old, new = sequence[second - 1], sequence[second]
        if old != new:  # the store writes a change event only when the verdict differs
            sink.judge(change(old, new, second))
    cared = [v for v in sequence if cannot_determine or v != CD]
    collapsed = [v for i, v in enumerate(cared) if i == 0 or cared[i - 1] != v]
    assert sink.heard == list(itertools.pairwise(collapsed))
