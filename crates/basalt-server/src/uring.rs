//! Cold reads submitted by the connection workers themselves, through
//! io_uring.
//!
//! The one idea: **a worker that needs a value from the disk asks the
//! kernel for it and goes on serving.** Handing the read to a reader thread
//! (`crate::readers`) costs two thread wake-ups and two context switches
//! per read, which on a busy machine were the largest cost of a cold GET
//! after the disk itself. Here each worker thread has its own ring: a cold
//! read becomes a submission queue entry ([`submit`]) pointing into an
//! aligned buffer the ring owns, the entries a turn of the event loop
//! queued are submitted together by the ring's driver task (one system
//! call), and the kernel's completions wake the same task through an
//! eventfd registered with the worker's reactor; it checks each record
//! (CRC, key), encodes the reply and sends it to the connection's
//! placeholder (`readers::Deferred`), exactly as a reader thread would.
//!
//! The ring is an optimisation with a fallback, never a requirement: where
//! io_uring is missing or refused (old kernels, seccomp, `io-uring no`),
//! where the file hands out no descriptor (test file systems), or where a read comes back short or failed
//! (the reader thread then retries it through the engine, which reports
//! the error properly), the read goes to the reader threads. Past its
//! depth ([`ring_depth`]: the workers share half the disk's request queue)
//! reads wait in the ring's backlog.
//!
//! Safety of the buffers: the kernel writes into a slot's buffer until the
//! slot's completion arrives, so a slot (and its buffer) is freed only by
//! its completion, and a ring that is dropped with reads in flight first
//! waits for all of them.

use std::cell::RefCell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use basalt_engine::vfs::DirectBuf;
use basalt_engine::{ColdRead, ReadPlan};
use basalt_resp::Protocol;
use io_uring::{opcode, types, IoUring};
use tokio::io::unix::AsyncFd;
use tokio::sync::{oneshot, Notify};

use crate::readers::{Deferred, Want};
use crate::state::Shared;

/// Reads one ring keeps in flight at most (its submission queue's size;
/// the completion queue is twice that, so it never overflows), whatever
/// the disk: more wait in the ring's backlog.
const MAX_DEPTH: usize = 64;

/// Reads one ring keeps in flight at least.
const MIN_DEPTH: usize = 4;

/// Reads all rings together keep in flight where the disk's queue cannot
/// be read from sysfs (no block device under the data directory).
const DEFAULT_DISK_DEPTH: usize = 128;

/// Reads one ring keeps in flight: half the request queue of the disk
/// holding the data directory (`queue/nr_requests`; the other half is
/// left to writes and other processes), shared evenly among the workers,
/// between [`MIN_DEPTH`] and [`MAX_DEPTH`].
///
/// Why bound all rings together: a disk takes only so many requests at
/// once, and past that a submission waits for one in the submitting
/// thread, which here is a worker with every client on it. With 16
/// workers at 64 reads each (1,024 in flight against a 256-request
/// queue), a hot key's p99 under cold load was 12 ms on a 16-core
/// machine; at 8 each, 0.3 ms (`docs/benchmarks.md`). A fixed share per
/// ring needs no coordination between workers and starves none: a shared
/// counter, tried first, let busy rings take every freed place (a cold
/// GET's p99 went to 172 ms).
fn ring_depth(config: &crate::config::Config) -> usize {
    depth_for(disk_queue(&config.dir), config.workers())
}

fn depth_for(disk_queue: Option<usize>, workers: usize) -> usize {
    let disk = disk_queue.map_or(DEFAULT_DISK_DEPTH, |n| n / 2);
    (disk / workers.max(1)).clamp(MIN_DEPTH, MAX_DEPTH)
}

