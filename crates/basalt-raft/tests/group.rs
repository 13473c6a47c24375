//! Three Raft nodes in one process, talking over real sockets on
//! 127.0.0.1: the group forms from the same peer list, replicates, elects a
//! new leader when the old one stops, and catches a lagging node up by
//! snapshot. Every wait is bounded.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use basalt_raft::{NodeConfig, NodeId, RaftNode};
use common::{KvApplier, Op};
use tempfile::TempDir;
use tokio::net::TcpListener;

type Node = RaftNode<KvApplier>;

struct Group {
    _tmp: TempDir,
    dirs: BTreeMap<NodeId, PathBuf>,
    addrs: BTreeMap<NodeId, String>,
    nodes: BTreeMap<NodeId, Node>,
    tuning: Tuning,
}

/// What the tests vary: entries between snapshots, and the election
/// timeout's range in ms (the heartbeat is a sixth of its lower end).
#[derive(Clone, Copy)]
struct Tuning {
    snapshot_every: u64,
    election_ms: (u64, u64),
}

impl Tuning {
    fn snapshot_every(snapshot_every: u64) -> Tuning {
        Tuning {
            snapshot_every,
            election_ms: (300, 600),
        }
    }
}

fn config(id: NodeId, dir: &Path, addrs: &BTreeMap<NodeId, String>, t: Tuning) -> NodeConfig {
    let mut cfg = NodeConfig::new(id, addrs[&id].parse().unwrap(), dir.to_path_buf());
    cfg.peers = addrs.clone();
    cfg.client_addr = format!("client-of-{id}:7000");
    let (lo, hi) = t.election_ms;
    cfg.heartbeat = Duration::from_millis(lo / 6);
    cfg.election_timeout = (Duration::from_millis(lo), Duration::from_millis(hi));
    cfg.snapshot_every = t.snapshot_every;
    cfg
}

async fn start_node(
    id: NodeId,
    dir: &Path,
    addrs: &BTreeMap<NodeId, String>,
    t: Tuning,
    listener: TcpListener,
) -> Node {
    let (applier, opts) = common::open_kv(&dir.join("data"));
    RaftNode::start_on(config(id, dir, addrs, t), listener, opts, applier)
        .await
        .unwrap()
}

impl Group {
    async fn start(snapshot_every: u64) -> Group {
        // RUST_LOG=openraft=debug,basalt_raft=debug shows what the nodes do.
        if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
        Group::start_tuned(Tuning::snapshot_every(snapshot_every)).await
    }

    async fn start_tuned(tuning: Tuning) -> Group {
        let tmp = TempDir::new().unwrap();
        let mut listeners = BTreeMap::new();
        let mut addrs = BTreeMap::new();
        let mut dirs = BTreeMap::new();
        for id in 1..=3u64 {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.insert(id, l.local_addr().unwrap().to_string());
            listeners.insert(id, l);
            dirs.insert(id, tmp.path().join(format!("n{id}")));
        }
        let mut nodes = BTreeMap::new();
        for (id, l) in listeners {
            nodes.insert(id, start_node(id, &dirs[&id], &addrs, tuning, l).await);
        }
        Group {
            _tmp: tmp,
            dirs,
            addrs,
            nodes,
            tuning,
        }
    }

