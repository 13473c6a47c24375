//! What the encoder writes, the frame parser reads back: in RESP3 as the
//! same frames, in RESP2 as the RESP2 spelling of each reply type.

use basalt_resp::{Encoder, Frame, Protocol};
use proptest::collection::vec;
use proptest::prelude::*;

/// Parses every frame in `wire`, which must hold whole frames only.
fn parse_all(wire: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut pos = 0;
    while pos < wire.len() {
        let (frame, used) = Frame::parse(&wire[pos..])
            .expect("valid frame")
            .expect("complete frame");
        frames.push(frame);
        pos += used;
    }
    frames
}

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Writes one reply of every kind.
fn write_every_kind(protocol: Protocol) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = Encoder::new(&mut out, protocol);
    e.simple(b"OK");
    e.error(b"WRONGTYPE Operation against a key holding the wrong kind of value");
    e.integer(i64::MIN);
    e.bulk(b"bin\r\n\0");
    e.null();
    e.null_array();
    e.array(2);
    e.bulk(b"a");
    e.integer(1);
    e.map(2);
    e.bulk(b"f1");
    e.double(0.1);
    e.bulk(b"f2");
    e.double(f64::NEG_INFINITY);
    e.set(1);
    e.bulk(b"m");
    e.double(f64::INFINITY);
    e.boolean(true);
    e.boolean(false);
    e.push(3);
    e.bulk(b"message");
    e.bulk(b"chan");
    e.bulk(b"hi");
    e.verbatim(b"txt", b"# Server\r\nredis_version:7.0.0\r\n");
    e.big_number(b"-3492890328409238509324850943850943825024385");
    out
}

#[test]
fn every_reply_kind_round_trips_in_resp3() {
    let frames = parse_all(&write_every_kind(Protocol::Resp3));
    assert_eq!(
        frames,
        vec![
            Frame::Simple(b("OK")),
            Frame::Error(b(
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            )),
            Frame::Integer(i64::MIN),
            Frame::Bulk(b"bin\r\n\0".to_vec()),
            Frame::Null,
            Frame::Null,
            Frame::Array(vec![Frame::Bulk(b("a")), Frame::Integer(1)]),
            Frame::Map(vec![
                (Frame::Bulk(b("f1")), Frame::Double(0.1)),
                (Frame::Bulk(b("f2")), Frame::Double(f64::NEG_INFINITY)),
            ]),
            Frame::Set(vec![Frame::Bulk(b("m"))]),
            Frame::Double(f64::INFINITY),
            Frame::Boolean(true),
            Frame::Boolean(false),
            Frame::Push(vec![
                Frame::Bulk(b("message")),
                Frame::Bulk(b("chan")),
                Frame::Bulk(b("hi")),
            ]),
            Frame::Verbatim {
                format: *b"txt",
                text: b("# Server\r\nredis_version:7.0.0\r\n"),
            },
            Frame::BigNumber(b("-3492890328409238509324850943850943825024385")),
        ]
    );
}

#[test]
fn every_reply_kind_takes_its_resp2_spelling() {
    let frames = parse_all(&write_every_kind(Protocol::Resp2));
    assert_eq!(
        frames,
        vec![
            Frame::Simple(b("OK")),
            Frame::Error(b(
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            )),
            Frame::Integer(i64::MIN),
            Frame::Bulk(b"bin\r\n\0".to_vec()),
            Frame::NullBulk,
            Frame::NullArray,
            Frame::Array(vec![Frame::Bulk(b("a")), Frame::Integer(1)]),
            Frame::Array(vec![
                Frame::Bulk(b("f1")),
                Frame::Bulk(b("0.10000000000000001")),
                Frame::Bulk(b("f2")),
                Frame::Bulk(b("-inf")),
            ]),
            Frame::Array(vec![Frame::Bulk(b("m"))]),
            Frame::Bulk(b("inf")),
            Frame::Integer(1),
            Frame::Integer(0),
            Frame::Array(vec![
                Frame::Bulk(b("message")),
                Frame::Bulk(b("chan")),
                Frame::Bulk(b("hi")),
            ]),
            Frame::Bulk(b("# Server\r\nredis_version:7.0.0\r\n")),
            Frame::Bulk(b("-3492890328409238509324850943850943825024385")),
        ]
    );
}

