//! The plugin protocol's shared vocabulary (docs/plugin-protocol.md): the version this build
//! speaks and why a call gave no answer. A leaf: the in-process answers (`plugin`) and the
//! executable runner (`exec`) both use it.

/// The protocol version this build speaks.
pub const PROTOCOL: u64 = 1;

/// Why a call to a plugin gave no answer. The message names the plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    #[error("plugin {name}: cannot run {path}: {message}")]
    Spawn { name: String, path: String, message: String },
    #[error("plugin {name}: `{verb}` did not answer within {ms} ms; killed")]
    Timeout { name: String, verb: String, ms: u128 },
    #[error("plugin {name}: `{verb}` printed more than {limit} bytes; killed")]
    TooLarge { name: String, verb: String, limit: usize },
    #[error("plugin {name}: `{verb}` exited with {status}{stderr}")]
    Failed { name: String, verb: String, status: String, stderr: String },
    #[error("plugin {name}: `{verb}` printed no valid JSON: {message}")]
    Garbage { name: String, verb: String, message: String },
    #[error("plugin {name}: `{verb}` answered protocol {got}, accel speaks {PROTOCOL}")]
    Protocol { name: String, verb: String, got: String },
    #[error("plugin {name}: `{verb}` is not provided")]
    Unsupported { name: String, verb: String },
}
