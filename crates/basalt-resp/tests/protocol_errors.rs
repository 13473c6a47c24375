//! Every protocol error Redis 7.0 sends for a malformed request, triggered by
//! the input that triggers it in Redis, with the exact message; and the
//! inputs Redis tolerates, tolerated.

use basalt_resp::{Error, Limits, Parsed, RequestParser};

/// Parses `input` in one go: the first command's args, `Ok(None)` when
/// incomplete.
fn parse_once(limits: Limits, input: &[u8]) -> Result<Option<Vec<Vec<u8>>>, Error> {
    let mut parser = RequestParser::new(limits);
    match parser.parse(input)? {
        Parsed::Command { args, .. } => Ok(Some(args.to_vec())),
        Parsed::Incomplete { .. } => Ok(None),
    }
}

/// Feeds `input` one byte at a time, dropping consumed bytes, and returns the
/// first error.
fn error_byte_by_byte(limits: Limits, input: &[u8]) -> Option<Error> {
    let mut parser = RequestParser::new(limits);
    let mut buf = Vec::new();
    for &b in input {
        buf.push(b);
        loop {
            match parser.parse(&buf) {
                Err(e) => return Some(e),
                Ok(Parsed::Command { consumed, .. }) => {
                    buf.drain(..consumed);
                }
                Ok(Parsed::Incomplete { consumed }) => {
                    buf.drain(..consumed);
                    break;
                }
            }
        }
    }
    None
}

fn unauthenticated() -> Limits {
    Limits {
        authenticated: false,
        ..Limits::default()
    }
}

/// Asserts `input` fails with `message`, whole and fed byte by byte.
#[track_caller]
fn assert_error(limits: Limits, input: &[u8], message: &str) {
    let whole = parse_once(limits, input).expect_err("should be a protocol error");
    assert_eq!(whole.to_string(), message);
    assert_eq!(error_byte_by_byte(limits, input), Some(whole));
}

#[test]
fn negative_multibulk_length_is_an_empty_command_that_is_skipped() {
    let input = b"*-10\r\n*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n";
    assert_eq!(
        parse_once(Limits::default(), input).unwrap(),
        Some(vec![b"PING".to_vec()])
    );
}

#[test]
fn multibulk_count_beyond_int_max_is_invalid_multibulk_length() {
    let msg = "Protocol error: invalid multibulk length";
    assert_error(Limits::default(), b"*3000000000\r\n", msg);
    assert_error(Limits::default(), b"*2147483648\r\n", msg);
    assert_error(Limits::default(), b"*99999999999999999999\r\n", msg);
}

#[test]
fn multibulk_count_that_is_not_a_canonical_integer_is_invalid() {
    let msg = "Protocol error: invalid multibulk length";
    for input in [
        &b"*\r\n"[..],
        b"*abc\r\n",
        b"*+1\r\n",
        b"*01\r\n",
        b"*-0\r\n",
        b"*1 \r\n",
    ] {
        assert_error(Limits::default(), input, msg);
    }
}

#[test]
fn multibulk_count_of_int_max_waits_without_allocating() {
    assert_eq!(
        parse_once(Limits::default(), b"*2147483647\r\n").unwrap(),
        None
    );
    assert_eq!(
        parse_once(Limits::default(), b"*1000000\r\n$1\r\na\r\n").unwrap(),
        None
    );
}

#[test]
fn count_line_over_64kb_without_cr_is_too_big_mbulk_count_string() {
    let mut input = b"*".to_vec();
    input.resize(64 * 1024 + 1, b'1');
    assert_error(
        Limits::default(),
        &input,
        "Protocol error: too big mbulk count string",
    );
    // Exactly 64 KB is still waited on.
    assert_eq!(
        parse_once(Limits::default(), &input[..64 * 1024]).unwrap(),
        None
    );
}

#[test]
fn wrong_argument_header_is_expected_dollar_got() {
    // Redis's own test case ("Wrong multibulk payload header").
    assert_error(
        Limits::default(),
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
        "Protocol error: expected '$', got 'f'",
    );
    // Redis turns a CR inside an error message into a space.
    assert_error(
        Limits::default(),
        b"*1\r\n\r\n",
        "Protocol error: expected '$', got ' '",
    );
    assert_error(
        Limits::default(),
        b"*1\r\n:1\r\n",
        "Protocol error: expected '$', got ':'",
    );
}

#[test]
fn bulk_length_line_over_64kb_without_cr_is_too_big_bulk_count_string() {
    let mut input = b"*1\r\n$".to_vec();
    input.resize(4 + 64 * 1024 + 1, b'1');
    assert_error(
        Limits::default(),
        &input,
        "Protocol error: too big bulk count string",
    );
}

