//! `basalt-bench`: side-by-side benchmarks of Basalt against the real
//! alternatives, measured in the same run and reported as ratios.
//!
//! Subcommands:
//! - `engine`: the embedded engine against RocksDB (see [`engine_bench`]).
//! - `server`: the `basalt` server against `redis-server`, both driven by
//!   `redis-benchmark` (see [`server_bench`]).
//! - `tx`: MULTI/EXEC transactions against `redis-server`, with this
//!   crate's own client (see [`server_bench::tx`]).
//! - `groups`: stream consumer groups against `redis-server`
//!   (see [`server_bench::groups`]).
//! - `queues`: the HTTP work queues, beside the same work on
//!   `redis-server`'s streams (see [`server_bench::queues`]).
//! - `families`: bitmaps, HyperLogLog and geo against `redis-server`
//!   (see [`server_bench::families`]).

use clap::{Parser, Subcommand};

mod engine_bench;
mod engines;
mod gen;
mod histogram;
mod server_bench;
mod sysinfo;

#[derive(Debug, Parser)]
#[command(name = "basalt-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Embedded engines: fillrandom, readrandom, overwrite and a 90/10 mix.
    Engine(engine_bench::EngineArgs),
    /// The basalt server against redis-server (same durability), driven by
    /// redis-benchmark: ops/s, server CPU per request, latency, RSS; then
    /// memory per member of one big hash and one big sorted set.
    Server(server_bench::ServerArgs),
    /// MULTI + N x SET + EXEC against redis-server and basalt (same
    /// durability), pipelined, with this benchmark's own client.
    Tx(server_bench::tx::TxArgs),
    /// Stream consumer groups: XREADGROUP COUNT P + XACK round trips
    /// against redis-server and basalt, with this benchmark's own client.
    Groups(server_bench::groups::GroupsArgs),
    /// HTTP work queues (push, take + ack, 50 connections) on basalt,
    /// beside the same work on redis-server's streams over RESP.
    Queues(server_bench::queues::QueuesArgs),
    /// Bitmaps (on a 1 MB string), HyperLogLog and geo against
    /// redis-server and basalt, with this benchmark's own client.
    Families(server_bench::families::FamiliesArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Engine(args) => engine_bench::run(args),
        Command::Server(args) => server_bench::run(args),
        Command::Tx(args) => server_bench::tx::run(args),
        Command::Families(args) => server_bench::families::run(args),
        Command::Groups(args) => server_bench::groups::run(args),
        Command::Queues(args) => server_bench::queues::run(args),
    }
}
