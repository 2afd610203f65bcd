"""The conformance corpus in the suite: every scenario runs against Apache Kafka 4.4 (the session's
`kafka_reference` JVM) and a minibroker, and fails on a difference not listed with its reason in
tests/conformance/differences.toml. Also: every API minibroker serves is covered by a scenario,
docs/differences.md is generated from the list, and every listed difference is still seen.

The whole corpus runs once per module (one minibroker, the session's Kafka), in tens of seconds;
scripts/conformance runs the same outside pytest and prints every difference.
"""

from __future__ import annotations

import pytest

from minibroker.handlers import load_all
from minibroker.testing import running_broker
from tests.support import conformance as cf
from tests.support.kafka_reference import REFERENCE_SECURITY, SASL_USERS

pytestmark = pytest.mark.interop

CORPUS = cf.load_corpus()


@pytest.fixture(scope="module")
def outcomes(kafka_reference, java, tmp_path_factory):
    differences = cf.load_differences()
    with running_broker(tmp_path_factory.mktemp("conformance"), sasl_users=SASL_USERS,
                        properties=REFERENCE_SECURITY) as mini:
        results = list(cf.run_corpus(
            cf.Target("kafka", kafka_reference.bootstrap, kafka_reference.sasl_bootstrap),
            cf.Target("minibroker", mini.bootstrap, mini.sasl_bootstrap),
            list(CORPUS.values()), differences, java=java))
    print("\n" + cf.summary(results))
    return {o.scenario.name: o for o in results}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_scenario_answers_as_kafka_or_as_documented(outcomes, name):
    outcome = outcomes[name]
    assert outcome.verdict != "undocumented", cf.describe(outcome, verbose=True)


def test_every_listed_difference_is_still_seen(outcomes):
    seen = {diff_id for o in outcomes.values() for diff_id in o.deliberate}
    stale = [d.id for d in cf.load_differences() if d.id not in seen]
    assert not stale, f"listed in differences.toml but no longer seen (fixed? remove them): {stale}"


def test_every_served_api_is_covered_by_a_scenario():
    covered = {api for s in CORPUS.values() for api in s.apis}
    served = set(load_all())
    assert served - covered == set(), f"APIs served with no conformance scenario: {sorted(served - covered)}"


def test_differences_page_is_generated_from_the_list():
    expected = cf.render_differences(cf.load_differences())
    assert cf.DIFFERENCES_DOC.is_file() and cf.DIFFERENCES_DOC.read_text() == expected, \
        "docs/differences.md is out of date: run scripts/conformance --write-docs"


def test_normalising_keeps_what_matters():
    # The engine itself: ids become ordinals in order of appearance, named lists become keyed,
    # a value that differs is found at its path, throttle times compare within the tolerance.
    obs = [{"step": "a", "response": {"producer_id": cf.Ref("pid", "7"), "topics": [
        {"name": "y", "error_code": 3}, {"name": "x", "error_code": 0}], "throttle_time_ms": 1000}}]
    other = [{"step": "a", "response": {"producer_id": cf.Ref("pid", "99"), "topics": [
        {"name": "x", "error_code": 0}, {"name": "y", "error_code": 5}], "throttle_time_ms": 1300}}]
    now = 1_800_000_000_000  # the run's wall-clock window: only values near it are times
    a = cf._by_step(cf.normalise(obs, now, now))
    b = cf._by_step(cf.normalise(other, now, now))
    assert a["0:a"]["producer_id"] == b["0:a"]["producer_id"] == "pid#1"
    assert cf.compare(a, b) == [("0:a.topics[y].error_code", 3, 5)]
    assert cf.compare({"throttle_time_ms": 0}, {"throttle_time_ms": 20}) == [("throttle_time_ms", 0, 20)]
