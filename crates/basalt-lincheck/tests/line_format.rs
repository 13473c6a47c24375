//! The line format a recorder in any language writes, and the
//! `basalt-lincheck` binary that checks it.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use basalt_lincheck::{
    check, parse_history, Counter, CounterInput, Error, Operation, Options, Register,
    RegisterInput, RegisterOutput, Verdict,
};
use common::*;

const REGISTER_HISTORY: &str = r#"
# client key invoked returned op args -> output
1 user:7 100 180 write alice -> ok
2 user:7 150 210 read -> alice
3 user:7 160 - write bob
3 user:7 170 - write bob2 -> ?
2 user:7 220 260 del -> 1
2 user:7 270 275 read
1 "user 8" 300 340 cas nil "carol \"d\"" -> true
1 "user 8" 350 360 read -> "carol \"d\""
1 nilkey 400 410 write "nil" -> OK
1 nilkey 420 430 read -> nil
"#;

#[test]
fn register_lines_parse_into_operations() {
    let history = parse_history(&Register, REGISTER_HISTORY).unwrap();
    let expected: Vec<RegisterOp> = vec![
        write(1, "user:7", 100, 180, "alice"),
        read(2, "user:7", 150, 210, Some("alice")),
        lost_write(3, "user:7", 160, "bob"),
        lost_write(3, "user:7", 170, "bob2"),
        del(2, "user:7", 220, 260, true),
        Operation {
            output: None,
            ..read(2, "user:7", 270, 275, None)
        },
        cas(1, "user 8", 300, 340, None, "carol \"d\"", true),
        read(1, "user 8", 350, 360, Some("carol \"d\"")),
        write(1, "nilkey", 400, 410, "nil"),
        read(1, "nilkey", 420, 430, None),
    ];
    assert_eq!(history, expected);
    // A read of nil after writing the text "nil" is a violation.
    match check(&Register, &history, &Options::default()).unwrap() {
        Verdict::NotLinearizable { key, op: 9, .. } => assert_eq!(key, "nilkey"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn counter_lines_parse_into_operations() {
    let text = "1 c 0 10 incr 5 -> 5\n2 c 20 30 read -> 5\n2 d 0 1 read -> nil\n3 c 40 - incr -2\n";
    let history = parse_history(&Counter, text).unwrap();
    assert_eq!(
        history,
        [
            incr(1, "c", 0, 10, 5, 5),
            count(2, "c", 20, 30, 5),
            count(2, "d", 0, 1, 0),
            Operation::lost(3, "c", 40, CounterInput::Incr(-2)),
        ]
    );
}

#[test]
fn described_operations_read_back_as_the_same_operations() {
    // Explanations print operations in the line format, so a failing
    // history can be cut down and rechecked with the binary.
    let ops = [
        (
            RegisterInput::Read,
            Some(RegisterOutput::Value(Some("a b".to_string()))),
        ),
        (
            RegisterInput::Write("nil".to_string()),
            Some(RegisterOutput::Ok),
        ),
        (RegisterInput::Delete, Some(RegisterOutput::Deleted(false))),
        (
            RegisterInput::CompareAndSet {
                expected: None,
                new: "\\x\n".to_string(),
            },
            Some(RegisterOutput::Swapped(true)),
        ),
        (RegisterInput::Read, None),
    ];
    for (input, output) in ops {
        use basalt_lincheck::Model as _;
        let line = format!("1 k 0 5 {}", Register.describe_op(&input, output.as_ref()));
        let parsed = parse_history(&Register, &line).unwrap();
        assert_eq!(
            (&parsed[0].input, &parsed[0].output),
            (&input, &output),
            "{line}"
        );
    }
}

#[test]
fn malformed_lines_are_errors_that_name_the_line() {
    let cases = [
        (
            "1 k 0 10 write a -> ok\n1 k 5 x read -> a",
            2,
            "response time",
        ),
        ("1 k 0 10 frob -> ok", 1, "unknown register operation"),
        ("1 k 0 10 write -> ok", 1, "takes 1 argument"),
        ("1 k 0 10 read -> a b", 1, "one output"),
        ("1 k 0 - read -> a", 1, "without a response"),
        ("1 k 0 10 del -> maybe", 1, "`del` answers"),
        ("1 k 0 10 write a -> yes", 1, "answers ok"),
        ("1 k 0", 1, "expected `client key"),
        ("\n\n1 \"k 0 10 read", 3, "unterminated"),
    ];
    for (text, line, message) in cases {
        match parse_history(&Register, text) {
            Err(Error::Parse { line: at, reason }) => {
                assert_eq!(at, line, "{text:?}: {reason}");
                assert!(reason.contains(message), "{text:?}: {reason}");
            }
            other => panic!("{text:?} parsed: {other:?}"),
        }
    }
}

fn run_cli(args: &[&str], stdin: &str) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt-lincheck"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap(), text)
}

#[test]
fn cli_exits_zero_for_a_linearizable_file() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("lincheck-ok.txt");
    std::fs::write(&path, "1 k 0 10 write a -> ok\n2 k 20 30 read -> a\n").unwrap();
    let (code, out) = run_cli(&[path.to_str().unwrap()], "");
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("linearizable"), "{out}");
}

#[test]
fn cli_exits_one_and_explains_a_violation() {
    let (code, out) = run_cli(&["-"], "1 k 0 10 write a -> ok\n2 k 20 30 read -> nil\n");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("NOT linearizable: key k: no valid order explains the response of #1"),
        "{out}"
    );
}

#[test]
fn cli_exits_two_when_the_budget_runs_out() {
    let mut text: String = (0..30)
        .map(|i| format!("{i} k {i} 1000 write v{i} -> ok\n"))
        .collect();
    text.push_str("99 k 2000 2010 read -> ghost\n");
    let (code, out) = run_cli(&["--max-steps", "50000", "-"], &text);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("unknown:"), "{out}");
}

#[test]
fn cli_checks_counters_with_the_counter_model() {
    let (code, out) = run_cli(
        &["--model", "counter", "-"],
        "1 c 0 10 incr 1 -> 1\n2 c 20 30 incr 1 -> 1\n",
    );
    assert_eq!(code, 1, "{out}");
}

#[test]
fn cli_exits_three_on_unreadable_input() {
    let (code, out) = run_cli(&["-"], "1 k 0 10 frob\n");
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("line 1"), "{out}");
    let (code, _) = run_cli(&["--model", "queue", "-"], "");
    assert_eq!(code, 3);
    let (code, _) = run_cli(&["/nonexistent/history.txt"], "");
    assert_eq!(code, 3);
}
