//! The AEAD record layer that wraps a connection beyond loopback: every byte after the
//! handshake travels in AES-256-GCM records keyed from the handshake, so nobody on the path can
//! read a tensor, and a frame injected, replayed, reordered or cut short fails authentication.
//!
//! Keys: HKDF-SHA256 over the cluster secret, salted with both handshake nonces (fresh per
//! connection), one key per direction. A record is `[u32 LE ciphertext length][ciphertext +
//! 16-byte tag]`; the length is the associated data and the nonce is the record's sequence number
//! in its direction (never sent: a record out of place does not decrypt). `Secure` implements
//! `Read` and `Write` over any byte stream, so every protocol above it (the frames, a pipelined
//! or multi-stream sender) adopts it by wrapping its stream. rustls has no TLS 1.3 external-PSK
//! support, hence this layer instead of TLS (ARCHITECTURE.md).

use std::io::{self, ErrorKind, Read, Write};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::hkdf::{Salt, HKDF_SHA256};

/// Most plaintext bytes in one record; a longer write becomes several records.
pub const MAX_RECORD: usize = 256 << 10;
const TAG_LEN: usize = 16;

/// Both handshake nonces: server's, then client's.
#[derive(Clone, Copy, Debug)]
pub struct Nonces {
    pub server: [u8; 32],
    pub client: [u8; 32],
}

/// Which end of the connection this is (it picks the key of each direction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// A byte stream whose every record is encrypted and authenticated.
pub struct Secure<S> {
    inner: S,
    send: LessSafeKey,
    recv: LessSafeKey,
    send_seq: u64,
    recv_seq: u64,
    /// Decrypted bytes of the current record not yet read.
    rbuf: Vec<u8>,
    rpos: usize,
    wbuf: Vec<u8>,
}

impl<S> std::fmt::Debug for Secure<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secure(sent {} records, received {})", self.send_seq, self.recv_seq)
    }
}

fn key(secret: &[u8], n: &Nonces, label: &[u8]) -> LessSafeKey {
    let mut salt = [0u8; 64];
    salt[..32].copy_from_slice(&n.server);
    salt[32..].copy_from_slice(&n.client);
    let info = [label];
    let prk = Salt::new(HKDF_SHA256, &salt).extract(secret);
    let okm = prk.expand(&info, &AES_256_GCM).expect("one AES-256 key is a valid HKDF-SHA256 length");
    LessSafeKey::new(UnboundKey::from(okm))
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, format!("encrypted stream: {msg}"))
}

