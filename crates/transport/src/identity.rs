//! Who owns a buffer and where: the owner id (pid, process start time, random incarnation
//! nonce), the host id, and the liveness check a same-host consumer makes before mapping.

use crate::error::{Error, Result};

/// Every segment name starts with this (then `Identity::segment_prefix`'s owner part); the orphan
/// sweeper looks at nothing else.
pub const SEGMENT_PREFIX: &str = "accel-";

/// One owner incarnation. A restarted process gets a new start time and nonce, so references
/// to its predecessor never resolve to the new one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub pid: u32,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22): guards pid reuse.
    pub start: u64,
    pub nonce: u64,
}

impl Identity {
    /// This process, with a fresh nonce.
    pub fn current() -> Result<Identity> {
        let pid = std::process::id();
        let start = start_time(pid).ok_or_else(|| Error::Config("cannot read /proc/self/stat".into()))?;
        let mut n = [0u8; 8];
        getrandom::fill(&mut n).map_err(|e| Error::Config(format!("no randomness: {e}")))?;
        Ok(Identity { pid, start, nonce: u64::from_le_bytes(n) })
    }

    /// The text form carried on references: `<pid>-<start>-<nonce hex>`.
    pub fn id(&self) -> String {
        format!("{}-{}-{:016x}", self.pid, self.start, self.nonce)
    }

    /// Parses the text form.
    pub fn parse(text: &str) -> Option<Identity> {
        let mut it = text.splitn(3, '-');
        let pid = it.next()?.parse().ok()?;
        let start = it.next()?.parse().ok()?;
        let nonce = u64::from_str_radix(it.next()?, 16).ok()?;
        Some(Identity { pid, start, nonce })
    }

    /// The prefix of this owner's segment names: `accel-<pid namespace>-<pid>-<start>-`. The
    /// namespace says in which pid space `pid` and `start` mean something: containers that share
    /// `/dev/shm` (one IPC namespace) but not pids see each other's segments, and a sweeper must
    /// not judge an owner by a pid of another namespace.
    pub fn segment_prefix(&self) -> String {
        format!("{}{}-{}-{}-", SEGMENT_PREFIX, pid_namespace(), self.pid, self.start)
    }
}

/// This process's pid namespace: the inode number of `/proc/self/ns/pid` (0 if unreadable).
pub fn pid_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|p| {
            let p = p.to_string_lossy().into_owned();
            p.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

/// Start time of a process, `None` if it does not exist (or is a zombie being reaped).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // `rest` starts at field 3 (state); field 22 is the start time.
    fields.nth(18)?.parse().ok()
}

/// Whether the process `pid` that started at `start` still runs.
pub fn process_alive(pid: u32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

/// This host's id: hostname, boot id and pid namespace. Two processes with the same id share
/// `/dev/shm` and see each other's pids, which the shared-memory path relies on.
pub fn host_id() -> String {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let pidns = std::fs::read_link("/proc/self/ns/pid").map(|p| p.display().to_string()).unwrap_or_default();
    let pidns = pidns.trim_start_matches("pid:[").trim_end_matches(']');
    format!("{}/{}/{}", read("/proc/sys/kernel/hostname"), read("/proc/sys/kernel/random/boot_id"), pidns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_process_is_alive_and_ids_round_trip() {
        let me = Identity::current().unwrap();
        assert!(process_alive(me.pid, me.start));
        assert!(!process_alive(me.pid, me.start + 1));
        assert_eq!(Identity::parse(&me.id()), Some(me));
        assert!(host_id().len() > 3);
    }
}
