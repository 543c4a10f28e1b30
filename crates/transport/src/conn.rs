//! One accepted or dialled connection after the handshake: the plain socket on loopback (where
//! the owner may splice segment pages with `sendfile`), or the same socket wrapped in the AEAD
//! record layer (`secure`) beyond it. Protocol code reads and writes a `Conn` and never asks
//! which it is, except to decide whether it may splice.

use std::io::{self, Read, Write};
use std::net::TcpStream;

use crate::secure::{Nonces, Secure, Side};

/// A connection carrying frames: plain on loopback, encrypted otherwise.
#[derive(Debug)]
pub enum Conn {
    Plain(TcpStream),
    Secure(Box<Secure<TcpStream>>),
}

impl Conn {
    /// Wraps a socket whose handshake just completed: encrypted unless `encrypt` is false.
    pub fn new(s: TcpStream, encrypt: bool, secret: &[u8], nonces: &Nonces, side: Side) -> Conn {
        if encrypt {
            Conn::Secure(Box::new(Secure::new(s, secret, nonces, side)))
        } else {
            Conn::Plain(s)
        }
    }

    /// The socket underneath (timeouts, `TIOCOUTQ`, shutdown).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Secure(s) => s.get_ref(),
        }
    }

    /// The plain socket, when bytes may go to it unencrypted (loopback): `sendfile` needs it.
    pub fn plain(&self) -> Option<&TcpStream> {
        match self {
            Conn::Plain(s) => Some(s),
            Conn::Secure(_) => None,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Secure(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Secure(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Secure(s) => s.flush(),
        }
    }
}
