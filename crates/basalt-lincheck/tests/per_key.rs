//! Keys are checked independently: a violation on one key among many valid
//! ones is found and named, and operations on different keys never
//! constrain each other.

mod common;

use basalt_lincheck::{check, Options, Register, Verdict};
use common::*;

#[test]
fn violation_on_one_key_among_many_valid_keys_is_found_and_named() {
    let workload = Workload {
        clients: 6,
        keys: 100,
        ops: 3_000,
        lost_percent: 2,
        max_latency: 20,
    };
    let mut history = simulate_register(3, &workload);
    assert_eq!(
        check(&Register, &history, &Options::default()).unwrap(),
        Verdict::Linearizable
    );

    // A stale read on a key of its own, in the middle of the history.
    let t = 10_000_000;
    history.push(write(50, "victim", t, t + 10, "old"));
    history.push(write(50, "victim", t + 20, t + 30, "new"));
    history.push(read(51, "victim", t + 40, t + 50, Some("old")));
    let stale = history.len() - 1;
    history.rotate_right(1_500);
    let stale = (stale + 1_500) % history.len();

    match check(&Register, &history, &Options::default()).unwrap() {
        Verdict::NotLinearizable {
            key,
            op,
            explanation,
        } => {
            assert_eq!(key, "victim");
            assert_eq!(op, stale);
            assert!(explanation.starts_with("key victim:"), "{explanation}");
        }
        other => panic!("the stale read was not found: {other:?}"),
    }
}

#[test]
fn operations_on_different_keys_do_not_order_each_other() {
    // On one key this would be a stale read; on two keys it is fine.
    let history = [
        write(1, "a", 0, 10, "x"),
        read(2, "b", 20, 30, None),
        write(1, "b", 40, 50, "y"),
        read(2, "a", 60, 70, Some("x")),
    ];
    assert_eq!(
        check(&Register, &history, &Options::default()).unwrap(),
        Verdict::Linearizable
    );
}

#[test]
fn first_broken_key_in_key_order_is_reported() {
    let history = [
        write(1, "zeta", 0, 10, "a"),
        read(2, "zeta", 20, 30, Some("never")),
        write(1, "alpha", 0, 10, "a"),
        read(2, "alpha", 20, 30, None),
    ];
    match check(&Register, &history, &Options::default()).unwrap() {
        Verdict::NotLinearizable { key, op, .. } => assert_eq!((key.as_str(), op), ("alpha", 3)),
        other => panic!("expected a violation, got {other:?}"),
    }
}
