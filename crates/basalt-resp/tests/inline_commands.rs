//! Inline commands, as typed into telnet: split like Redis's `sdssplitargs`.

use basalt_resp::{Error, Limits, Parsed, RequestParser};

fn inline(line: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
    let mut parser = RequestParser::new(Limits::default());
    match parser.parse(line)? {
        Parsed::Command { args, consumed } => {
            assert_eq!(consumed, line.len());
            Ok(args.to_vec())
        }
        Parsed::Incomplete { .. } => panic!("incomplete: {}", line.escape_ascii()),
    }
}

fn words(ws: &[&[u8]]) -> Vec<Vec<u8>> {
    ws.iter().map(|w| w.to_vec()).collect()
}

#[test]
fn whitespace_separates_arguments() {
    assert_eq!(
        inline(b"SET  key\tvalue  \r\n").unwrap(),
        words(&[b"SET", b"key", b"value"])
    );
    assert_eq!(inline(b"  PING\n").unwrap(), words(&[b"PING"]));
}

#[test]
fn a_bare_newline_ends_a_line_and_a_lone_cr_separates() {
    assert_eq!(inline(b"GET k\n").unwrap(), words(&[b"GET", b"k"]));
    assert_eq!(inline(b"GET\rk\r\n").unwrap(), words(&[b"GET", b"k"]));
}

#[test]
fn double_quotes_understand_c_escapes_and_hex() {
    assert_eq!(
        inline(b"SET k \"a\\nb\\r\\t\\b\\a\\\\\\\"\"\r\n").unwrap(),
        words(&[b"SET", b"k", b"a\nb\r\t\x08\x07\\\""])
    );
    assert_eq!(
        inline(b"SET k \"\\x00\\xfF\\x41\"\r\n").unwrap(),
        words(&[b"SET", b"k", b"\x00\xffA"])
    );
    // An unknown escape is the character itself; `\x` without two hex
    // digits is `x`.
    assert_eq!(
        inline(b"ECHO \"\\q\\xZZ\"\r\n").unwrap(),
        words(&[b"ECHO", b"qxZZ"])
    );
}

#[test]
fn single_quotes_are_literal_except_for_escaped_quote() {
    assert_eq!(
        inline(b"SET k 'it\\'s \\n \"raw\"'\r\n").unwrap(),
        words(&[b"SET", b"k", b"it's \\n \"raw\""])
    );
}

#[test]
fn empty_quotes_are_an_empty_argument() {
    assert_eq!(
        inline(b"SET k \"\"\r\n").unwrap(),
        words(&[b"SET", b"k", b""])
    );
    assert_eq!(
        inline(b"SET k ''\r\n").unwrap(),
        words(&[b"SET", b"k", b""])
    );
}

#[test]
fn quotes_may_open_inside_an_argument() {
    assert_eq!(
        inline(b"ECHO ab\"c d\"\r\n").unwrap(),
        words(&[b"ECHO", b"abc d"])
    );
}

#[test]
fn closing_quote_must_be_followed_by_space_or_end() {
    assert_eq!(inline(b"ECHO \"a\"b\r\n"), Err(Error::UnbalancedQuotes));
    assert_eq!(inline(b"ECHO 'a'b\r\n"), Err(Error::UnbalancedQuotes));
    assert_eq!(
        inline(b"ECHO \"a\"\tb\r\n").unwrap(),
        words(&[b"ECHO", b"a", b"b"])
    );
}

#[test]
fn unterminated_quotes_are_unbalanced() {
    assert_eq!(inline(b"ECHO \"abc\r\n"), Err(Error::UnbalancedQuotes));
    assert_eq!(inline(b"ECHO 'abc\r\n"), Err(Error::UnbalancedQuotes));
    assert_eq!(
        Error::UnbalancedQuotes.to_string(),
        "Protocol error: unbalanced quotes in request"
    );
}

#[test]
fn a_nul_byte_ends_the_line_as_in_c() {
    assert_eq!(
        inline(b"ECHO a\0 ignored\r\n").unwrap(),
        words(&[b"ECHO", b"a"])
    );
    assert_eq!(inline(b"ECHO \"a\0\"\r\n"), Err(Error::UnbalancedQuotes));
}

#[test]
fn vertical_tab_separates_only_between_arguments() {
    // C's isspace skips \v and \f between arguments, but only space, tab,
    // CR and LF end an unquoted one.
    assert_eq!(
        inline(b"\x0bECHO a\x0bb\r\n").unwrap(),
        words(&[b"ECHO", b"a\x0bb"])
    );
}

#[test]
fn inline_arguments_survive_the_next_parse_call_until_reused() {
    let mut parser = RequestParser::new(Limits::default());
    let buf = b"ECHO \"x y\"\r\nECHO z\r\n";
    let first = match parser.parse(buf).unwrap() {
        Parsed::Command { args, consumed } => {
            assert_eq!(args.to_vec(), words(&[b"ECHO", b"x y"]));
            consumed
        }
        other => panic!("{other:?}"),
    };
    match parser.parse(&buf[first..]).unwrap() {
        Parsed::Command { args, .. } => assert_eq!(args.to_vec(), words(&[b"ECHO", b"z"])),
        other => panic!("{other:?}"),
    }
}
