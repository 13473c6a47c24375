//! A socket wakeup delivers many commands at once: the parser returns each in
//! turn, borrowing arguments from the read buffer, and the replies go into
//! one output buffer.

use basalt_resp::{write_command, Encoder, Limits, Parsed, Protocol, RequestParser};

/// Parses every complete command in `buf` like a server's read loop.
/// Returns the commands and the bytes consumed.
fn parse_all(parser: &mut RequestParser, buf: &[u8]) -> (Vec<Vec<Vec<u8>>>, usize) {
    let mut commands = Vec::new();
    let mut pos = 0;
    // Bounded: every command consumes at least one byte.
    for _ in 0..=buf.len() {
        match parser.parse(&buf[pos..]).expect("valid input") {
            Parsed::Command { args, consumed } => {
                commands.push(args.to_vec());
                pos += consumed;
            }
            Parsed::Incomplete { consumed } => return (commands, pos + consumed),
        }
    }
    unreachable!("parser made no progress");
}

#[test]
fn ten_thousand_pipelined_sets_parse_in_one_pass_without_copying() {
    let mut buf = Vec::new();
    for i in 0..10_000 {
        write_command(
            &mut buf,
            [
                &b"SET"[..],
                format!("key:{i}").as_bytes(),
                format!("value:{i}").as_bytes(),
            ],
        );
    }
    let mut parser = RequestParser::new(Limits::default());
    let buf_range = buf.as_ptr_range();
    let mut pos = 0;
    let mut count = 0;
    let mut out = Vec::new();
    for i in 0..10_001 {
        match parser.parse(&buf[pos..]).unwrap() {
            Parsed::Command { args, consumed } => {
                assert_eq!(args.len(), 3);
                assert_eq!(&args[0], b"SET");
                assert_eq!(args.get(1).unwrap(), format!("key:{i}").as_bytes());
                assert_eq!(args.get(2).unwrap(), format!("value:{i}").as_bytes());
                // Zero copy: arguments point into the read buffer.
                for arg in args {
                    assert!(buf_range.contains(&arg.as_ptr()));
                }
                Encoder::new(&mut out, Protocol::Resp2).simple(b"OK");
                pos += consumed;
                count += 1;
            }
            Parsed::Incomplete { consumed } => {
                pos += consumed;
                break;
            }
        }
    }
    assert_eq!(count, 10_000);
    assert_eq!(pos, buf.len());
    assert_eq!(out, b"+OK\r\n".repeat(10_000));
}

#[test]
fn inline_multibulk_and_empty_commands_mix_in_one_buffer() {
    let buf =
        b"PING\r\n\r\n*0\r\n*1\r\n$4\r\nPING\r\nset k \"a b\"\n*-1\r\n\nGET k\r\n*2\r\n$3\r\nGET";
    let mut parser = RequestParser::new(Limits::default());
    let (commands, consumed) = parse_all(&mut parser, buf);
    let expected: Vec<Vec<Vec<u8>>> = vec![
        vec![b"PING".to_vec()],
        vec![b"PING".to_vec()],
        vec![b"set".to_vec(), b"k".to_vec(), b"a b".to_vec()],
        vec![b"GET".to_vec(), b"k".to_vec()],
    ];
    assert_eq!(commands, expected);
    // The partial GET stays in the buffer.
    assert_eq!(&buf[consumed..], b"*2\r\n$3\r\nGET");
}

#[test]
fn a_buffer_of_only_empty_commands_is_consumed_entirely() {
    let buf = b"\r\n\n*0\r\n*-5\r\n   \r\n";
    let mut parser = RequestParser::new(Limits::default());
    match parser.parse(buf).unwrap() {
        Parsed::Incomplete { consumed } => assert_eq!(consumed, buf.len()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn replies_for_a_pipeline_append_to_one_buffer() {
    let mut out = Vec::new();
    let mut e = Encoder::new(&mut out, Protocol::Resp2);
    e.simple(b"OK");
    e.bulk(b"v");
    e.null();
    e.integer(-42);
    e.error(b"ERR unknown command 'FOO', with args beginning with: ");
    assert_eq!(
        out,
        b"+OK\r\n$1\r\nv\r\n$-1\r\n:-42\r\n-ERR unknown command 'FOO', with args beginning with: \r\n"
    );
}