impl<S> Secure<S> {
    /// Wraps `inner`, keyed from the cluster secret and the nonces of the handshake just made.
    pub fn new(inner: S, secret: &[u8], nonces: &Nonces, side: Side) -> Secure<S> {
        let c2s = key(secret, nonces, b"accel-transport v1 client to server");
        let s2c = key(secret, nonces, b"accel-transport v1 server to client");
        let (send, recv) = match side {
            Side::Server => (s2c, c2s),
            Side::Client => (c2s, s2c),
        };
        Secure { inner, send, recv, send_seq: 0, recv_seq: 0, rbuf: Vec::new(), rpos: 0, wbuf: Vec::new() }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Read> Secure<S> {
    /// Reads the next record's length; `Ok(None)` on a clean end of stream between records.
    fn next_len(&mut self) -> io::Result<Option<([u8; 4], usize)>> {
        let mut len = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match self.inner.read(&mut len[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(io::Error::new(ErrorKind::UnexpectedEof, "encrypted stream cut mid-record")),
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let n = u32::from_le_bytes(len) as usize;
        // Checked before any buffer is sized: a peer cannot make us reserve more than one record.
        if !(TAG_LEN..=MAX_RECORD + TAG_LEN).contains(&n) {
            return Err(bad(&format!("record of {n} bytes")));
        }
        Ok(Some((len, n)))
    }

    /// Reads the `n`-byte sealed record into `buf` and opens it in place; returns the plaintext
    /// length. `buf` holds ciphertext, not plaintext, if this fails.
    fn open_into(&mut self, len: [u8; 4], buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_exact(buf)?;
        let plain = self
            .recv
            .open_in_place(nonce(self.recv_seq), Aad::from(len), buf)
            .map_err(|_| bad("a record failed authentication (tampered, replayed, reordered or injected)"))?
            .len();
        self.recv_seq += 1;
        Ok(plain)
    }
}

impl<S: Read> Read for Secure<S> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.rpos == self.rbuf.len() {
            let Some((len, n)) = (if out.is_empty() { None } else { self.next_len()? }) else {
                return Ok(0);
            };
            if out.len() >= n {
                // The whole sealed record fits the caller's buffer: opened there, no extra copy.
                return self.open_into(len, &mut out[..n]);
            }
            let mut rbuf = std::mem::take(&mut self.rbuf);
            rbuf.resize(n, 0);
            let plain = self.open_into(len, &mut rbuf);
            // On failure nothing of the record is readable: the buffer holds ciphertext.
            rbuf.truncate(*plain.as_ref().unwrap_or(&0));
            self.rbuf = rbuf;
            self.rpos = 0;
            plain?;
        }
        let n = out.len().min(self.rbuf.len() - self.rpos);
        out[..n].copy_from_slice(&self.rbuf[self.rpos..self.rpos + n]);
        self.rpos += n;
        Ok(n)
    }
}

impl<S: Write> Write for Secure<S> {
    /// Seals up to `MAX_RECORD` bytes of `data` as one record and sends it whole.
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(MAX_RECORD);
        if n == 0 {
            return Ok(0);
        }
        let len = ((n + TAG_LEN) as u32).to_le_bytes();
        self.wbuf.clear();
        self.wbuf.extend_from_slice(&len);
        self.wbuf.extend_from_slice(&data[..n]);
        let tag = self
            .send
            .seal_in_place_separate_tag(nonce(self.send_seq), Aad::from(len), &mut self.wbuf[4..])
            .map_err(|_| bad("encryption failed"))?;
        self.send_seq += 1;
        self.wbuf.extend_from_slice(tag.as_ref());
        self.inner.write_all(&self.wbuf)?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef-cluster";

    fn pair() -> (Nonces, Vec<u8>) {
        let n = Nonces { server: [1; 32], client: [2; 32] };
        let mut wire = Vec::new();
        let mut w = Secure::new(&mut wire, SECRET, &n, Side::Client);
        w.write_all(b"first record").unwrap();
        w.write_all(&vec![7u8; MAX_RECORD + 10]).unwrap(); // two records
        w.write_all(b"last").unwrap();
        (n, wire)
    }

    fn read_all(wire: &[u8], n: &Nonces, secret: &[u8]) -> io::Result<Vec<u8>> {
        let mut r = Secure::new(wire, secret, n, Side::Server);
        let mut out = Vec::new();
        r.read_to_end(&mut out)?;
        Ok(out)
    }

    /// Splits a wire into its records.
    fn records(wire: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < wire.len() {
            let n = u32::from_le_bytes(wire[at..at + 4].try_into().unwrap()) as usize;
            out.push(&wire[at..at + 4 + n]);
            at += 4 + n;
        }
        out
    }

    #[test]
    fn round_trip_and_no_plaintext_on_the_wire() {
        let (n, wire) = pair();
        let got = read_all(&wire, &n, SECRET).unwrap();
        assert_eq!(&got[..12], b"first record");
        assert_eq!(got.len(), 12 + MAX_RECORD + 10 + 4);
        assert!(!wire.windows(12).any(|w| w == b"first record"));
        assert!(!wire.windows(64).any(|w| w.iter().all(|b| *b == 7)), "the payload is visible on the wire");
        assert_eq!(records(&wire).len(), 4);
    }

    #[test]
    fn reads_of_any_size_see_the_same_bytes() {
        // Records opened in the caller's buffer (it holds a whole record) and through the
        // internal buffer (it does not) interleave without losing or repeating a byte.
        let n = Nonces { server: [1; 32], client: [2; 32] };
        let data: Vec<u8> = (0..3 * MAX_RECORD + 77).map(|i| (i * 31 % 251) as u8).collect();
        let mut wire = Vec::new();
        let mut w = Secure::new(&mut wire, SECRET, &n, Side::Client);
        for chunk in data.chunks(MAX_RECORD / 3 + 5) {
            w.write_all(chunk).unwrap();
        }
        let mut r = Secure::new(&wire[..], SECRET, &n, Side::Server);
        let mut got = Vec::new();
        for size in [1, MAX_RECORD + TAG_LEN, 7, 4 * MAX_RECORD].iter().cycle() {
            let mut buf = vec![0u8; *size];
            let k = r.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            got.extend_from_slice(&buf[..k]);
        }
        assert_eq!(got, data);
    }

    #[test]
    fn wrong_secret_or_other_nonces_fail() {
        let (n, wire) = pair();
        assert!(read_all(&wire, &n, b"another-secret-entirely").is_err());
        let other = Nonces { server: [3; 32], ..n };
        assert!(read_all(&wire, &other, SECRET).is_err());
    }

    #[test]
    fn tampering_replay_reordering_injection_and_truncation_fail() {
        let (n, wire) = pair();
        let recs = records(&wire);
        // A flipped bit.
        let mut t = wire.clone();
        t[10] ^= 1;
        assert_eq!(read_all(&t, &n, SECRET).unwrap_err().kind(), ErrorKind::InvalidData);
        // A replayed record.
        let replay = [recs[0], recs[0], recs[1]].concat();
        assert_eq!(read_all(&replay, &n, SECRET).unwrap_err().kind(), ErrorKind::InvalidData);
        // Records swapped.
        let swapped = [recs[1], recs[0]].concat();
        assert_eq!(read_all(&swapped, &n, SECRET).unwrap_err().kind(), ErrorKind::InvalidData);
        // A forged record (for example a `Free` frame) sealed under another key.
        let mut forged = Vec::new();
        Secure::new(&mut forged, b"attacker-without-the-secret", &n, Side::Client).write_all(b"free 1").unwrap();
        let injected = [recs[0], &forged[..]].concat();
        assert_eq!(read_all(&injected, &n, SECRET).unwrap_err().kind(), ErrorKind::InvalidData);
        // The server's direction has another key: a client record reflected back fails.
        let mut r = Secure::new(&wire[..], SECRET, &n, Side::Client);
        assert!(r.read(&mut [0u8; 8]).is_err());
        // Cut mid-record.
        assert_eq!(read_all(&wire[..wire.len() - 3], &n, SECRET).unwrap_err().kind(), ErrorKind::UnexpectedEof);
        // A declared length beyond one record is refused before any allocation.
        let mut huge = (u32::MAX).to_le_bytes().to_vec();
        huge.extend_from_slice(&[0; 32]);
        assert_eq!(read_all(&huge, &n, SECRET).unwrap_err().kind(), ErrorKind::InvalidData);
    }
}
