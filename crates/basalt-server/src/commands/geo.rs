//! Geospatial indexes (Redis `geo.c`): points stored as members of a
//! sorted set whose score is the 52-bit interleaved geohash.

use super::CommandDef;

/// The geo family's table.
pub const COMMANDS: &[CommandDef] = &[];