    /// Waits (at most 10 s) until the running nodes agree on a leader among
    /// them.
    async fn leader(&self) -> NodeId {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen: Vec<Option<NodeId>> = self
                .nodes
                .values()
                .map(|n| n.leader().map(|l| l.0))
                .collect();
            if let Some(Some(l)) = seen.first() {
                if seen.iter().all(|s| *s == Some(*l)) && self.nodes.contains_key(l) {
                    return *l;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader within 10 s: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(&mut self, id: NodeId) {
        let node = self.nodes.remove(&id).unwrap();
        node.shutdown().await.unwrap();
    }

    async fn restart(&mut self, id: NodeId) {
        // The port was just released by the stopped node's listener.
        let deadline = Instant::now() + Duration::from_secs(5);
        let l = loop {
            match TcpListener::bind(&self.addrs[&id]).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(Instant::now() < deadline, "rebind {}: {e}", self.addrs[&id]);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let node = start_node(id, &self.dirs[&id], &self.addrs, self.tuning, l).await;
        self.nodes.insert(id, node);
    }

    /// Waits (at most 10 s) until every running node holds the same data,
    /// and returns it.
    async fn converged(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let dumps: Vec<_> = self
                .nodes
                .values()
                .map(|n| n.state_machine().applier().dump())
                .collect();
            if dumps.windows(2).all(|w| w[0] == w[1]) {
                return dumps.into_iter().next().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "nodes did not converge within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn get(data: &[(Vec<u8>, Vec<u8>)], k: &str) -> Option<String> {
    data.iter()
        .find(|(key, _)| key == k.as_bytes())
        .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_started_with_the_same_peers_form_a_group_and_replicate_writes() {
    let g = Group::start(50_000).await;
    let leader = g.leader().await;
    let node = &g.nodes[&leader];
    for i in 0..100 {
        let reply = node
            .write(Op::Incr(b"counter".to_vec()).bytes())
            .await
            .unwrap();
        assert_eq!(reply, (i + 1).to_string().into_bytes());
    }
    node.write(Op::Set(b"k".to_vec(), b"v".to_vec()).bytes())
        .await
        .unwrap();
    let data = g.converged().await;
    assert_eq!(get(&data, "counter").as_deref(), Some("100"));
    assert_eq!(get(&data, "k").as_deref(), Some("v"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_on_a_follower_is_forwarded_to_the_leader() {
    let g = Group::start(50_000).await;
    let leader = g.leader().await;
    let follower = g.nodes.keys().copied().find(|&id| id != leader).unwrap();
    let node = &g.nodes[&follower];
    let a = node.write(Op::Incr(b"c".to_vec()).bytes()).await.unwrap();
    let b = node.write(Op::Incr(b"c".to_vec()).bytes()).await.unwrap();
    assert_eq!((a, b), (b"1".to_vec(), b"2".to_vec()));
    // After the read barrier the follower's own state has both.
    node.read_barrier(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        node.state_machine()
            .applier()
            .db
            .get(b"c")
            .unwrap()
            .as_deref(),
        Some(&b"2"[..])
    );
    let data = g.converged().await;
    assert_eq!(get(&data, "c").as_deref(), Some("2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_the_leader_elects_another_that_keeps_every_acknowledged_write() {
    let mut g = Group::start(50_000).await;
    let mut acked = 0u64;
    for round in 0..3 {
        let leader = g.leader().await;
        for _ in 0..50 {
            let reply = g.nodes[&leader]
                .write(Op::Incr(b"c".to_vec()).bytes())
                .await
                .unwrap();
            acked += 1;
            assert_eq!(reply, acked.to_string().into_bytes(), "round {round}");
        }
        let stopped_at = Instant::now();
        g.stop(leader).await;
        let new_leader = g.leader().await;
        assert_ne!(new_leader, leader);
        let took = stopped_at.elapsed();
        assert!(took < Duration::from_secs(5), "election took {took:?}");
        // The new leader has every acknowledged increment, applied once.
        let reply = g.nodes[&new_leader]
            .write(Op::Incr(b"c".to_vec()).bytes())
            .await
            .unwrap();
        acked += 1;
        assert_eq!(reply, acked.to_string().into_bytes());
        // The old leader rejoins from its files and catches up.
        g.restart(leader).await;
        let data = g.converged().await;
        assert_eq!(get(&data, "c"), Some(acked.to_string()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_missed_purged_entries_catches_up_from_a_snapshot() {
    let mut g = Group::start(20).await;
    let leader = g.leader().await;
    let lagging = g.nodes.keys().copied().find(|&id| id != leader).unwrap();
    g.stop(lagging).await;
    for i in 0..300u32 {
        let op = Op::Set(
            format!("k{}", i % 37).into_bytes(),
            i.to_string().into_bytes(),
        );
        g.nodes[&leader].write(op.bytes()).await.unwrap();
    }
    g.nodes[&leader]
        .write(Op::Del(b"k0".to_vec()).bytes())
        .await
        .unwrap();
    // A snapshot larger than one 3 MiB chunk, and appends larger than
    // axum's 2 MB default body (both were refused with 413 once).
    let big = vec![b'v'; 100_000];
    for j in 0..40u32 {
        let op = Op::Set(format!("big{j}").into_bytes(), big.clone());
        g.nodes[&leader].write(op.bytes()).await.unwrap();
    }
    // Well past `snapshot_every`: every running node has snapshotted; force
    // the purge (they keep 50,000 entries after a snapshot) on both, so that
    // whichever leads when the lagging node returns (its return may start an
    // election) has only a snapshot to offer it.
    let last = g.nodes[&leader].raft().metrics().borrow().last_applied;
    for node in g.nodes.values() {
        let raft = node.raft().clone();
        // A follower learns the last commit from the next heartbeat.
        raft.wait(Some(Duration::from_secs(10)))
            .applied_index_at_least(last.map(|l| l.index), "caught up")
            .await
            .unwrap();
        raft.trigger().snapshot().await.unwrap();
        // The snapshot is built in the background; a purge asked for before
        // it exists stops short of it.
        raft.wait(Some(Duration::from_secs(10)))
            .metrics(
                |m| m.snapshot.is_some_and(|s| s.index >= 330),
                "snapshot built",
            )
            .await
            .unwrap();
        raft.trigger().purge_log(330).await.unwrap();
        raft.wait(Some(Duration::from_secs(10)))
            .metrics(|m| m.purged.is_some_and(|p| p.index >= 330), "log purged")
            .await
            .unwrap();
    }
    g.restart(lagging).await;
    let data = g.converged().await;
    assert_eq!(data.len(), 36 + 40);
    assert_eq!(get(&data, "big39").map(|v| v.len()), Some(100_000));
    assert_eq!(get(&data, "k0"), None);
    assert_eq!(get(&data, "k1").as_deref(), Some("297"));
    // openraft records the install once the data is in place: wait for it.
    g.nodes[&lagging]
        .raft()
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.snapshot.is_some_and(|s| s.index >= 330),
            "the lagging node installed a snapshot",
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_learns_the_leaders_client_address() {
    let g = Group::start(50_000).await;
    let leader = g.leader().await;
    let want = format!("client-of-{leader}:7000");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen: Vec<String> = g
            .nodes
            .values()
            .map(|n| n.leader().map(|l| l.1.client).unwrap_or_default())
            .collect();
        if seen.iter().all(|c| *c == want) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "client addresses not published: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The leader's lease: with both followers gone, the leader still passes
/// the read barrier at once (no heartbeat round could succeed now), for
/// at most half the followers' lease after their last acknowledgement;
/// then the barrier fails, as ReadIndex without a majority must.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_reads_under_its_lease_until_it_expires() {
    // Elections after 3-6 s of silence: the leader's lease is 3 s.
    let mut g = Group::start_tuned(Tuning {
        snapshot_every: 1000,
        election_ms: (3000, 6000),
    })
    .await;
    let leader = g.leader().await;
    // An entry of the leader's own term is applied (its first, blank one
    // is; a write makes sure).
    g.nodes[&leader]
        .write(Op::Set(b"k".to_vec(), b"v".to_vec()).bytes())
        .await
        .unwrap();
    let followers: Vec<NodeId> = g.nodes.keys().copied().filter(|&id| id != leader).collect();
    let cut = Instant::now();
    for f in followers {
        g.stop(f).await;
    }
    let r = g.nodes[&leader]
        .read_barrier(Duration::from_millis(200))
        .await;
    assert!(
        cut.elapsed() > Duration::from_millis(2500) || r.is_ok(),
        "within the lease: {r:?}"
    );
    tokio::time::sleep(Duration::from_millis(3200).saturating_sub(cut.elapsed())).await;
    let r = g.nodes[&leader]
        .read_barrier(Duration::from_millis(300))
        .await;
    assert!(r.is_err(), "past the lease, without a majority: {r:?}");
}
