//! RESP2/RESP3 protocol frames for Basalt (being written).
