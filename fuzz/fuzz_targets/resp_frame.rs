//! The reply (frame) parser, as a client uses it: it must never panic, never
//! claim more bytes than it was given, and a frame it parsed must encode
//! (RESP2 and RESP3) to bytes that parse again, whole.
#![no_main]

use basalt_resp::{Frame, Protocol};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    // Several frames back to back, as a pipelined reply stream.
    for _ in 0..64 {
        match Frame::parse(rest) {
            Ok(Some((frame, used))) => {
                assert!(
                    used > 0 && used <= rest.len(),
                    "used {used} of {}",
                    rest.len()
                );
                for protocol in [Protocol::Resp2, Protocol::Resp3] {
                    let mut out = Vec::new();
                    frame.write(&mut out, protocol);
                    match Frame::parse(&out) {
                        Ok(Some((_, n))) => assert_eq!(n, out.len(), "{protocol:?} re-parse"),
                        other => {
                            panic!("{protocol:?} encoding of {frame:?} does not parse: {other:?}")
                        }
                    }
                }
                rest = &rest[used..];
            }
            Ok(None) | Err(_) => return,
        }
    }
});
