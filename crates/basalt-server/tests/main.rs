//! The server's integration tests that share one test binary: each file
//! beside this one is a module here, so `cargo test` links the server (an
//! in-process server per test) once instead of once per file. Run one
//! file's tests with `cargo test -p basalt-server --test server set::`.
//!
//! A file that must have a process of its own is its own `[[test]]` in
//! Cargo.toml instead (the reason is written there). Every file in this
//! directory is one or the other: `every_test_file_is_built` checks it,
//! since `autotests = false` would otherwise skip a new file silently.

mod common;

mod auth;
mod blocking;
mod check_cli;
mod commands;
mod disk_full;
mod dump;
mod durability;
mod exec_workers;
mod geo;
mod hash;
mod hot_key;
mod http;
mod hyperloglog;
mod introspection;
mod limits;
mod list;
mod notifications;
mod protocol;
mod pubsub;
mod queues;
mod scripting;
mod set;
mod sort;
mod stream;
mod tracking;
mod transactions;
mod versions;
mod zset;

/// Every `tests/*.rs` file is a module of this binary or a `[[test]]` of
/// its own, so none is left unbuilt.
#[test]
fn every_test_file_is_built() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let main = std::fs::read_to_string(dir.join("tests/main.rs")).unwrap();
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    for entry in std::fs::read_dir(dir.join("tests")).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        if stem == "main" {
            continue;
        }
        let as_module = main.contains(&format!("\nmod {stem};\n"));
        let as_target = manifest.contains(&format!("path = \"tests/{name}\""));
        assert!(
            as_module ^ as_target,
            "tests/{name} must be either `mod {stem};` in tests/main.rs or a [[test]] in Cargo.toml (module: {as_module}, target: {as_target})"
        );
    }
}
