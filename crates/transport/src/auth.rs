//! Mutual HMAC-SHA256 challenge-response: each side proves it holds the cluster secret by
//! keying an HMAC over both fresh nonces; the secret itself never crosses the wire.

use std::io::{Read, Write};

use ring::hmac;

use crate::error::{Error, Result};
use crate::frame::{self, code, Kind, MAX_CONTROL};
use crate::secure::Nonces;

/// Shortest secret accepted.
pub const SECRET_MIN_LEN: usize = 16;
const NONCE_LEN: usize = 32;

fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| Error::Auth(format!("no randomness: {e}")))?;
    Ok(n)
}

/// The MAC's message: a label, then both nonces in a fixed order.
fn message(label: &[u8], a: &[u8], b: &[u8]) -> Vec<u8> {
    [label, a, b].concat()
}

fn mac(secret: &[u8], label: &[u8], a: &[u8], b: &[u8]) -> hmac::Tag {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), &message(label, a, b))
}

/// Checks `proof` in constant time (`ring::hmac::verify`).
fn verify(secret: &[u8], label: &[u8], a: &[u8], b: &[u8], proof: &[u8]) -> bool {
    hmac::verify(&hmac::Key::new(hmac::HMAC_SHA256, secret), &message(label, a, b), proof).is_ok()
}

/// Server side: greets with a nonce and `owner`, checks the client's proof, proves itself.
/// On a wrong proof it answers an `Err` frame and returns `Error::Auth`. Returns both nonces,
/// which key the encrypted record layer (`secure`) beyond loopback.
pub fn server_handshake<S: Read + Write>(s: &mut S, secret: &[u8], owner: &str) -> Result<Nonces> {
    let ns = nonce()?;
    let mut hello = ns.to_vec();
    hello.extend_from_slice(owner.as_bytes());
    frame::write(s, Kind::Hello, &hello)?;
    let auth = frame::expect(s, Kind::Auth, MAX_CONTROL)?;
    if auth.len() != NONCE_LEN + 32 {
        return Err(Error::Auth("malformed client proof".into()));
    }
    let (nc, proof) = auth.split_at(NONCE_LEN);
    if !verify(secret, b"accel-c", &ns, nc, proof) {
        let _ = frame::write(s, Kind::Err, &frame::error_payload(code::AUTH, "wrong cluster secret"));
        return Err(Error::Auth("a client presented a wrong cluster secret".into()));
    }
    let reply = mac(secret, b"accel-s", nc, &ns);
    frame::write(s, Kind::AuthOk, reply.as_ref())?;
    Ok(Nonces { server: ns, client: nc.try_into().expect("NONCE_LEN bytes") })
}

/// Client side: answers the greeting with a proof and checks the server's. Returns the owner
/// id the server announced and both nonces.
pub fn client_handshake<S: Read + Write>(s: &mut S, secret: &[u8]) -> Result<(String, Nonces)> {
    let hello = frame::expect(s, Kind::Hello, MAX_CONTROL)?;
    if hello.len() < NONCE_LEN {
        return Err(Error::Protocol("short greeting".into()));
    }
    let (ns, owner) = hello.split_at(NONCE_LEN);
    let owner = String::from_utf8_lossy(owner).into_owned();
    let nc = nonce()?;
    let mut auth = nc.to_vec();
    auth.extend_from_slice(mac(secret, b"accel-c", ns, &nc).as_ref());
    frame::write(s, Kind::Auth, &auth)?;
    let proof = frame::expect(s, Kind::AuthOk, MAX_CONTROL)?;
    if !verify(secret, b"accel-s", &nc, ns, &proof) {
        return Err(Error::Auth(format!("the owner does not hold our cluster secret; {}", crate::error::SECRET_HINT)));
    }
    Ok((owner, Nonces { server: ns.try_into().expect("NONCE_LEN bytes"), client: nc }))
}
