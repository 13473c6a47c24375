//! HyperLogLog (Redis `hyperloglog.c`): cardinality estimates kept in
//! string values in Redis's own representation.

use super::CommandDef;

/// The HyperLogLog family's table.
pub const COMMANDS: &[CommandDef] = &[];
