"""The ledger checker: a clean ledger passes, and each invariant catches its own breach."""

from __future__ import annotations

import dataclasses

from tests.faults.ledger import (
    EXTRA_CHECKS,
    Attempt,
    Call,
    Event,
    Final,
    Ledger,
    Refusal,
    Stop,
    check_admission_counters,
    check_all,
    check_attempts,
    check_bindings,
    check_claims_reach_their_worker,
    check_group_parallelism,
    check_leases_exclusive,
    check_no_phantom,
    check_one_terminal_state,
    check_placement,
    check_terminal_never_changes,
    claims_per_pool,
    doubled,
    percentile,
    recovery_times,
)
from tests.faults.report import table


def clean() -> Ledger:
    """Job a: killed once on w1 (lease expired), then completed on w2."""
    return Ledger(
        accepted={"a"},
        attempts=[
            Attempt("a", 1, "L1", "w1", start=1.0),
            Attempt("a", 2, "L2", "w2", start=3.0, end=4.0, outcome="completed"),
        ],
        stops=[Stop("w1", 2.0)],
        calls=[
            Call("Submit", "a", 0.0, 0.1, status="queued"),
            Call("Get", "a", 5.0, 5.1, status="completed"),
        ],
        finals={"a": Final("a", "t", "completed", attempts=2, max_attempts=3)},
        events=[
            Event("a", "", "queued"),
            Event("a", "queued", "processing", 1, worker_id="w1"),
            Event("a", "processing", "queued", 1, error_code="LEASE_EXPIRED"),
            Event("a", "queued", "processing", 2, worker_id="w2"),
            Event("a", "processing", "completed", 2),
        ],
        counters={"t": 0, "*": 0},
        workers={"w1", "w2"},
    )


def test_a_clean_ledger_passes_every_check() -> None:
    assert check_all(clean(), extra=EXTRA_CHECKS) == []


def test_a_job_left_live_after_the_drain_is_reported() -> None:
    ledger = clean()
    ledger.finals["a"] = dataclasses.replace(ledger.finals["a"], status="processing")
    assert check_one_terminal_state(ledger) == ["a: still processing after the drain"]


def test_an_accepted_job_missing_at_the_end_is_lost() -> None:
    ledger = clean()
    del ledger.finals["a"]
    assert check_one_terminal_state(ledger) == ["a: accepted but gone at the end (lost)"]


def test_two_terminal_transitions_are_reported() -> None:
    ledger = clean()
    ledger.events.append(Event("a", "processing", "failed", 2))
    assert check_one_terminal_state(ledger) == [
        "a: entered terminal states ['completed', 'failed']"
    ]


def test_a_job_no_client_was_told_about_is_a_phantom() -> None:
    ledger = clean()
    ledger.attempts.append(Attempt("ghost", 1, "L9", "w2", start=3.0, end=3.5))
    assert check_no_phantom(ledger) == ["ghost: phantom job (never accepted)"]


def test_a_child_of_an_accepted_group_is_no_phantom() -> None:
    ledger = clean()
    ledger.events.append(Event("child", "", "held", parent_id="a"))
    assert check_no_phantom(ledger) == []


def test_overlapping_leases_without_lease_lost_are_reported() -> None:
    ledger = clean()
    ledger.stops = []  # w1 was never killed: attempt 1 ran on through attempt 2
    assert len(check_leases_exclusive(ledger)) == 1


def test_overlapping_leases_are_allowed_when_the_older_was_refused_lease_lost() -> None:
    ledger = clean()
    ledger.stops = [Stop("w1", 2.0, "SIGSTOP")]
    ledger.attempts[0] = dataclasses.replace(ledger.attempts[0], end=5.0)
    ledger.refusals = [Refusal("a", "w1", "LEASE_LOST", 4.9)]
    assert check_leases_exclusive(ledger) == []


def test_one_attempt_number_on_two_leases_is_reported() -> None:
    ledger = clean()
    ledger.attempts[1] = dataclasses.replace(ledger.attempts[1], attempt=1)
    assert "a: attempt 1 held by leases ['L1', 'L2']" in check_leases_exclusive(ledger)


def test_attempts_not_matching_expiries_and_retries_are_reported() -> None:
    ledger = clean()
    ledger.finals["a"] = dataclasses.replace(ledger.finals["a"], attempts=3)
    assert check_attempts(ledger) == ["a: attempts 3 != 1 + 1 expiries + 0 retries"]


def test_attempts_over_max_attempts_are_reported() -> None:
    ledger = clean()
    ledger.finals["a"] = dataclasses.replace(ledger.finals["a"], max_attempts=1)
    assert check_attempts(ledger) == ["a: 2 attempts > max 1"]