/// A reply to write, then its RESP2 and RESP3 bytes.
type Case = (fn(&mut Encoder<'_>), &'static [u8], &'static [u8]);

#[test]
fn exact_bytes_of_the_types_whose_spelling_differs() {
    let cases: &[Case] = &[
        (|e| e.null(), b"$-1\r\n", b"_\r\n"),
        (|e| e.null_array(), b"*-1\r\n", b"_\r\n"),
        (|e| e.double(1.5), b"$3\r\n1.5\r\n", b",1.5\r\n"),
        (|e| e.double(f64::INFINITY), b"$3\r\ninf\r\n", b",inf\r\n"),
        (
            |e| e.double(f64::NEG_INFINITY),
            b"$4\r\n-inf\r\n",
            b",-inf\r\n",
        ),
        (|e| e.double(1e17), b"$5\r\n1e+17\r\n", b",1e+17\r\n"),
        (|e| e.boolean(true), b":1\r\n", b"#t\r\n"),
        (|e| e.map(3), b"*6\r\n", b"%3\r\n"),
        (|e| e.set(3), b"*3\r\n", b"~3\r\n"),
        (|e| e.push(3), b"*3\r\n", b">3\r\n"),
        (
            |e| e.verbatim(b"txt", b"hi"),
            b"$2\r\nhi\r\n",
            b"=6\r\ntxt:hi\r\n",
        ),
        (|e| e.big_number(b"12"), b"$2\r\n12\r\n", b"(12\r\n"),
    ];
    for (write, resp2, resp3) in cases {
        for (protocol, want) in [(Protocol::Resp2, resp2), (Protocol::Resp3, resp3)] {
            let mut out = Vec::new();
            write(&mut Encoder::new(&mut out, protocol));
            assert_eq!(
                out.escape_ascii().to_string(),
                want.escape_ascii().to_string()
            );
        }
    }
}

#[test]
fn line_replies_cannot_break_the_stream() {
    let mut out = Vec::new();
    let mut e = Encoder::new(&mut out, Protocol::Resp2);
    e.error(b"ERR bad\r\nthing");
    e.simple(b"a\nb");
    assert_eq!(out, b"-ERR bad  thing\r\n+a b\r\n");
}

fn line_text() -> impl Strategy<Value = Vec<u8>> {
    "[ -~]{0,16}".prop_map(String::into_bytes)
}

/// Frames the encoder can produce in RESP3 (no NaN: it never equals itself).
fn frame() -> impl Strategy<Value = Frame> {
    let leaf = prop_oneof![
        line_text().prop_map(Frame::Simple),
        line_text().prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        vec(any::<u8>(), 0..32).prop_map(Frame::Bulk),
        Just(Frame::Null),
        any::<f64>()
            .prop_filter("NaN", |d| !d.is_nan())
            .prop_map(Frame::Double),
        any::<bool>().prop_map(Frame::Boolean),
        ("[a-z]{3}", vec(any::<u8>(), 0..32)).prop_map(|(f, text)| Frame::Verbatim {
            format: f.into_bytes().try_into().unwrap(),
            text,
        }),
        "-?[1-9][0-9]{0,40}".prop_map(|s| Frame::BigNumber(s.into_bytes())),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Frame::Array),
            vec(inner.clone(), 0..6).prop_map(Frame::Set),
            vec(inner.clone(), 0..6).prop_map(Frame::Push),
            vec((inner.clone(), inner), 0..4).prop_map(Frame::Map),
        ]
    })
}

/// The frame a RESP2 client reads for `f` written in RESP2.
fn as_resp2(f: &Frame) -> Frame {
    let mut text = Vec::new();
    match f {
        Frame::Null => Frame::NullBulk,
        Frame::Double(_) => {
            // Same text as RESP3's `,<text>`, as a bulk string.
            f.write(&mut text, Protocol::Resp3);
            Frame::Bulk(text[1..text.len() - 2].to_vec())
        }
        Frame::Boolean(b) => Frame::Integer(i64::from(*b)),
        Frame::Verbatim { text, .. } => Frame::Bulk(text.clone()),
        Frame::BigNumber(digits) => Frame::Bulk(digits.clone()),
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) => {
            Frame::Array(items.iter().map(as_resp2).collect())
        }
        Frame::Map(pairs) => Frame::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [as_resp2(k), as_resp2(v)])
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn random_reply_trees_round_trip_in_resp3(f in frame()) {
        let mut wire = Vec::new();
        f.write(&mut wire, Protocol::Resp3);
        let (parsed, used) = Frame::parse(&wire).unwrap().unwrap();
        prop_assert_eq!(used, wire.len());
        prop_assert_eq!(parsed, f);
    }

    #[test]
    fn random_reply_trees_read_back_as_their_resp2_spelling(f in frame()) {
        let mut wire = Vec::new();
        f.write(&mut wire, Protocol::Resp2);
        let (parsed, used) = Frame::parse(&wire).unwrap().unwrap();
        prop_assert_eq!(used, wire.len());
        prop_assert_eq!(parsed, as_resp2(&f));
    }

    #[test]
    fn doubles_survive_the_text_round_trip(d in any::<f64>().prop_filter("NaN", |d| !d.is_nan())) {
        let mut wire = Vec::new();
        Encoder::new(&mut wire, Protocol::Resp3).double(d);
        prop_assert_eq!(Frame::parse(&wire).unwrap().unwrap().0, Frame::Double(d));
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete(f in frame()) {
        let mut wire = Vec::new();
        f.write(&mut wire, Protocol::Resp3);
        for cut in 0..wire.len() {
            prop_assert_eq!(Frame::parse(&wire[..cut]).unwrap(), None);
        }
    }
}
