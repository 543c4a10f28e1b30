//! Channels: named, versioned sets of buffers (the weight-sync pattern). The producer publishes
//! each version's buffers in its arena and then records the version's manifest here (an opaque
//! description its language binding writes: names, references, shapes); consumers ask the
//! owner for the latest manifest by name, on one host or across hosts, over the authenticated
//! connection. Which versions stay alive is the producer's business (it frees old versions'
//! buffers); a consumer's mapping keeps a freed version's bytes intact for as long as it lives.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::error::{Error, Result};

/// Longest channel name accepted.
pub const MAX_NAME: usize = 256;
/// Largest manifest accepted (it must fit one control frame with its version).
pub const MAX_MANIFEST: usize = (crate::frame::MAX_CONTROL as usize) - 8;

/// The latest manifest of each of this owner's channels.
#[derive(Debug, Default)]
pub struct Channels {
    latest: Mutex<HashMap<String, (u64, Vec<u8>)>>,
}

impl Channels {
    /// Records `manifest` as version `version` of channel `name`. Versions only move forward.
    pub fn publish(&self, name: &str, version: u64, manifest: Vec<u8>) -> Result<()> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(Error::Protocol(format!("a channel name has 1 to {MAX_NAME} bytes")));
        }
        if manifest.len() > MAX_MANIFEST {
            return Err(Error::Protocol(format!(
                "channel manifest of {} bytes exceeds {MAX_MANIFEST} bytes",
                manifest.len()
            )));
        }
        let mut g = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((v, _)) = g.get(name) {
            if *v >= version {
                return Err(Error::Protocol(format!("channel {name:?} is at version {v}; {version} is not newer")));
            }
        }
        g.insert(name.to_string(), (version, manifest));
        Ok(())
    }

    /// The latest version of `name` and its manifest.
    pub fn latest(&self, name: &str) -> Option<(u64, Vec<u8>)> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Encodes a latest-version reply: u64 version, then the manifest.
    pub fn encode(version: u64, manifest: &[u8]) -> Vec<u8> {
        let mut out = version.to_le_bytes().to_vec();
        out.extend_from_slice(manifest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_move_forward_and_bounds_hold() {
        let c = Channels::default();
        assert!(c.latest("p").is_none());
        c.publish("p", 1, b"one".to_vec()).unwrap();
        c.publish("p", 2, b"two".to_vec()).unwrap();
        assert_eq!(c.latest("p"), Some((2, b"two".to_vec())));
        assert!(c.publish("p", 2, vec![]).is_err());
        assert!(c.publish("", 3, vec![]).is_err());
        assert!(c.publish("p", 3, vec![0; MAX_MANIFEST + 1]).is_err());
        assert_eq!(Channels::encode(7, b"x"), [7, 0, 0, 0, 0, 0, 0, 0, b'x']);
    }
}
