//! The wire format: `[u32 little-endian payload length][u8 kind][payload]`. A declared length is
//! checked against the limit before a byte of payload is allocated or read.

use std::io::{Read, Write};

use crate::error::{io, Error, Result};

/// Bytes of a frame header.
pub const HEADER_LEN: usize = 5;
/// Limit of control frames (handshake, requests, errors): they never carry data.
pub const MAX_CONTROL: u32 = 64 << 10;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Server greeting: 32-byte nonce, then the owner id (UTF-8).
    Hello = 1,
    /// Client proof: 32-byte nonce, then HMAC(secret, "accel-c" | server nonce | client nonce).
    Auth = 2,
    /// Server proof: HMAC(secret, "accel-s" | client nonce | server nonce).
    AuthOk = 3,
    /// Request a published buffer: u64 buffer id, u64 expected length, and optionally u64
    /// offset, u64 length: one range of it (a striped fetch sends one per connection).
    Get = 4,
    /// Reply to `Get`: u64 total length; `Data` frames follow, then `End`.
    Ok = 5,
    /// A chunk of buffer bytes.
    Data = 6,
    /// End of a stream.
    End = 7,
    /// Free a buffer: u64 buffer id.
    Free = 8,
    /// Reply to `Free`.
    Freed = 9,
    /// An error: u8 code, then a UTF-8 message.
    Err = 10,
    /// Consumer to owner after a stream's `End`: every byte arrived, the owner may recycle the
    /// pages it spliced into the socket.
    Received = 11,
    /// Is a buffer still published? u64 buffer id; answered `Ok` or `Err` (code `FREED`). A
    /// consumer that read it one-sided (NIXL) asks afterwards: a freed id never comes back, so
    /// a buffer still published then was published for the whole read.
    Check = 12,
    /// One finished read of a leased buffer: u64 buffer id. Reply: `Freed` with u8 1 if that
    /// was the last read (the buffer is freed), else 0.
    Release = 13,
    /// The latest version of a channel: its UTF-8 name. Reply: `Ok` with u64 version, then the
    /// channel's manifest.
    Latest = 14,
    /// A reader joins the relayed broadcast of a leased buffer: u64 buffer, u64 the reader's
    /// relay buffer, its owner id and endpoint. Reply: `Ok` with its place (`relay::Assignment`).
    Join = 15,
}

impl Kind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        Some(match b {
            1 => Hello,
            2 => Auth,
            3 => AuthOk,
            4 => Get,
            5 => Ok,
            6 => Data,
            7 => End,
            8 => Free,
            9 => Freed,
            10 => Err,
            11 => Received,
            12 => Check,
            13 => Release,
            14 => Latest,
            15 => Join,
            _ => return None,
        })
    }
}

/// Error codes carried by `Err` frames.
pub mod code {
    /// The buffer is not (or no longer) published.
    pub const FREED: u8 = 1;
    /// Authentication failed.
    pub const AUTH: u8 = 2;
    /// The request was malformed.
    pub const PROTOCOL: u8 = 3;
    /// The server refused the connection (too many connections).
    pub const BUSY: u8 = 4;
}

/// Parses and checks a header: the kind must be known and the length at most `max`.
pub fn parse_header(header: [u8; HEADER_LEN], max: u32) -> Result<(Kind, u32)> {
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let kind = Kind::from_u8(header[4]).ok_or_else(|| Error::Protocol(format!("unknown frame kind {}", header[4])))?;
    if len > max {
        return Err(Error::FrameTooLarge { len: len.into(), max: max.into() });
    }
    Ok((kind, len))
}

/// Parses one whole frame from the front of `buf`: `Ok(None)` if more bytes are needed,
/// otherwise the kind, the payload and the bytes consumed. Never panics, whatever the input.
pub fn parse(buf: &[u8], max: u32) -> Result<Option<(Kind, &[u8], usize)>> {
    let Some(header) = buf.first_chunk::<HEADER_LEN>() else { return Ok(None) };
    let (kind, len) = parse_header(*header, max)?;
    let end = HEADER_LEN + len as usize;
    Ok(buf.get(HEADER_LEN..end).map(|payload| (kind, payload, end)))
}