def test_a_handler_run_the_job_never_counted_is_reported() -> None:
    ledger = clean()
    ledger.attempts.append(Attempt("a", 3, "L3", "w2", start=4.5, end=4.6))
    assert "a: handler ran attempt 3 of 2" in check_attempts(ledger)


def test_a_terminal_status_seen_to_change_is_reported() -> None:
    ledger = clean()
    ledger.calls.append(Call("Get", "a", 6.0, 6.1, status="failed"))
    assert check_terminal_never_changes(ledger) == ["a: Get answered failed after completed"]


def test_an_audit_transition_out_of_a_terminal_state_is_reported() -> None:
    ledger = clean()
    ledger.events.append(Event("a", "completed", "queued", 2))
    assert check_terminal_never_changes(ledger) == ["a: audit shows completed -> queued"]


def test_more_children_in_flight_than_max_parallel_is_reported() -> None:
    ledger = clean()
    ledger.finals["g"] = Final("g", "t", "completed", 0, 0, kind="group", max_parallel=1)
    ledger.events += [
        Event("c1", "held", "queued", parent_id="g"),
        Event("c2", "held", "queued", parent_id="g"),
        Event("c1", "queued", "completed", parent_id="g"),
    ]
    assert check_group_parallelism(ledger) == ["g: 2 children in flight > max_parallel 1"]


def test_children_released_one_by_one_keep_max_parallel() -> None:
    ledger = clean()
    ledger.finals["g"] = Final("g", "t", "completed", 0, 0, kind="group", max_parallel=1)
    ledger.events += [
        Event("c1", "held", "queued", parent_id="g"),
        Event("c1", "queued", "completed", parent_id="g"),
        Event("c2", "held", "queued", parent_id="g"),
    ]
    assert check_group_parallelism(ledger) == []


def test_a_live_counter_off_the_live_jobs_is_reported() -> None:
    ledger = clean()
    ledger.counters = {"t": 1, "*": 1}
    assert check_admission_counters(ledger) == [
        "tenant t: live counter 1 != 0 live jobs",
        "live_total 1 != 0 live jobs",
    ]


def test_doubled_counts_jobs_finished_twice() -> None:
    ledger = clean()
    assert doubled(ledger) == 0
    ledger.events.append(Event("a", "processing", "failed", 2))
    assert doubled(ledger) == 1


def test_recovery_time_runs_from_the_kill_to_the_next_attempt() -> None:
    assert recovery_times(clean()) == [1.0]


def test_percentile_is_nearest_rank() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0
    assert percentile([], 0.99) == 0.0


def test_recovery_of_a_frozen_worker_runs_from_the_sigstop() -> None:
    ledger = clean()
    ledger.attempts[0] = dataclasses.replace(ledger.attempts[0], end=5.0, outcome="stopped")
    ledger.stops = [Stop("w1", 2.5, "SIGSTOP")]
    assert recovery_times(ledger) == [0.5]


def test_a_drained_worker_needs_no_recovery() -> None:
    ledger = clean()
    ledger.attempts[0] = dataclasses.replace(ledger.attempts[0], end=2.5, outcome="completed")
    ledger.stops = [Stop("w1", 2.0, "SIGTERM")]
    assert recovery_times(ledger) == []


def test_a_claim_that_never_reached_its_live_worker_is_reported() -> None:
    ledger = clean()
    del ledger.attempts[1]  # w2 (never faulted) was granted attempt 2 but never ran it
    assert check_claims_reach_their_worker(ledger) == [
        "a: attempt 2 was granted to w2 but never ran there"
    ]


def test_a_claim_lost_with_its_killed_worker_is_no_orphan() -> None:
    ledger = clean()
    del ledger.attempts[0]  # w1 was SIGKILLed: its claim may die with it
    assert check_claims_reach_their_worker(ledger) == []


def released() -> Ledger:
    """Job b: its first claim (by w3) was given back by a release, then it ran on w2."""
    ledger = clean()
    ledger.accepted.add("b")
    ledger.attempts.append(Attempt("b", 1, "L4", "w2", start=6.0, end=6.5, outcome="completed"))
    ledger.calls.append(Call("Submit", "b", 5.5, 5.6, status="queued"))
    ledger.finals["b"] = Final("b", "t", "completed", attempts=1, max_attempts=3)
    ledger.events += [
        Event("b", "", "queued"),
        Event("b", "queued", "processing", 1, worker_id="w3"),
        Event("b", "processing", "queued", 0),  # release.lua: the attempt taken back
        Event("b", "queued", "processing", 1, worker_id="w2"),
        Event("b", "processing", "completed", 1),
    ]
    ledger.workers.add("w3")
    return ledger


def test_a_released_claim_is_neither_a_retry_nor_an_orphan() -> None:
    assert check_all(released(), extra=EXTRA_CHECKS) == []