#[test]
fn bulk_length_negative_or_beyond_512mb_is_invalid_bulk_length() {
    let msg = "Protocol error: invalid bulk length";
    assert_error(Limits::default(), b"*1\r\n$2000000000\r\n", msg);
    // A header announcing 1 GB.
    assert_error(Limits::default(), b"*1\r\n$1073741824\r\n", msg);
    assert_error(Limits::default(), b"*1\r\n$536870913\r\n", msg);
    assert_error(
        Limits::default(),
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n",
        msg,
    );
    assert_error(Limits::default(), b"*1\r\n$-1\r\n", msg);
    assert_error(Limits::default(), b"*1\r\n$x\r\n", msg);
    assert_error(Limits::default(), b"*1\r\n$9223372036854775808\r\n", msg);
    // Exactly proto-max-bulk-len is accepted (and waited on).
    assert_eq!(
        parse_once(Limits::default(), b"*1\r\n$536870912\r\nabc").unwrap(),
        None
    );
}

#[test]
fn a_lower_proto_max_bulk_len_is_honoured() {
    let limits = Limits {
        max_bulk_len: 3,
        ..Limits::default()
    };
    assert_eq!(
        parse_once(limits, b"*1\r\n$3\r\nabc\r\n").unwrap(),
        Some(vec![b"abc".to_vec()])
    );
    assert_error(
        limits,
        b"*1\r\n$4\r\n",
        "Protocol error: invalid bulk length",
    );
}

#[test]
fn inline_line_over_64kb_is_too_big_inline_request() {
    let input = vec![b'A'; 64 * 1024 + 1];
    assert_error(
        Limits::default(),
        &input,
        "Protocol error: too big inline request",
    );
    // The limit holds even when the newline arrives in the same read (Redis's
    // answer then depends on read sizes; ours does not).
    let mut with_newline = vec![b'A'; 100 * 1024];
    with_newline.extend_from_slice(b"\r\n");
    assert_error(
        Limits::default(),
        &with_newline,
        "Protocol error: too big inline request",
    );
    // 64 KB exactly is a command.
    let mut ok = vec![b'A'; 64 * 1024];
    ok.push(b'\n');
    assert_eq!(
        parse_once(Limits::default(), &ok).unwrap(),
        Some(vec![vec![b'A'; 64 * 1024]])
    );
}

#[test]
fn unterminated_quote_is_unbalanced_quotes_in_request() {
    let msg = "Protocol error: unbalanced quotes in request";
    for input in [
        &b"SET k \"abc\r\n"[..],
        b"SET k 'abc\r\n",
        b"SET k \"abc\"def\r\n",
        b"SET k 'abc'def\r\n",
        b"\"\\\r\n",
    ] {
        assert_error(Limits::default(), input, msg);
    }
}

#[test]
fn unauthenticated_clients_get_redis_fixed_limits() {
    // Redis's own test inputs.
    assert_error(
        unauthenticated(),
        b"*100\r\n",
        "Protocol error: unauthenticated multibulk length",
    );
    assert_error(
        unauthenticated(),
        b"*1\r\n$100000000\r\n",
        "Protocol error: unauthenticated bulk length",
    );
    assert_error(
        unauthenticated(),
        b"*11\r\n",
        "Protocol error: unauthenticated multibulk length",
    );
    assert_error(
        unauthenticated(),
        b"*1\r\n$16385\r\n",
        "Protocol error: unauthenticated bulk length",
    );
    // The general checks come first, as in Redis.
    assert_error(
        unauthenticated(),
        b"*1\r\n$1073741824\r\n",
        "Protocol error: invalid bulk length",
    );
    // At the limits: fine. Negative counts are still skipped.
    assert_eq!(parse_once(unauthenticated(), b"*10\r\n").unwrap(), None);
    assert_eq!(
        parse_once(unauthenticated(), b"*1\r\n$16384\r\n").unwrap(),
        None
    );
    assert_eq!(
        parse_once(unauthenticated(), b"*-100\r\n*1\r\n$4\r\nAUTH\r\n").unwrap(),
        Some(vec![b"AUTH".to_vec()])
    );
}

#[test]
fn authenticating_lifts_the_limits_for_later_commands() {
    let mut parser = RequestParser::new(unauthenticated());
    let input = b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*1\r\n$20000\r\n";
    let consumed = match parser.parse(input).unwrap() {
        Parsed::Command { consumed, .. } => consumed,
        other => panic!("{other:?}"),
    };
    parser.limits_mut().authenticated = true;
    assert!(matches!(
        parser.parse(&input[consumed..]).unwrap(),
        Parsed::Incomplete { consumed: 0 }
    ));
}

#[test]
fn redis_skips_the_two_bytes_after_a_payload_without_checking_them() {
    // Redis does not verify the CRLF after a bulk payload; neither do we.
    assert_eq!(
        parse_once(Limits::default(), b"*1\r\n$4\r\nPINGxx").unwrap(),
        Some(vec![b"PING".to_vec()])
    );
}