/// Encodes a frame header.
pub fn header(kind: Kind, len: usize) -> [u8; HEADER_LEN] {
    let l = u32::try_from(len).expect("frame payloads are bounded by max_frame").to_le_bytes();
    [l[0], l[1], l[2], l[3], kind as u8]
}

/// Encodes a whole frame.
pub fn encode(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&header(kind, payload.len()));
    out.extend_from_slice(payload);
    out
}

/// Writes one frame.
pub fn write(w: &mut impl Write, kind: Kind, payload: &[u8]) -> Result<()> {
    w.write_all(&encode(kind, payload)).map_err(io("write frame"))
}

/// Reads one frame header, checking it against `max`.
pub fn read_header(r: &mut impl Read, max: u32) -> Result<(Kind, u32)> {
    let mut header = [0u8; HEADER_LEN];
    r.read_exact(&mut header).map_err(io("read frame header"))?;
    parse_header(header, max)
}

/// Reads one whole frame of at most `max` payload bytes.
pub fn read(r: &mut impl Read, max: u32) -> Result<(Kind, Vec<u8>)> {
    let (kind, len) = read_header(r, max)?;
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload).map_err(io("read frame payload"))?;
    Ok((kind, payload))
}

/// Reads a frame and requires its kind; an `Err` frame becomes its code and message.
pub fn expect(r: &mut impl Read, want: Kind, max: u32) -> Result<Vec<u8>> {
    match read(r, max)? {
        (k, p) if k == want => Ok(p),
        (Kind::Err, p) => Err(remote_error(&p)),
        (k, _) => Err(Error::Protocol(format!("expected a {want:?} frame, got {k:?}"))),
    }
}

/// An error frame's payload: code, message.
pub fn error_payload(code: u8, message: &str) -> Vec<u8> {
    let mut p = vec![code];
    p.extend_from_slice(message.as_bytes());
    p
}

/// Turns a received `Err` payload into an error.
pub fn remote_error(payload: &[u8]) -> Error {
    let (code, msg) = payload.split_first().map_or((0, ""), |(c, m)| (*c, std::str::from_utf8(m).unwrap_or("?")));
    match code {
        code::AUTH => Error::Auth(format!("the owner rejected us: {msg}; {}", crate::error::SECRET_HINT)),
        _ => Error::Protocol(format!("the owner replied: {msg}")),
    }
}

/// Reads a little-endian u64 at `at` of a payload.
pub fn u64_at(p: &[u8], at: usize) -> Result<u64> {
    p.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| Error::Protocol("short frame payload".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn oversize_header_is_rejected_before_reading_the_payload() {
        // Declares 4 GiB but carries nothing: the reader must fail on the header alone.
        let mut wire: &[u8] = &[0xff, 0xff, 0xff, 0xff, Kind::Data as u8];
        match read(&mut wire, MAX_CONTROL) {
            Err(Error::FrameTooLarge { len, max }) => assert_eq!((len, max), (u32::MAX as u64, MAX_CONTROL as u64)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_kind_is_a_protocol_error() {
        assert!(matches!(parse(&[0, 0, 0, 0, 99], 10), Err(Error::Protocol(_))));
    }

    proptest! {
        #[test]
        fn parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), max in 0u32..40) {
            if let Ok(Some((_, payload, used))) = parse(&bytes, max) {
                prop_assert!(payload.len() <= max as usize);
                prop_assert_eq!(used, HEADER_LEN + payload.len());
            }
        }

        #[test]
        fn roundtrip(kind in (1u8..=14).prop_filter("a known kind", |k| Kind::from_u8(*k).is_some()), payload in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..310) {
            let kind = Kind::from_u8(kind).unwrap();
            let wire = encode(kind, &payload);
            let (k, p, used) = parse(&wire, 1024).unwrap().unwrap();
            prop_assert_eq!((k, p, used), (kind, &payload[..], wire.len()));
            // Any strict prefix asks for more bytes instead of failing or inventing a frame.
            let cut = cut.min(wire.len().saturating_sub(1));
            prop_assert!(parse(&wire[..cut], 1024).unwrap().is_none());
            // A limit below the payload length is an error, never a truncated frame.
            if !payload.is_empty() {
                let too_large = matches!(parse(&wire, payload.len() as u32 - 1), Err(Error::FrameTooLarge { .. }));
                prop_assert!(too_large);
            }
        }
    }
}
