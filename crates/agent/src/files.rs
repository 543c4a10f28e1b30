//! Reading a file from disk without trusting what is at its path: only a regular file is read
//! (checked with `fstat` on the opened descriptor), the open never blocks (a FIFO with no writer
//! answers at once and is refused), the size is bounded, and optionally a symbolic link is not
//! followed and the file must belong to a given user.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// Why a file was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refused {
    /// A FIFO, socket, device or directory, or a symbolic link where links are not followed.
    NotRegular,
    /// Owned by another user than the one required.
    NotOwner,
    /// Larger than the limit.
    TooLarge,
    /// Missing, unreadable, or vanished while read.
    Unreadable,
}

/// What a read requires of the file.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Most bytes read; a larger file is refused whole.
    pub max: u64,
    /// The uid the file must belong to.
    pub owner: Option<u32>,
    /// Whether the last component may be a symbolic link.
    pub follow_links: bool,
}

/// This process's effective uid: the owner of the files it writes.
pub fn own_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Reads `path` under `rules`.
pub fn read(path: &Path, rules: Rules) -> Result<Vec<u8>, Refused> {
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if !rules.follow_links {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        // O_NOFOLLOW met a symbolic link.
        Err(rustix::io::Errno::LOOP) if !rules.follow_links => return Err(Refused::NotRegular),
        Err(_) => return Err(Refused::Unreadable),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|_| Refused::Unreadable)?;
    if !meta.file_type().is_file() {
        return Err(Refused::NotRegular);
    }
    if rules.owner.is_some_and(|uid| meta.uid() != uid) {
        return Err(Refused::NotOwner);
    }
    if meta.len() > rules.max {
        return Err(Refused::TooLarge);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(rules.max.saturating_add(1)).read_to_end(&mut bytes).map_err(|_| Refused::Unreadable)?;
    // It grew while read.
    if bytes.len() as u64 > rules.max {
        return Err(Refused::TooLarge);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_rules_allow_is_read() {
        let d = accel_testdata::TempDir::new("agent-files");
        let strict = Rules { max: 8, owner: Some(own_uid()), follow_links: false };
        let lax = Rules { max: 8, owner: None, follow_links: true };
        std::fs::write(d.join("file"), "12345678").unwrap();
        std::os::unix::fs::symlink(d.join("file"), d.join("link")).unwrap();
        let fifo = d.join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        assert_eq!(read(&d.join("file"), strict).unwrap(), b"12345678");
        assert_eq!(read(&d.join("link"), strict), Err(Refused::NotRegular));
        assert_eq!(read(&d.join("link"), lax).unwrap(), b"12345678");
        assert_eq!(read(&fifo, strict), Err(Refused::NotRegular));
        assert_eq!(read(&fifo, lax), Err(Refused::NotRegular), "a FIFO is refused without blocking");
        assert_eq!(read(&d, lax), Err(Refused::NotRegular));
        assert_eq!(read(&d.join("file"), Rules { max: 7, ..lax }), Err(Refused::TooLarge));
        assert_eq!(
            read(&d.join("file"), Rules { owner: Some(own_uid().wrapping_add(1)), ..lax }),
            Err(Refused::NotOwner)
        );
        assert_eq!(read(&d.join("missing"), lax), Err(Refused::Unreadable));
    }
}
