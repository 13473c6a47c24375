//! Raft replication for Basalt, on [openraft](https://docs.rs/openraft).
//!
//! This crate knows the Basalt engine and Raft, never Redis: an entry's
//! payload is opaque bytes that an [`Applier`] (the server, in Basalt)
//! interprets. It provides the three pieces openraft leaves to its user:
//!
//! - [`LogStore`]: the Raft log and vote, in their own append-only segment
//!   files with a CRC per entry, durable under the engine's
//!   [`SyncPolicy`](basalt_engine::SyncPolicy) before openraft is told so
//!   (so before a node acknowledges an append or grants a vote);
//! - [`StateMachine`]: applies committed entries through the [`Applier`],
//!   each entry as **one engine write batch** that also records the entry's
//!   log id, so a crash leaves an entry applied wholly or not at all and
//!   applying it again after a restart is impossible (idempotent by log
//!   index);
//! - the RPC ([`network`]): openraft's messages, bincode-encoded, over
//!   HTTP/1.1 (axum serving, reqwest calling) on the node's Raft port.
//!
//! [`RaftNode`] ties them together: start a node from its id, its Raft
//! address and the group's peers; nodes started with the same peers form the
//! group with no further step.

#![warn(missing_docs)]
// openraft's storage traits return its `StorageError` (224 bytes) by value;
// the helpers that build it follow suit.
#![allow(clippy::result_large_err)]

mod lease;
pub mod log_store;
pub mod network;
pub mod node;
mod prevote;
pub mod snapshot;
pub mod state_machine;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use log_store::LogStore;
pub use node::{known_leader, NodeConfig, RaftNode, WriteError};
pub use state_machine::{Applier, Held, StateMachine};

/// A node's id in the group (`--node-id`).
pub type NodeId = u64;

/// What a log entry carries: opaque bytes for the [`Applier`]. Shared
/// (`Bytes`), so that the copies openraft takes of an entry (one per
/// follower it is sent to, one for the state machine) share the payload
/// instead of copying it; encoded as one run of bytes, exactly as the
/// `Vec<u8>` it was before (logs written by earlier versions read back).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request(pub bytes::Bytes);

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Request({} bytes)", self.0.len())
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What applying an entry answered (the [`Applier`]'s reply bytes; empty
/// for entries without a payload).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response(#[serde(with = "serde_bytes")] pub Vec<u8>);

/// How to reach a node: its Raft RPC address and its client (RESP) address.
/// The client address may be empty until the node has told the group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    /// `host:port` of the node's Raft RPC listener.
    pub raft: String,
    /// `host:port` clients connect to; empty if not known yet.
    pub client: String,
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft={} client={}", self.raft, self.client)
    }
}

openraft::declare_raft_types!(
    /// Basalt's openraft type configuration.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = NodeAddr,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = snapshot::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The openraft handle of a Basalt node.
pub type Raft = openraft::Raft<TypeConfig>;
/// A log id (term, leader, index).
pub type LogId = openraft::LogId<NodeId>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// openraft's storage error.
pub type StorageError = openraft::StorageError<NodeId>;

pub(crate) fn io_error(
    subject: openraft::ErrorSubject<NodeId>,
    verb: openraft::ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError {
    StorageError::IO {
        source: openraft::StorageIOError::new(subject, verb, openraft::AnyError::new(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_encodes_as_the_byte_vector_earlier_versions_wrote() {
        #[derive(Serialize, Deserialize)]
        struct Before(#[serde(with = "serde_bytes")] Vec<u8>);
        let payload = b"SET k v \x00\xff".to_vec();
        let now = bincode::serialize(&Request(payload.clone().into())).unwrap();
        assert_eq!(now, bincode::serialize(&Before(payload.clone())).unwrap());
        let back: Request = bincode::deserialize(&now).unwrap();
        assert_eq!(&back.0[..], &payload[..]);
    }
}
