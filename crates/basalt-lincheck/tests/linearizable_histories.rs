//! Histories a correct server can produce are accepted.

mod common;

use basalt_lincheck::{
    check, Counter, CounterInput, Operation, Options, Register, RegisterInput, Verdict,
};
use common::*;

fn register_verdict(history: &[RegisterOp]) -> Verdict {
    check(&Register, history, &Options::default()).expect("valid history")
}

fn counter_verdict(history: &[CounterOp]) -> Verdict {
    check(&Counter, history, &Options::default()).expect("valid history")
}

#[test]
fn empty_history_is_linearizable() {
    assert_eq!(register_verdict(&[]), Verdict::Linearizable);
}

#[test]
fn sequential_register_history_is_linearizable() {
    let history = [
        read(1, "k", 0, 1, None),
        write(1, "k", 2, 3, "a"),
        read(2, "k", 4, 5, Some("a")),
        cas(2, "k", 6, 7, Some("a"), "b", true),
        cas(1, "k", 8, 9, Some("a"), "c", false),
        read(1, "k", 10, 11, Some("b")),
        del(2, "k", 12, 13, true),
        del(1, "k", 14, 15, false),
        cas(1, "k", 16, 17, None, "d", true),
        read(2, "k", 18, 19, Some("d")),
    ];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn overlapping_writes_let_a_later_read_see_either_value() {
    for last in ["a", "b"] {
        let history = [
            write(1, "k", 0, 10, "a"),
            write(2, "k", 5, 15, "b"),
            read(3, "k", 20, 30, Some(last)),
            read(1, "k", 31, 40, Some(last)),
        ];
        assert_eq!(
            register_verdict(&history),
            Verdict::Linearizable,
            "final value {last}"
        );
    }
}

#[test]
fn read_overlapping_a_write_may_see_the_old_or_the_new_value() {
    for seen in [None, Some("a")] {
        let history = [write(1, "k", 0, 10, "a"), read(2, "k", 2, 8, seen)];
        assert_eq!(
            register_verdict(&history),
            Verdict::Linearizable,
            "read saw {seen:?}"
        );
    }
}

#[test]
fn reads_may_flip_while_a_write_is_in_flight_only_once() {
    // Two reads inside the write's interval: old then new is fine.
    let history = [
        write(1, "k", 0, 100, "a"),
        read(2, "k", 10, 20, None),
        read(2, "k", 30, 40, Some("a")),
    ];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn lost_write_that_took_effect_is_accepted() {
    let history = [
        lost_write(1, "k", 0, "a"),
        read(2, "k", 50, 60, Some("a")),
        read(2, "k", 70, 80, Some("a")),
    ];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn lost_write_that_never_took_effect_is_accepted() {
    let history = [
        write(1, "k", 0, 5, "old"),
        lost_write(1, "k", 10, "a"),
        read(2, "k", 50, 60, Some("old")),
        read(2, "k", 1000, 1010, Some("old")),
    ];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn lost_write_may_take_effect_long_after_its_client_moved_on() {
    // The client gave up on "a" and wrote "b"; the delayed "a" lands later.
    let history = [
        lost_write(1, "k", 0, "a"),
        write(1, "k", 100, 110, "b"),
        read(2, "k", 120, 130, Some("b")),
        read(2, "k", 140, 150, Some("a")),
    ];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn lost_delete_and_cas_may_take_effect_or_not() {
    let lost_del = Operation::lost(3, "k", 20, RegisterInput::Delete);
    let lost_cas = Operation::lost(
        4,
        "k",
        25,
        RegisterInput::CompareAndSet {
            expected: None,
            new: "c".to_string(),
        },
    );
    // The delete lands, then the CAS from absent.
    let history = [
        write(1, "k", 0, 10, "a"),
        lost_del.clone(),
        lost_cas.clone(),
        read(2, "k", 100, 110, Some("c")),
    ];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
    // Neither lands.
    let history = [
        write(1, "k", 0, 10, "a"),
        lost_del,
        lost_cas,
        read(2, "k", 100, 110, Some("a")),
    ];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn returned_operation_with_unknown_reply_still_took_effect() {
    let unknown = Operation {
        output: None,
        ..write(1, "k", 0, 10, "a")
    };
    let history = [unknown, read(2, "k", 20, 30, Some("a"))];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn operations_at_equal_timestamps_count_as_concurrent() {
    // The read began at the instant the write returned; with a coarse clock
    // it may have been served first.
    let history = [write(1, "k", 0, 10, "a"), read(2, "k", 10, 20, None)];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn concurrent_set_if_absent_succeeds_for_exactly_one_client() {
    let history = [
        cas(1, "k", 0, 10, None, "a", false),
        cas(2, "k", 1, 11, None, "b", true),
        read(3, "k", 20, 30, Some("b")),
    ];
    assert_eq!(register_verdict(&history), Verdict::Linearizable);
}

#[test]
fn sequential_counter_history_is_linearizable() {
    let history = [
        count(1, "c", 0, 1, 0),
        incr(1, "c", 2, 3, 1, 1),
        incr(2, "c", 4, 5, 5, 6),
        count(2, "c", 6, 7, 6),
        incr(1, "c", 8, 9, -2, 4),
    ];
    assert_eq!(counter_verdict(&history), Verdict::Linearizable);
}

#[test]
fn concurrent_increments_may_return_in_either_order() {
    let history = [
        incr(1, "c", 0, 10, 1, 2),
        incr(2, "c", 1, 11, 1, 1),
        count(3, "c", 20, 30, 2),
    ];
    assert_eq!(counter_verdict(&history), Verdict::Linearizable);
}

#[test]
fn lost_increment_may_count_or_not() {
    for seen in [1, 3] {
        let history = [
            incr(1, "c", 0, 5, 1, 1),
            Operation::lost(2, "c", 6, CounterInput::Incr(2)),
            count(3, "c", 100, 110, seen),
        ];
        assert_eq!(
            counter_verdict(&history),
            Verdict::Linearizable,
            "read {seen}"
        );
    }
}
