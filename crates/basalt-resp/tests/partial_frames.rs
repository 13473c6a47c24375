//! Bytes arrive in arbitrary pieces: wherever a stream of commands is split,
//! the parser yields exactly the commands of the unsplit stream.

use basalt_resp::{write_command, Limits, Parsed, RequestParser};
use proptest::collection::vec;
use proptest::prelude::*;

type Command = Vec<Vec<u8>>;

/// Feeds `wire` to a fresh parser in pieces ending at `cuts`, as a server
/// does: append what arrived, parse every complete command, drop consumed
/// bytes. Returns the commands and what is left buffered.
fn serve_in_pieces(wire: &[u8], cuts: &[usize]) -> (Vec<Command>, Vec<u8>) {
    let mut parser = RequestParser::new(Limits::default());
    let mut buf = Vec::new();
    let mut commands = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&wire.len())) {
        buf.extend_from_slice(&wire[start..end.max(start)]);
        start = end.max(start);
        let mut pos = 0;
        // Bounded: each command consumes at least one byte.
        for _ in 0..=buf.len() {
            match parser.parse(&buf[pos..]).expect("valid input") {
                Parsed::Command { args, consumed } => {
                    commands.push(args.to_vec());
                    pos += consumed;
                }
                Parsed::Incomplete { consumed } => {
                    pos += consumed;
                    break;
                }
            }
        }
        buf.drain(..pos);
    }
    (commands, buf)
}

/// One item of a client's stream and the command it should parse to.
#[derive(Debug, Clone)]
enum Item {
    /// `*<n>` of bulk strings; binary-safe.
    Multibulk(Command),
    /// A line of plain words, ended by `\r\n` or by `\n` alone.
    Inline(Command, bool),
    /// A line of double-quoted arguments with every byte `\xHH`-escaped.
    QuotedInline(Command),
    /// Something Redis skips: an empty line, `*0`, `*-1`.
    Empty(&'static [u8]),
}

impl Item {
    fn write(&self, wire: &mut Vec<u8>) {
        match self {
            Item::Multibulk(args) => write_command(wire, args),
            Item::Inline(args, crlf) => {
                wire.extend_from_slice(&args.join(&b' '));
                wire.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
            }
            Item::QuotedInline(args) => {
                for arg in args {
                    wire.push(b'"');
                    for b in arg {
                        wire.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                    }
                    wire.extend_from_slice(b"\" ");
                }
                wire.extend_from_slice(b"\r\n");
            }
            Item::Empty(bytes) => wire.extend_from_slice(bytes),
        }
    }

    fn command(&self) -> Option<&Command> {
        match self {
            Item::Multibulk(c) | Item::Inline(c, _) | Item::QuotedInline(c) => Some(c),
            Item::Empty(_) => None,
        }
    }
}

fn binary_arg() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        Just(0u8),
        Just(b'\r'),
        Just(b'\n'),
        Just(b'$'),
        Just(b'*'),
        Just(b'"'),
        any::<u8>(),
    ];
    prop_oneof![
        8 => vec(byte, 0..24),
        1 => vec(any::<u8>(), 0..3000),
    ]
}

fn word() -> impl Strategy<Value = Vec<u8>> {
    "[a-zA-Z0-9_:.-]{1,10}".prop_map(String::into_bytes)
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        6 => vec(binary_arg(), 1..6).prop_map(Item::Multibulk),
        2 => (vec(word(), 1..5), any::<bool>()).prop_map(|(c, crlf)| Item::Inline(c, crlf)),
        2 => vec(binary_arg(), 1..4).prop_map(Item::QuotedInline),
        1 => prop_oneof![
            Just(&b"\r\n"[..]),
            Just(&b"\n"[..]),
            Just(&b"*0\r\n"[..]),
            Just(&b"*-1\r\n"[..]),
        ]
        .prop_map(Item::Empty),
    ]
}

proptest! {
    #[test]
    fn random_streams_split_at_random_points_parse_like_the_whole(
        items in vec(item(), 1..20),
        cut_points in vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut wire = Vec::new();
        for item in &items {
            item.write(&mut wire);
        }
        let expected: Vec<Command> = items.iter().filter_map(Item::command).cloned().collect();
        let mut cuts: Vec<usize> = cut_points.iter().map(|i| i.index(wire.len() + 1)).collect();
        cuts.sort_unstable();

        let (whole, rest) = serve_in_pieces(&wire, &[]);
        prop_assert_eq!(&whole, &expected);
        prop_assert!(rest.is_empty());

        let (pieces, rest) = serve_in_pieces(&wire, &cuts);
        prop_assert_eq!(&pieces, &expected);
        prop_assert!(rest.is_empty());
    }
}

fn sample_stream() -> (Vec<u8>, Vec<Command>) {
    let items = [
        Item::Multibulk(vec![
            b"SET".to_vec(),
            b"k\r\n\0".to_vec(),
            b"$3\r\n*1\r\n".to_vec(),
        ]),
        Item::Empty(b"*0\r\n"),
        Item::Inline(vec![b"GET".to_vec(), b"k".to_vec()], false),
        Item::Multibulk(vec![b"MSET".to_vec(), vec![], vec![0; 40]]),
        Item::QuotedInline(vec![b"ECHO".to_vec(), b"\r\n\"'\0\xff".to_vec()]),
        Item::Empty(b"\r\n"),
        Item::Inline(vec![b"PING".to_vec()], true),
    ];
    let mut wire = Vec::new();
    for item in &items {
        item.write(&mut wire);
    }
    let commands = items.iter().filter_map(Item::command).cloned().collect();
    (wire, commands)
}

#[test]
fn a_stream_split_at_every_byte_offset_parses_like_the_whole() {
    let (wire, expected) = sample_stream();
    for cut in 0..=wire.len() {
        let (commands, rest) = serve_in_pieces(&wire, &[cut]);
        assert_eq!(commands, expected, "split at {cut}");
        assert!(rest.is_empty());
    }
}

#[test]
fn a_stream_fed_one_byte_at_a_time_parses_like_the_whole() {
    let (wire, expected) = sample_stream();
    let cuts: Vec<usize> = (0..wire.len()).collect();
    let (commands, rest) = serve_in_pieces(&wire, &cuts);
    assert_eq!(commands, expected);
    assert!(rest.is_empty());
}

#[test]
fn a_16mb_argument_arriving_in_16kb_pieces_is_checked_arithmetically() {
    // 1024 partial parses; rescanning the payload each time would read
    // about 8 GB, the length check reads nothing.
    let payload = vec![b'\n'; 16 << 20];
    let mut wire = Vec::new();
    write_command(&mut wire, [&b"SET"[..], b"k", &payload]);
    let cuts: Vec<usize> = (1..wire.len() / (16 << 10))
        .map(|i| i * (16 << 10))
        .collect();
    let mut parser = RequestParser::new(Limits::default());
    let mut buf = Vec::new();
    let mut start = 0;
    let mut done = None;
    for &end in cuts.iter().chain(std::iter::once(&wire.len())) {
        buf.extend_from_slice(&wire[start..end]);
        start = end;
        match parser.parse(&buf).unwrap() {
            Parsed::Incomplete { consumed } => {
                assert_eq!(consumed, 0);
                if buf.len() > 64 {
                    // Once the header is read the parser knows the end.
                    assert_eq!(parser.pending_bulk_end(), Some(wire.len()));
                }
            }
            Parsed::Command { args, consumed } => {
                assert_eq!(consumed, wire.len());
                done = Some((args.len(), args[2].len()));
            }
        }
    }
    assert_eq!(done, Some((3, payload.len())));
}
