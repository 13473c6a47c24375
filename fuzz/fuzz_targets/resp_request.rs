//! The request parser as a server drives it: the input arrives in pieces
//! (the first bytes choose the limits and the piece size), every complete
//! command is taken off the front, a partial one is resumed. It must never
//! panic, never report more bytes consumed than it was given, and must find
//! exactly the commands (and the error) it finds when the whole input
//! arrives at once.
#![no_main]

use basalt_resp::{Limits, Parsed, RequestParser};
use libfuzzer_sys::fuzz_target;

/// Commands (as argument lists) until the end of the input or an error.
fn parse_all(input: &[u8], limits: Limits, piece: usize) -> (Vec<Vec<Vec<u8>>>, Option<String>) {
    let mut parser = RequestParser::new(limits);
    let mut commands = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    loop {
        // A command per call at most, more bytes only when none is complete.
        match parser.parse(&buf) {
            Ok(Parsed::Command { args, consumed }) => {
                assert!(!args.is_empty());
                assert!(
                    consumed <= buf.len(),
                    "consumed {consumed} of {}",
                    buf.len()
                );
                commands.push(args.to_vec());
                buf.drain(..consumed);
            }
            Ok(Parsed::Incomplete { consumed }) => {
                assert!(
                    consumed <= buf.len(),
                    "consumed {consumed} of {}",
                    buf.len()
                );
                buf.drain(..consumed);
                if fed == input.len() {
                    return (commands, None);
                }
                let n = piece.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
            Err(e) => return (commands, Some(e.to_string())),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, input)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        // Small limits so the fuzzer reaches them.
        max_bulk_len: if mode & 1 != 0 { 64 } else { 512 << 20 },
        max_multibulk_len: if mode & 2 != 0 { 8 } else { i32::MAX as usize },
        max_inline_len: if mode & 4 != 0 { 32 } else { 64 << 10 },
        authenticated: mode & 8 == 0,
    };
    let piece = 1 + (mode >> 4) as usize;
    let whole = parse_all(input, limits, input.len().max(1));
    let pieces = parse_all(input, limits, piece);
    assert_eq!(whole, pieces, "piece size {piece}");
});
