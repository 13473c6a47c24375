//! A history whose search explodes is answered `Unknown` within the budget,
//! so a test fed a pathological history fails fast instead of hanging.

mod common;

use std::time::{Duration, Instant};

use basalt_lincheck::{check, Options, Register, Verdict};
use common::*;

/// Thirty writes, all concurrent, then a read of a value nobody wrote. The
/// memo cannot help: every subset of writes with every last value is a
/// distinct configuration, about 30 * 2^29 of them, and the search must
/// exhaust them before it can call the read impossible.
fn pathological(key: &str) -> Vec<RegisterOp> {
    let mut history: Vec<RegisterOp> = (0..30)
        .map(|i| write(i, key, i, 1_000, &format!("v{i}")))
        .collect();
    history.push(read(99, key, 2_000, 2_010, Some("ghost")));
    history
}

#[test]
fn pathological_history_is_unknown_once_the_step_budget_runs_out() {
    let started = Instant::now();
    let options = Options::default().max_steps(200_000).timeout(None);
    match check(&Register, &pathological("k"), &options).unwrap() {
        Verdict::Unknown { keys, explanation } => {
            assert_eq!(keys, ["k"]);
            assert!(
                explanation.contains("gave up after 200000 search steps"),
                "{explanation}"
            );
        }
        other => panic!("expected unknown, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn pathological_history_is_unknown_once_the_timeout_runs_out() {
    let started = Instant::now();
    let options = Options::default()
        .max_steps(u64::MAX)
        .timeout(Some(Duration::from_millis(300)));
    let verdict = check(&Register, &pathological("k"), &options).unwrap();
    let elapsed = started.elapsed();
    assert!(matches!(verdict, Verdict::Unknown { .. }), "{verdict:?}");
    assert_eq!(verdict.exit_code(), 2);
    assert!(
        elapsed >= Duration::from_millis(300),
        "returned after only {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[test]
fn pathological_history_is_unknown_once_the_memo_is_full() {
    let options = Options::default().timeout(None).max_memo_bytes(1 << 20);
    match check(&Register, &pathological("k"), &options).unwrap() {
        Verdict::Unknown { explanation, .. } => {
            assert!(explanation.contains("memo outgrew 1 MiB"), "{explanation}")
        }
        other => panic!("expected unknown, got {other:?}"),
    }
}

#[test]
fn undecided_key_does_not_hide_a_violation_on_another_key() {
    // "a" sorts first and exhausts its budget; "b" is still checked.
    let mut history = pathological("a");
    history.push(write(1, "b", 0, 10, "x"));
    history.push(read(2, "b", 20, 30, None));
    let options = Options::default().max_steps(100_000);
    match check(&Register, &history, &options).unwrap() {
        Verdict::NotLinearizable { key, op, .. } => assert_eq!((key.as_str(), op), ("b", 32)),
        other => panic!("expected the violation on b, got {other:?}"),
    }
}

#[test]
fn valid_keys_beside_an_undecided_one_leave_the_verdict_unknown() {
    let mut history = pathological("a");
    history.push(write(1, "b", 0, 10, "x"));
    history.push(read(2, "b", 20, 30, Some("x")));
    let options = Options::default().max_steps(100_000);
    match check(&Register, &history, &options).unwrap() {
        Verdict::Unknown { keys, .. } => assert_eq!(keys, ["a"]),
        other => panic!("expected unknown, got {other:?}"),
    }
}