/// The request queue length of the block device holding `dir`.
fn disk_queue(dir: &std::path::Path) -> Option<usize> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = std::path::PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A whole disk has `queue/`; a partition's is its disk's.
    ["queue/nr_requests", "../queue/nr_requests"]
        .iter()
        .find_map(|q| {
            std::fs::read_to_string(base.join(q))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .filter(|&n: &usize| n > 0)
}

/// Queued entries that are submitted at once rather than at the end of
/// the turn.
const SUBMIT_EARLY: u32 = 16;

/// A buffer larger than this is not kept for the next read (a span read
/// ahead is at most 256 KiB, plus its alignment).
const KEEP_BUF: usize = 264 << 10;

/// One read the kernel is working on.
struct Slot {
    read: ColdRead,
    plan: ReadPlan,
    buf: DirectBuf,
    want: Want,
    done: oneshot::Sender<Vec<u8>>,
}

/// A read waiting for a free slot.
struct Waiting {
    read: ColdRead,
    plan: ReadPlan,
    want: Want,
    done: oneshot::Sender<Vec<u8>>,
}

/// A worker's ring and the reads it carries.
struct Ring {
    ring: IoUring,
    /// Registered with the ring: readable when completions arrived.
    eventfd: Rc<AsyncFd<OwnedFd>>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Reads waiting for a slot, in arrival order.
    backlog: std::collections::VecDeque<Waiting>,
    bufs: Vec<DirectBuf>,
    /// Entries pushed and not yet submitted.
    queued: u32,
    /// Wakes the driver to submit what a turn queued.
    submit: Rc<Notify>,
    shared: Arc<Shared>,
}

thread_local! {
    static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// Workers with a ring now (INFO `basalt_io_uring_rings`).
pub(crate) static RINGS: AtomicUsize = AtomicUsize::new(0);
/// Reads each ring keeps in flight at most (INFO `basalt_io_uring_depth`;
/// 0 until a ring exists).
pub(crate) static DEPTH: AtomicUsize = AtomicUsize::new(0);
/// Cold reads a ring completed (INFO `basalt_cold_reads_io_uring`).
pub(crate) static READS: AtomicU64 = AtomicU64::new(0);

/// Sets up this worker thread's ring and drives it: submits what a turn
/// queued, and finishes reads as their completions arrive. Never returns
/// (the worker stops polling it at shutdown, then calls [`stop`]); pends
/// for ever, and reads go to the reader threads, when the setting is off,
/// there are no reader threads to fall back on, or the kernel refuses a
/// ring.
pub(crate) async fn serve(shared: Arc<Shared>) {
    if !shared.config.uses_io_uring() || !shared.readers.enabled() {
        return std::future::pending().await;
    }
    let (eventfd, submit) = match Ring::new(shared) {
        Ok(ring) => {
            let handles = (ring.eventfd.clone(), ring.submit.clone());
            RING.with(|r| *r.borrow_mut() = Some(ring));
            RINGS.fetch_add(1, Ordering::Relaxed);
            handles
        }
        Err(e) => {
            tracing::info!(error = %e, "no io_uring for cold reads; reader threads serve them");
            return std::future::pending().await;
        }
    };
    loop {
        // Finish what completed and submit what is queued; entries the
        // kernel could not take now (short of memory) are retried after a
        // pause, not in a loop that would starve the connections.
        let stalled = RING.with(|r| match r.borrow_mut().as_mut() {
            Some(ring) => {
                ring.reap();
                ring.flush();
                ring.queued > 0
            }
            None => false,
        });
        if stalled {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            continue;
        }
        tokio::select! {
            _ = submit.notified() => {}
            ready = eventfd.readable() => {
                let Ok(mut guard) = ready else {
                    // The reactor is gone: no completion could be seen.
                    // Later reads go to the reader threads.
                    stop();
                    return std::future::pending().await;
                };
                let mut count = [0u8; 8];
                // SAFETY: reads at most 8 bytes into `count`; the descriptor
                // is a non-blocking eventfd we own. One read takes the whole
                // count; a completion signalled after it is a new readiness
                // event, which `clear_ready` keeps.
                let _ = unsafe {
                    libc::read(eventfd.get_ref().as_raw_fd(), count.as_mut_ptr().cast(), 8)
                };
                guard.clear_ready();
            }
        }
    }
}

/// Drops this worker's ring, after waiting for its reads in flight. Called
/// by the worker once its connections are done, on its runtime.
pub(crate) fn stop() {
    if let Some(ring) = RING.with(|r| r.borrow_mut().take()) {
        RINGS.fetch_sub(1, Ordering::Relaxed);
        drop(ring);
    }
}

/// Submits `read` on this worker's ring; its reply is to be placed at `at`
/// of the caller's output. Gives the read back when the ring cannot take
/// it (no ring on this thread, no descriptor to read).
pub(crate) fn submit(read: ColdRead, protocol: Protocol, at: usize) -> Result<Deferred, ColdRead> {
    push(read, Want::Bulk(protocol)).map(|rx| Deferred::new(at, rx))
}

/// Submits `read` on this worker's ring for its whole record, checked
/// (empty if the read failed): bytes to stage for a command. Gives the
/// read back when the ring cannot take it.
pub(crate) fn submit_record(read: ColdRead) -> Result<oneshot::Receiver<Vec<u8>>, ColdRead> {
    push(read, Want::Record)
}

fn push(read: ColdRead, want: Want) -> Result<oneshot::Receiver<Vec<u8>>, ColdRead> {
    RING.with(|r| match r.borrow_mut().as_mut() {
        Some(ring) => ring.push(read, want),
        None => Err(read),
    })
}

impl Ring {
    fn new(shared: Arc<Shared>) -> std::io::Result<Ring> {
        let depth = ring_depth(&shared.config);
        DEPTH.store(depth, Ordering::Relaxed);
        let ring = IoUring::builder()
            .setup_cqsize(2 * depth as u32)
            .build(depth as u32)?;
        let mut probe = io_uring::Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::Read::CODE) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this kernel's io_uring has no read operation",
            ));
        }
        // SAFETY: eventfd has no memory preconditions; a non-negative
        // return is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(fd.as_raw_fd())?;
        // SAFETY: `OwnedFd` always returns the descriptor it owns, which
        // stays open until the `AsyncFd` (its owner) is dropped.
        let eventfd =
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?;
        Ok(Ring {
            ring,
            eventfd: Rc::new(eventfd),
            slots: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            backlog: std::collections::VecDeque::new(),
            bufs: Vec::new(),
            queued: 0,
            submit: Rc::new(Notify::new()),
            shared,
        })
    }

    fn push(
        &mut self,
        mut read: ColdRead,
        want: Want,
    ) -> Result<oneshot::Receiver<Vec<u8>>, ColdRead> {
        let Some(plan) = read.plan() else {
            return Err(read);
        };
        let (done, rx) = oneshot::channel();
        let waiting = Waiting {
            read,
            plan,
            want,
            done,
        };
        match self.free.pop() {
            Some(slot) => self.start(slot, waiting),
            None => self.backlog.push_back(waiting),
        }
        Ok(rx)
    }

    /// Queues `w`'s read in `slot` (free) for the next submission.
    fn start(&mut self, slot: usize, w: Waiting) {
        let mut buf = self.bufs.pop().unwrap_or_default();
        let ptr = buf.bytes_mut(w.plan.len).as_mut_ptr();
        let entry = opcode::Read::new(types::Fd(w.plan.fd), ptr, w.plan.len as u32)
            .offset(w.plan.offset)
            .build()
            .user_data(slot as u64);
        // SAFETY: the entry's descriptor stays open and its buffer stays
        // allocated and untouched until the completion for `slot` arrives:
        // both are kept in `self.slots[slot]` (the `ColdRead` holds the
        // file), which only `reap` empties, on that completion, and a
        // ring dropped with reads in flight waits for them.
        if unsafe { self.ring.submission().push(&entry) }.is_err() {
            // Cannot happen: the queue has a place for every slot. Should
            // it, the read goes to a reader thread.
            self.free.push(slot);
            self.bufs.push(buf);
            if let Err(done) = self.shared.readers.run(w.read, w.want, w.done) {
                let _ = done.send(w.want.failed("cold read could not be queued"));
            }
            return;
        }
        self.slots[slot] = Some(Slot {
            read: w.read,
            plan: w.plan,
            buf,
            want: w.want,
            done: w.done,
        });
        self.queued += 1;
        if self.queued >= SUBMIT_EARLY {
            self.flush();
        } else if self.queued == 1 {
            self.submit.notify_one();
        }
    }

    /// Submits the queued entries. What the kernel does not take (it may
    /// take some, or none, when short of memory) stays queued, and the
    /// driver is woken to try again.
    fn flush(&mut self) {
        if self.queued == 0 {
            return;
        }
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "io_uring submit deferred");
                    break;
                }
            }
        }
        self.queued = self.ring.submission().len() as u32;
        if self.queued > 0 {
            self.submit.notify_one();
        }
    }

    /// Takes every completion, finishing its read.
    fn reap(&mut self) {
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (slot, res) in done {
            let Some(s) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
                continue;
            };
            self.free.push(slot as usize);
            let Slot {
                read,
                plan,
                mut buf,
                want,
                done,
            } = s;
            let mut read = read;
            if res == -libc::EINVAL && plan.direct {
                // The device wants another alignment for direct reads:
                // this one is retried through the page cache, and this
                // file's later ones are 4 KiB-aligned if they were less,
                // else not direct at all.
                read.refuse_direct(plan.align);
            }
            let got = usize::try_from(res).ok();
            let record = got.and_then(|n| plan.record(&buf.bytes_mut(plan.len)[..n.min(plan.len)]));
            match record {
                Some(record) => {
                    let out = want.of_record(&read, record);
                    self.shared.readers.served.fetch_add(1, Ordering::Relaxed);
                    READS.fetch_add(1, Ordering::Relaxed);
                    let _ = done.send(out);
                }
                // Failed or short: a reader thread retries it through the
                // engine, which falls back as it must and names the error.
                None => {
                    if let Err(done) = self.shared.readers.run(read, want, done) {
                        let _ = done.send(want.failed("cold read failed"));
                    }
                }
            }
            if buf.capacity() <= KEEP_BUF {
                self.bufs.push(buf);
            }
        }
        while !self.backlog.is_empty() {
            let Some(slot) = self.free.pop() else { break };
            let w = self.backlog.pop_front().expect("not empty");
            self.start(slot, w);
        }
    }

    fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Reads not yet given to the kernel are dropped (their connections
        // are gone); those in flight may still be written into by the
        // kernel: wait for every one of them before the buffers go.
        self.backlog.clear();
        self.flush();
        while self.in_flight() > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    tracing::error!(error = %e, in_flight = self.in_flight(),
                        "io_uring wait failed at shutdown; leaking its buffers");
                    for s in self.slots.iter_mut().filter_map(Option::take) {
                        std::mem::forget(s.buf);
                    }
                    return;
                }
            }
            self.queued = 0;
            self.reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_share_half_the_disk_queue_within_bounds() {
        // The 16-core device: 256 requests, 16 workers.
        assert_eq!(depth_for(Some(256), 16), 8);
        // Two workers on the same disk reach the most one ring keeps.
        assert_eq!(depth_for(Some(256), 2), 64);
        assert_eq!(depth_for(Some(256), 1), 64);
        // A shallow queue or many workers still leave each ring a few.
        assert_eq!(depth_for(Some(8), 16), MIN_DEPTH);
        assert_eq!(depth_for(Some(256), 0), 64);
        // No block device found: 128 for all rings together.
        assert_eq!(depth_for(None, 8), 16);
    }

    #[test]
    fn the_data_directorys_disk_queue_is_read_or_absent() {
        let dir = tempfile::tempdir().unwrap();
        // Wherever the temporary directory lives, the answer is a queue
        // length or nothing, never a zero.
        assert_ne!(disk_queue(dir.path()), Some(0));
        assert_eq!(disk_queue(&dir.path().join("missing")), None);
    }
}
