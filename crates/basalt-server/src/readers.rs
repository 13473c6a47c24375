//! Cold reads off the worker threads.
//!
//! The one idea a reader needs: a GET whose value is not in memory
//! (`basalt_engine::Db::get_or_cold`) is not read by the worker thread
//! that runs the command, because a disk read there stalls every client
//! the worker carries. The command hands the read to this pool and leaves
//! a placeholder in its connection's output ([`Deferred`]); the pool's
//! threads read with `pread`, many at once (as many as there are threads),
//! and send back the encoded reply; the connection splices the replies in,
//! in order, before it writes ([`settle`]). Other connections of the worker
//! run meanwhile, and so do the later commands of the same pipeline, whose
//! replies wait behind the placeholder.
//!
//! When reads are checked at all is the residency policy (`read-residency`,
//! [`Policy`]): `auto` asks the kernel only while the data files are larger
//! than half of the memory the process may use, because a data set that
//! fits stays cached and the check would be a system call per GET for
//! nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use basalt_engine::{ColdRead, Residency};
use basalt_resp::{Encoder, Protocol};
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// A reply that a reader thread is producing, and where it goes in the
/// connection's output buffer.
#[derive(Debug)]
pub struct Deferred {
    /// Offset in the output buffer: the reply goes before the byte that is
    /// there now (the next command's reply).
    pub at: usize,
    rx: oneshot::Receiver<Vec<u8>>,
}

/// Most placeholders one connection keeps before it waits for them: the
/// reads in flight for one client, and the memory its batch may hold.
pub const MAX_DEFERRED: usize = 512;

type Job = Box<dyn FnOnce() + Send>;

/// The reader threads.
#[derive(Debug)]
pub struct ColdReaders {
    tx: Option<Mutex<mpsc::Sender<Job>>>,
    /// Cold reads served (INFO `basalt_cold_reads`).
    pub served: Arc<AtomicU64>,
}

impl ColdReaders {
    /// Starts `threads` readers; 0 starts none, and every read is then made
    /// in place by the thread that runs the command.
    pub fn start(threads: usize) -> ColdReaders {
        let served = Arc::new(AtomicU64::new(0));
        if threads == 0 {
            return ColdReaders { tx: None, served };
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("basalt-read-{i}"))
                // A reader holds one record at a time.
                .stack_size(256 << 10)
                .spawn(move || loop {
                    // One thread waits in `recv`, the others for the lock;
                    // the channel closes when the server's state is dropped.
                    let job = rx.lock().recv();
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, started = i, "could not start every cold reader");
                if i == 0 {
                    return ColdReaders { tx: None, served };
                }
                break;
            }
        }
        ColdReaders {
            tx: Some(Mutex::new(tx)),
            served,
        }
    }

    /// Whether reads may be handed over at all.
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Reads `read` on a reader thread and returns the value (for callers
    /// that can await: the HTTP API). Without readers, reads here.
    pub async fn read_value(&self, read: ColdRead) -> basalt_engine::Result<Vec<u8>> {
        let Some(tx) = self.tx.as_ref() else {
            return read.read_with(|v| v.to_vec());
        };
        let (done, rx) = oneshot::channel();
        let served = self.served.clone();
        let job: Job = Box::new(move || {
            let r = read.read_with(|v| v.to_vec());
            served.fetch_add(1, Ordering::Relaxed);
            let _ = done.send(r);
        });
        let gone = || basalt_engine::Error::Io {
            op: "read",
            path: std::path::PathBuf::new(),
            source: std::io::Error::other("the cold read was abandoned"),
        };
        if tx.lock().send(job).is_err() {
            return Err(gone());
        }
        rx.await.unwrap_or_else(|_| Err(gone()))
    }

    /// Hands `read` to a reader; its reply (the value as a bulk string, or
    /// the error line) is to be placed at `at` of the caller's output.
    /// `None` when there are no readers (the caller reads in place).
    pub fn submit(&self, read: ColdRead, protocol: Protocol, at: usize) -> Option<Deferred> {
        let (done, rx) = oneshot::channel();
        self.run(read, Want::Bulk(protocol), done).ok()?;
        Some(Deferred { at, rx })
    }

    /// Reads `read` on a reader thread and sends what `want` asks for
    /// through `done`; gives `done` back when there are no readers.
    pub(crate) fn run(
        &self,
        read: ColdRead,
        want: Want,
        done: oneshot::Sender<Vec<u8>>,
    ) -> Result<(), oneshot::Sender<Vec<u8>>> {
        let Some(tx) = self.tx.as_ref() else {
            return Err(done);
        };
        let served = self.served.clone();
        let job: Job = Box::new(move || {
            let out = want.read(&read);
            served.fetch_add(1, Ordering::Relaxed);
            // The connection may have gone; its reply goes nowhere.
            let _ = done.send(out);
        });
        // Refused only once the readers are gone (shutdown): the job, and
        // the sender in it, is dropped, and `settle` reports the read
        // abandoned.
        let _ = tx.lock().send(job);
        Ok(())
    }
}