def test_a_requeue_that_keeps_the_attempt_is_still_counted_as_a_retry() -> None:
    ledger = released()
    ledger.events[-3] = Event("b", "processing", "queued", 1)  # a retry, not a release
    assert check_attempts(ledger) == ["b: attempts 1 != 1 + 0 expiries + 1 retries"]


def test_a_job_that_died_with_a_poisoned_worker_may_run_again_at_once() -> None:
    ledger = clean()
    ledger.stops = []  # w1 was not killed by the harness: a poison job on it killed it
    ledger.accepted.add("p")
    ledger.attempts.append(Attempt("p", 1, "L9", "w1", start=1.5, end=2.0, outcome="poison"))
    # job a's attempt 1 ran on w1 too and never ended; attempt 2 starts on w2 at 3.0
    assert check_leases_exclusive(ledger) == []


def test_an_attempt_still_running_on_a_live_worker_is_not_excused() -> None:
    ledger = clean()
    ledger.stops = []
    ledger.attempts.append(Attempt("p", 1, "L9", "w3", start=1.5, end=2.0, outcome="poison"))
    assert check_leases_exclusive(ledger) == [
        "a: attempt 1 (lease L1) still ran when attempt 2 started, and was never refused LEASE_LOST"
    ]


def test_the_figures_table_has_one_row_per_scenario() -> None:
    document = {
        "mode": "short",
        "scenarios": [
            {
                "scenario": "worker SIGKILL",
                "jobs": 10,
                "faults": 2,
                "lost": 0,
                "doubled": 0,
                "recovery_p99": 1.234,
                "notes": {"refused": 2},
            }
        ],
    }
    assert table(document).splitlines()[-1] == (
        "| worker SIGKILL | 10 | 2 | 0 | 0 | 1.23 s | refused: 2 |"
    )


def placed() -> Ledger:
    """The clean ledger with job a bound to pool onprem, run by onprem workers."""
    ledger = clean()
    ledger.finals["a"] = dataclasses.replace(ledger.finals["a"], pool="onprem")
    ledger.worker_pools = {"w1": "onprem", "w2": "onprem"}
    ledger.bindings = {"a": "onprem"}
    return ledger


def test_a_ledger_whose_claims_kept_to_their_pools_passes_the_placement_checks() -> None:
    assert check_placement(placed()) == []
    assert check_bindings(placed()) == []


def test_a_job_claimed_by_a_worker_of_another_pool_is_a_placement_violation() -> None:
    ledger = placed()
    ledger.worker_pools["w2"] = "cloud"
    assert check_placement(ledger) == [
        "a: bound to pool 'onprem', claimed by w2 of pool 'cloud'",
        "a: bound to pool 'onprem', ran on w2 of pool 'cloud'",
    ]


def test_a_handler_run_of_another_pools_job_is_a_violation_without_a_claim_event() -> None:
    ledger = placed()
    ledger.attempts.append(Attempt("a", 3, "L3", "w3", start=5.0, end=5.5))
    ledger.worker_pools["w3"] = "edge"
    assert check_placement(ledger) == ["a: bound to pool 'onprem', ran on w3 of pool 'edge'"]


def test_an_any_pool_job_may_be_claimed_by_a_worker_of_any_pool() -> None:
    ledger = placed()
    ledger.finals["a"] = dataclasses.replace(ledger.finals["a"], pool="")
    ledger.worker_pools = {"w1": "edge", "w2": "cloud"}
    assert check_placement(ledger) == []


def test_a_claim_by_a_worker_of_no_known_pool_is_reported() -> None:
    ledger = placed()
    del ledger.worker_pools["w1"]
    assert check_placement(ledger) == [
        "a: claimed by 'w1', a worker of no known pool",
        "a: ran on 'w1', a worker of no known pool",
    ]


def test_a_group_parent_starting_with_its_first_child_is_no_claim() -> None:
    ledger = placed()
    ledger.accepted.add("g")
    ledger.finals["g"] = Final("g", "t", "completed", 0, 3, kind="group")
    ledger.events += [Event("g", "", "queued"), Event("g", "queued", "processing")]
    assert check_placement(ledger) == []
    assert claims_per_pool(ledger) == {"onprem": 2}


def test_a_job_bound_to_another_pool_than_its_request_asked_is_reported() -> None:
    ledger = placed()
    ledger.bindings["a"] = "edge"
    assert check_bindings(ledger) == ["a: bound to pool 'onprem', expected 'edge'"]


def test_claims_are_counted_by_the_claiming_workers_pool() -> None:
    ledger = placed()
    ledger.worker_pools["w2"] = "edge"
    assert claims_per_pool(ledger) == {"edge": 1, "onprem": 1}
