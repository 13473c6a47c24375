//! Micro-benchmark of the sorted-set index ([`ZIndex`]) on one big set.
//!
//! `cargo bench -p basalt-server --bench zindex` (not built by `cargo test`).
//! `ZBENCH_N` sets the set's size (default 1,000,000 members named
//! `member:<i>`, as in the memory test `ZADD bench:zset <i> member:<i>`).
//!
//! Before criterion runs, a one-shot report prints what criterion is bad at:
//! building the whole index in random order (ns per insert), rebuilding it
//! with `ZIndex::from_items` (as a load from the engine does), and the index's
//! heap bytes per member, counted exactly by a counting global allocator
//! (bytes requested from the allocator, live after the build; malloc's own
//! per-chunk overhead comes on top).
//!
//! The criterion cases then run on a full set, each op on a random member:
//! - `update_random_score`: a new random score (most moves cross the list,
//!   as `redis-benchmark -t zadd` does);
//! - `update_small_delta`: the score nudged by a tiny amount (the node stays
//!   between its neighbours);
//! - `score`, `rank`: lookups;
//! - `pop_min_insert`: remove the lowest member and add one back with a
//!   random score (ZPOPMIN at a steady size).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use basalt_server::zindex::ZIndex;
use criterion::Criterion;

/// Counts the bytes live on the heap.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments, so
// `System`'s guarantees carry over; the counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// xorshift64: cheap, deterministic randomness for the workloads.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn score(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64
    }
}

fn size() -> usize {
    std::env::var("ZBENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

fn members(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("member:{i}").into_bytes()).collect()
}

/// The set with member i at score i, inserted in a random order.
fn build(members: &[Vec<u8>], rng: &mut Rng) -> ZIndex {
    let mut order: Vec<usize> = (0..members.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut ix = ZIndex::new();
    for i in order {
        ix.insert(&members[i], i as f64);
    }
    ix
}

fn report(members: &[Vec<u8>]) {
    let n = members.len();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let before = LIVE.load(Ordering::Relaxed);
    let t = Instant::now();
    let ix = build(members, &mut rng);
    let el = t.elapsed();
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    let member_bytes: usize = members.iter().map(Vec::len).sum();
    println!(
        "zindex report: {n} members ({:.1} bytes of member name each)",
        member_bytes as f64 / n as f64
    );
    println!(
        "  build in random order: {:.0} ns/insert",
        el.as_nanos() as f64 / n as f64
    );
    println!(
        "  heap: {:.1} bytes/member allocated (approx_bytes says {:.1})",
        bytes as f64 / n as f64,
        ix.approx_bytes() as f64 / n as f64
    );
    let items: Vec<(Vec<u8>, f64)> = ix.iter().map(|(m, s)| (m.to_vec(), s)).collect();
    drop(ix);
    let t = Instant::now();
    let ix = ZIndex::from_items(items);
    println!(
        "  rebuild with from_items (sort, then append): {:.0} ns/member",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    drop(ix);
}

fn benches(c: &mut Criterion, members: &[Vec<u8>]) {
    let n = members.len();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut ix = build(members, &mut rng);
    let mut g = c.benchmark_group(format!("zindex_{n}"));
    g.sample_size(20);
    g.bench_function("update_random_score", |b| {
        b.iter(|| {
            let m = &members[rng.below(n)];
            black_box(ix.insert(m, rng.score()))
        })
    });
    g.bench_function("update_small_delta", |b| {
        b.iter(|| {
            let m = &members[rng.below(n)];
            let s = ix.score(m).expect("member");
            black_box(ix.insert(m, s + 1e-9))
        })
    });
    g.bench_function("score", |b| {
        b.iter(|| black_box(ix.score(&members[rng.below(n)])))
    });
    g.bench_function("rank", |b| {
        b.iter(|| black_box(ix.rank(&members[rng.below(n)])))
    });
    g.bench_function("pop_min_insert", |b| {
        b.iter(|| {
            let first = ix.by_rank(0).expect("not empty");
            let m = ix.entry(first).0.to_vec();
            ix.remove(&m);
            black_box(ix.insert(&m, rng.score()))
        })
    });
    g.finish();
}

fn main() {
    let members = members(size());
    report(&members);
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(4));
    benches(&mut c, &members);
    c.final_summary();
}