/// What a cold read hands back.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Want {
    /// The value as a bulk-string reply (or the error line), for a
    /// placeholder.
    Bulk(Protocol),
    /// The whole record, checked, to stage for a command
    /// (`basalt_engine::stage_record`); empty when the read failed (the
    /// command then reads it itself and reports the error).
    Record,
}

impl Want {
    /// Reads `read` here (a reader thread) and returns what is wanted.
    pub(crate) fn read(self, read: &ColdRead) -> Vec<u8> {
        match self {
            Want::Bulk(protocol) => {
                reply_or_error(read.read_with(|v| bulk_reply(v, protocol)), protocol)
            }
            Want::Record => read.read_record().unwrap_or_default(),
        }
    }

    /// What to hand back for a read that could not be made: an error
    /// line for a placeholder, nothing for a fetch ahead (the command then
    /// reads the record itself and reports what it finds).
    pub(crate) fn failed(self, why: &str) -> Vec<u8> {
        match self {
            Want::Bulk(protocol) => {
                let mut out = Vec::new();
                Encoder::new(&mut out, protocol).error(format!("ERR {why}").as_bytes());
                out
            }
            Want::Record => Vec::new(),
        }
    }

    /// What is wanted, from the record bytes a submitted read fetched.
    pub(crate) fn of_record(self, read: &ColdRead, record: &[u8]) -> Vec<u8> {
        match self {
            Want::Bulk(protocol) => {
                reply_or_error(read.finish(record, |v| bulk_reply(v, protocol)), protocol)
            }
            Want::Record => match read.check_record(record) {
                Ok(()) => record.to_vec(),
                Err(_) => Vec::new(),
            },
        }
    }
}

/// `v` as a bulk-string reply.
pub(crate) fn bulk_reply(v: &[u8], protocol: Protocol) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() + 16);
    Encoder::new(&mut out, protocol).bulk(v);
    out
}

/// Submits `read` for its whole record, checked (empty if the read
/// failed), on this worker's io_uring or else to the reader threads; with
/// neither, the sender is dropped and the caller reads the record itself.
pub(crate) fn fetch_record(readers: &ColdReaders, read: ColdRead) -> oneshot::Receiver<Vec<u8>> {
    match crate::uring::submit_record(read) {
        Ok(rx) => rx,
        Err(read) => {
            let (done, rx) = oneshot::channel();
            let _ = readers.run(read, Want::Record, done);
            rx
        }
    }
}

/// The reply for a cold read's outcome: the encoded value, or the error
/// line (logged: a failed disk read is worth an operator's attention).
pub(crate) fn reply_or_error(r: basalt_engine::Result<Vec<u8>>, protocol: Protocol) -> Vec<u8> {
    r.unwrap_or_else(|e| {
        tracing::error!(error = %e, "cold read failed");
        let mut out = Vec::new();
        let e = crate::commands::Error::from(e);
        Encoder::new(&mut out, protocol).error(e.message().as_bytes());
        out
    })
}

impl Deferred {
    /// A placeholder at `at` whose reply comes through `rx`.
    pub(crate) fn new(at: usize, rx: oneshot::Receiver<Vec<u8>>) -> Deferred {
        Deferred { at, rx }
    }
}

