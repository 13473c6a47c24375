//! Histories no correct server can produce are rejected, and the verdict
//! names the key and the operation whose reply cannot be explained.

mod common;

use basalt_lincheck::{
    check, Counter, Error, Operation, Options, Register, RegisterInput, RegisterOutput, Verdict,
};
use common::*;

/// Asserts the history is rejected on `key` at operation `op`, and returns
/// the explanation.
#[track_caller]
fn assert_rejected<M: basalt_lincheck::Model>(
    model: &M,
    history: &[Operation<M::Input, M::Output>],
    key: &str,
    op: usize,
) -> String {
    match check(model, history, &Options::default()).expect("valid history") {
        Verdict::NotLinearizable {
            key: found_key,
            op: found_op,
            explanation,
        } => {
            assert_eq!((found_key.as_str(), found_op), (key, op), "{explanation}");
            explanation
        }
        other => panic!("expected a violation on {key:?} at op #{op}, got {other:?}"),
    }
}

#[test]
fn stale_read_after_a_completed_write_is_rejected() {
    // The split-brain read: client 1's write was acknowledged by the new
    // leader; client 2, later, reads the previous value from the old one.
    let history = [
        write(1, "k", 0, 10, "old"),
        write(1, "k", 20, 30, "new"),
        read(2, "k", 40, 50, Some("old")),
    ];
    let explanation = assert_rejected(&Register, &history, "k", 2);
    assert!(
        explanation.contains("#2 client 2 [40, 50] read -> old"),
        "{explanation}"
    );
    assert!(explanation.contains("=> new"), "{explanation}");
}

#[test]
fn read_of_a_value_never_written_is_rejected() {
    let history = [
        write(1, "k", 0, 10, "a"),
        read(2, "k", 5, 15, Some("ghost")),
    ];
    assert_rejected(&Register, &history, "k", 1);
}

#[test]
fn read_going_back_in_time_is_rejected() {
    // Both reads overlap the write, but they do not overlap each other: once
    // a read saw "b", a later read cannot see "a" again.
    let history = [
        write(1, "k", 0, 10, "a"),
        write(1, "k", 20, 100, "b"),
        read(2, "k", 30, 40, Some("b")),
        read(3, "k", 50, 60, Some("a")),
    ];
    assert_rejected(&Register, &history, "k", 3);
}

#[test]
fn counter_increment_skipping_a_value_is_rejected() {
    let history = [incr(1, "c", 0, 10, 1, 1), incr(1, "c", 20, 30, 1, 3)];
    assert_rejected(&Counter, &history, "c", 1);
}

#[test]
fn counter_increment_repeating_a_value_is_rejected() {
    // Two concurrent increments both claim to have made the counter 1.
    let history = [incr(1, "c", 0, 10, 1, 1), incr(2, "c", 5, 15, 1, 1)];
    let explanation = assert_rejected(&Counter, &history, "c", 1);
    assert!(
        explanation.contains("#0 client 1 [0, 10] incr 1 -> 1"),
        "{explanation}"
    );
}

#[test]
fn counter_read_below_a_completed_increment_is_rejected() {
    let history = [
        incr(1, "c", 0, 10, 5, 5),
        incr(1, "c", 20, 30, 1, 6),
        count(2, "c", 40, 50, 5),
    ];
    assert_rejected(&Counter, &history, "c", 2);
}

#[test]
fn lost_acknowledged_write_is_rejected() {
    // "v2" was acknowledged; after a failover every read sees "v1" again.
    let history = [
        write(1, "k", 0, 10, "v1"),
        write(1, "k", 20, 30, "v2"),
        read(2, "k", 1000, 1010, Some("v1")),
        read(3, "k", 1020, 1030, Some("v1")),
    ];
    assert_rejected(&Register, &history, "k", 2);
}

#[test]
fn acknowledged_write_lost_entirely_is_rejected() {
    let history = [write(1, "k", 0, 10, "v1"), read(2, "k", 1000, 1010, None)];
    assert_rejected(&Register, &history, "k", 1);
}

#[test]
fn delete_answering_one_twice_for_one_write_is_rejected() {
    let history = [
        write(1, "k", 0, 10, "a"),
        del(2, "k", 20, 30, true),
        del(3, "k", 25, 35, true),
    ];
    // Whichever delete is ordered second answers 1 wrongly; the search
    // reaches the later return first.
    assert_rejected(&Register, &history, "k", 2);
}

#[test]
fn set_if_absent_succeeding_twice_is_rejected() {
    let history = [
        cas(1, "k", 0, 10, None, "a", true),
        cas(2, "k", 5, 15, None, "b", true),
    ];
    assert_rejected(&Register, &history, "k", 1);
}

#[test]
fn lost_write_cannot_explain_a_read_before_it_was_invoked() {
    let history = [read(2, "k", 0, 10, Some("a")), lost_write(1, "k", 20, "a")];
    assert_rejected(&Register, &history, "k", 0);
}

#[test]
fn explanation_shows_concurrent_operations_and_pending_ones() {
    let history = [
        write(1, "k", 0, 10, "a"),
        lost_write(4, "k", 12, "z"),
        write(2, "k", 20, 40, "b"),
        read(3, "k", 30, 50, Some("c")),
    ];
    let explanation = assert_rejected(&Register, &history, "k", 3);
    assert!(
        explanation.starts_with("key k: no valid order explains the response of #3"),
        "{explanation}"
    );
    assert!(
        explanation.contains("(4 operations, 1 of them pending)"),
        "{explanation}"
    );
    assert!(
        explanation.contains("operations concurrent with #3:"),
        "{explanation}"
    );
    assert!(
        explanation.contains("#2 client 2 [20, 40] write b -> ok"),
        "{explanation}"
    );
    assert!(
        explanation.contains("#1 client 4 [12, -] write z -> ?"),
        "{explanation}"
    );
}

#[test]
fn explanation_names_the_smallest_failing_prefix_not_the_end_of_the_history() {
    // The violation is the third operation; a hundred valid ones follow.
    let mut history = vec![
        write(1, "k", 0, 10, "a"),
        write(1, "k", 20, 30, "b"),
        read(2, "k", 40, 50, Some("a")),
    ];
    for i in 0..100u64 {
        history.push(write(1, "k", 100 + 20 * i, 110 + 20 * i, &format!("x{i}")));
    }
    let explanation = assert_rejected(&Register, &history, "k", 2);
    assert!(
        explanation.contains("(3 operations, 0 of them pending)"),
        "{explanation}"
    );
}

#[test]
fn return_before_invocation_is_an_error_not_a_verdict() {
    let history = [write(1, "k", 10, 5, "a")];
    let err = check(&Register, &history, &Options::default()).unwrap_err();
    assert!(
        matches!(err, Error::InvalidOperation { index: 0, .. }),
        "{err}"
    );
}

#[test]
fn reply_of_the_wrong_kind_is_an_error_not_a_verdict() {
    let history = [
        write(1, "k", 0, 5, "a"),
        Operation::completed(1, "k", 6, 7, RegisterInput::Read, RegisterOutput::Ok),
    ];
    let err = check(&Register, &history, &Options::default()).unwrap_err();
    assert!(
        matches!(err, Error::InvalidOperation { index: 1, .. }),
        "{err}"
    );
}

#[test]
fn output_without_a_response_is_an_error() {
    let history = [Operation {
        ret: None,
        ..write(1, "k", 0, 5, "a")
    }];
    let err = check(&Register, &history, &Options::default()).unwrap_err();
    assert!(
        matches!(err, Error::InvalidOperation { index: 0, .. }),
        "{err}"
    );
}