/// Waits for every placeholder's reply and puts each at its place in `out`.
/// A reader that vanished (it cannot: readers never end while the server
/// runs) leaves an error line rather than a missing reply.
pub async fn settle(out: &mut Vec<u8>, deferred: &mut Vec<Deferred>) {
    if deferred.is_empty() {
        return;
    }
    let mut replies = Vec::with_capacity(deferred.len());
    let mut extra = 0;
    for d in deferred.iter_mut() {
        let r = (&mut d.rx)
            .await
            .unwrap_or_else(|_| b"-ERR cold read abandoned\r\n".to_vec());
        extra += r.len();
        replies.push(r);
    }
    let mut joined = Vec::with_capacity(out.len() + extra);
    let mut from = 0;
    for (d, r) in deferred.drain(..).zip(replies) {
        joined.extend_from_slice(&out[from..d.at]);
        joined.extend_from_slice(&r);
        from = d.at;
    }
    joined.extend_from_slice(&out[from..]);
    *out = joined;
}

/// `read-residency`: when reads check whether their value is in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Check while the data files exceed half the memory budget.
    Auto,
    /// Always check (`mincore` per GET, sampled while GETs keep finding
    /// their values resident).
    Check,
    /// Never check: every read in place, as before cold reads existed.
    InPlace,
    /// Hand every GET of a one-record value to the readers (tests, and
    /// measuring the detour's cost).
    AllCold,
}

impl Policy {
    /// Parses a setting's value.
    pub fn parse(s: &str) -> Option<Policy> {
        Some(match s.to_ascii_lowercase().as_str() {
            "auto" => Policy::Auto,
            "check" => Policy::Check,
            "in-place" => Policy::InPlace,
            "all-cold" => Policy::AllCold,
            _ => return None,
        })
    }

    /// The setting's value.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Auto => "auto",
            Policy::Check => "check",
            Policy::InPlace => "in-place",
            Policy::AllCold => "all-cold",
        }
    }

    /// The engine's mode for `data_bytes` of data files when the process
    /// may use `budget` bytes of memory.
    pub fn residency(self, data_bytes: u64, budget: u64) -> Residency {
        match self {
            Policy::Auto if data_bytes > budget / 2 => Residency::Check,
            Policy::Auto | Policy::InPlace => Residency::InPlace,
            Policy::Check => Residency::Check,
            Policy::AllCold => Residency::AllCold,
        }
    }
}

/// The memory this process may use: the machine's, or less if its cgroup
/// (v1 `memory.limit_in_bytes` or v2 `memory.max`) says so.
pub fn memory_budget() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| crate::commands::server::proc_kb_field(&m, "MemTotal:"))
        .unwrap_or(u64::MAX);
    total.min(cgroup_limit().unwrap_or(u64::MAX))
}

fn cgroup_limit() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut best: Option<u64> = None;
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let file = if controllers.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else {
            continue;
        };
        if let Some(n) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            best = Some(best.map_or(n, |b| b.min(n)));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_checks_only_when_the_data_outgrows_half_the_budget() {
        let gib = 1u64 << 30;
        assert_eq!(Policy::Auto.residency(gib, 4 * gib), Residency::InPlace);
        assert_eq!(Policy::Auto.residency(3 * gib, 4 * gib), Residency::Check);
        assert_eq!(Policy::InPlace.residency(9 * gib, gib), Residency::InPlace);
        assert_eq!(Policy::Check.residency(0, gib), Residency::Check);
        assert_eq!(Policy::AllCold.residency(0, gib), Residency::AllCold);
        for p in [
            Policy::Auto,
            Policy::Check,
            Policy::InPlace,
            Policy::AllCold,
        ] {
            assert_eq!(Policy::parse(p.name()), Some(p));
        }
        assert_eq!(Policy::parse("sometimes"), None);
    }

    #[test]
    fn the_memory_budget_is_read_from_the_machine() {
        let b = memory_budget();
        assert!(b > 0 && b < u64::MAX, "{b}");
    }

    #[tokio::test]
    async fn settled_replies_land_where_their_commands_were() {
        let mut out = b"+A\r\n+C\r\n".to_vec();
        let (t1, r1) = oneshot::channel();
        let (t2, r2) = oneshot::channel();
        let mut deferred = vec![Deferred { at: 0, rx: r1 }, Deferred { at: 4, rx: r2 }];
        // Answered out of order.
        t2.send(b"$1\r\nb\r\n".to_vec()).unwrap();
        t1.send(b"$1\r\na\r\n".to_vec()).unwrap();
        settle(&mut out, &mut deferred).await;
        assert_eq!(out, b"$1\r\na\r\n+A\r\n$1\r\nb\r\n+C\r\n");
        assert!(deferred.is_empty());
    }
}
