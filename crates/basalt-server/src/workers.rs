//! Connection workers: RESP connections are served by N threads, each
//! running its own single-threaded tokio runtime (thread per core), and a
//! connection that keeps meeting another worker on the same key moves to
//! that worker.
//!
//! The one idea: **a hot key gets one owner thread.** Every write command
//! takes its key's stripe lock (`crate::keyspace`). When two workers serve
//! connections that hammer the same key (every redis-benchmark collection
//! test does: one list, one sorted set), they take turns on that stripe,
//! and each turn that finds it held parks a thread on a futex and wakes it
//! again: measured, a third of the server's CPU in ZADD went to the
//! scheduler. Here a stripe remembers which worker took it last; a lock
//! that finds the stripe held notes the holder's worker; a connection whose
//! batches found the same other worker holding their stripes
//! [`MOVE_AFTER`] times in a row moves to it, if that worker serves at
//! least as many connections as this one (its socket leaves this
//! runtime's reactor, its state travels through the target's queue, and it
//! carries on there between two batches). So the connections of a hot key
//! gather on one thread, which then runs them one after another as Redis
//! would, and the other core stays free for other keys (or, on a shared
//! box, for the clients). Connections on keys spread over the keyspace
//! rarely contend twice in a row and stay where the accept loop put them.
//!
//! New connections go to the worker with the fewest connections. The main
//! runtime (HTTP API, accept loop, signals) is separate; HTTP requests that
//! take stripes are not a worker and never cause a move.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::conn::Moving;
use crate::state::Shared;

/// Consecutive batches that must each have found a stripe held by the same
/// other worker before the connection moves to that worker. One contended
/// batch happens by chance on any busy server (two connections on two
/// workers touch keys of one stripe at once); three in a row means a key
/// both workers keep using.
pub(crate) const MOVE_AFTER: u32 = 3;

/// What [`current`] answers off the worker threads (HTTP, tests).
pub(crate) const NOT_A_WORKER: u8 = u8::MAX;

thread_local! {
    /// This thread's worker index, or [`NOT_A_WORKER`].
    static INDEX: Cell<u8> = const { Cell::new(NOT_A_WORKER) };
    /// The worker last found holding a stripe this thread waited for since
    /// [`take_contention`], or [`NOT_A_WORKER`].
    static CONTENDED: Cell<u8> = const { Cell::new(NOT_A_WORKER) };
}

/// End-of-turn writes: the replies of every batch a worker runs in one turn
/// of its event loop leave together, after the last of them, as Redis
/// writes its replies before it sleeps. A client driving many connections
/// (redis-benchmark) then wakes once for many replies instead of once per
/// connection.
///
/// A connection with replies to write awaits [`end_of_turn`]: it registers
/// and wakes this worker's flusher task, which the runtime queues behind
/// every task already ready (the other connections whose sockets became
/// readable together); when the flusher runs, it releases them all, and
/// they write one after another.
#[derive(Default)]
struct Turn {
    /// Bumped by the flusher each time it releases the waiting connections.
    generation: u64,
    waiting: Vec<Waker>,
    flusher: Option<Waker>,
    /// The flusher has been woken and has not run yet.
    scheduled: bool,
}

thread_local! {
    static TURN: RefCell<Turn> = RefCell::default();
}

/// Resolves once every connection of this worker that was ready with this
/// one has run its batch (see [`Turn`]). At once off a worker thread.
pub(crate) fn end_of_turn() -> impl Future<Output = ()> {
    let mut registered: Option<u64> = None;
    std::future::poll_fn(move |cx| {
        let mut wake_flusher = None;
        let released = TURN.with(|t| {
            let mut t = t.borrow_mut();
            if t.flusher.is_none() {
                return true; // no flusher: not a worker thread
            }
            match registered {
                // A later poll: released once the flusher has run (a poll
                // before that came from the socket's own waker).
                Some(g) => t.generation > g,
                None => {
                    registered = Some(t.generation);
                    t.waiting.push(cx.waker().clone());
                    if !t.scheduled {
                        t.scheduled = true;
                        wake_flusher = t.flusher.clone();
                    }
                    false
                }
            }
        });
        // Woken outside the borrow: waking never polls in place, but the
        // flusher borrows `TURN` when it runs.
        if let Some(f) = wake_flusher {
            f.wake();
        }
        if released {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
}

/// The flusher of this worker's turns (see [`Turn`]); runs until the
/// worker's runtime is dropped.
async fn flusher() {
    std::future::poll_fn(|cx| {
        let release = TURN.with(|t| {
            let mut t = t.borrow_mut();
            if !t.flusher.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                t.flusher = Some(cx.waker().clone());
            }
            if !t.scheduled {
                return Vec::new();
            }
            t.scheduled = false;
            t.generation += 1;
            std::mem::take(&mut t.waiting)
        });
        for w in release {
            w.wake();
        }
        Poll::<()>::Pending
    })
    .await
}

/// The worker index of the calling thread ([`NOT_A_WORKER`] off workers).
#[inline]
pub(crate) fn current() -> u8 {
    INDEX.with(Cell::get)
}

/// Records that a stripe this thread is about to wait for was taken last by
/// worker `holder`. Ignored off workers and for the thread's own worker.
#[inline]
pub(crate) fn note_contention(holder: u8) {
    let me = current();
    if me != NOT_A_WORKER && holder != NOT_A_WORKER && holder != me {
        CONTENDED.with(|c| c.set(holder));
    }
}

/// The worker noted by [`note_contention`] since the last call, if any.
#[inline]
pub(crate) fn take_contention() -> Option<usize> {
    let w = CONTENDED.with(|c| c.replace(NOT_A_WORKER));
    (w != NOT_A_WORKER).then_some(w as usize)
}

/// A connection on its way to a worker, its socket off any reactor.
enum Handoff {
    /// Just accepted.
    New(std::net::TcpStream, SocketAddr),
    /// Moved from another worker between two batches.
    Moved(std::net::TcpStream, Box<Moving>),
}

/// How to reach every worker: each one's queue and connection count.
pub(crate) struct Routes {
    queues: Vec<mpsc::UnboundedSender<Handoff>>,
    open: Vec<AtomicUsize>,
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routes")
            .field("workers", &self.queues.len())
            .finish()
    }
}

impl Routes {
    /// Number of workers.
    pub(crate) fn len(&self) -> usize {
        self.queues.len()
    }

    /// Whether a connection on worker `from` may move to worker `to`: only
    /// towards a worker serving at least as many connections. Without this,
    /// while a hot key's connections are split across two workers, each
    /// side's connections wait for the other side and both move, and they
    /// swap places again and again (measured: ~6 moves per connection in a
    /// 2-second ZADD run); with it they flow one way, to the larger group,
    /// and settle.
    pub(crate) fn may_move(&self, from: usize, to: usize) -> bool {
        to != from
            && to < self.open.len()
            && self.open[to].load(Ordering::Relaxed) >= self.open[from].load(Ordering::Relaxed)
    }

    /// Sends a connection, between two of its batches, to worker `to`.
    /// `false` if that worker has stopped (shutdown): the socket was dropped
    /// with the message, which closed it.
    pub(crate) fn send_moved(
        &self,
        from: usize,
        to: usize,
        stream: std::net::TcpStream,
        moving: Box<Moving>,
    ) -> bool {
        self.open[to].fetch_add(1, Ordering::Relaxed);
        if self.queues[to].send(Handoff::Moved(stream, moving)).is_ok() {
            self.open[from].fetch_sub(1, Ordering::Relaxed);
            true
        } else {
            self.open[to].fetch_sub(1, Ordering::Relaxed);
            false
        }
    }
}

/// The worker a connection task runs on.
#[derive(Debug, Clone)]
pub(crate) struct Here {
    /// Its index.
    pub(crate) index: usize,
    /// Every worker.
    pub(crate) routes: Arc<Routes>,
}

/// The connection worker threads.
#[derive(Debug)]
pub(crate) struct Workers {
    routes: Arc<Routes>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts `n` (1 to 254) worker threads serving connections of
    /// `shared`. Once shutdown is requested each stops taking connections
    /// and gives its own `grace` to finish their batch in flight.
    pub(crate) fn start(n: usize, shared: &Arc<Shared>, grace: Duration) -> anyhow::Result<Self> {
        let max = NOT_A_WORKER as usize - 1;
        if n > max {
            tracing::warn!("{n} connection worker threads asked for; using {max}");
        }
        let n = n.clamp(1, max);
        let (queues, receivers): (Vec<_>, Vec<_>) =
            (0..n).map(|_| mpsc::unbounded_channel()).unzip();
        let routes = Arc::new(Routes {
            queues,
            open: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        });
        let mut threads = Vec::with_capacity(n);
        for (index, rx) in receivers.into_iter().enumerate() {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start a connection worker's runtime")?;
            let here = Here {
                index,
                routes: routes.clone(),
            };
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("basalt-conn-{index}"))
                .spawn(move || {
                    INDEX.with(|c| c.set(index as u8));
                    runtime.block_on(run(rx, shared, here, grace));
                })
                .context("cannot start a connection worker thread")?;
            threads.push(thread);
        }
        Ok(Workers { routes, threads })
    }

    /// Hands a freshly accepted connection to the worker with the fewest.
    pub(crate) fn dispatch(&self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        // Off this runtime's reactor; the worker registers it with its own.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, %peer, "cannot hand a connection to a worker");
                return;
            }
        };
        let r = &self.routes;
        let to = (0..r.len())
            .min_by_key(|&i| r.open[i].load(Ordering::Relaxed))
            .expect("at least one worker");
        r.open[to].fetch_add(1, Ordering::Relaxed);
        if r.queues[to].send(Handoff::New(stream, peer)).is_err() {
            // That worker has stopped (shutdown): dropping the socket
            // closes it.
            r.open[to].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Waits until every worker has finished its connections. Call it once
    /// shutdown is requested; it blocks, so off the runtime.
    pub(crate) fn finish(self) {
        for t in self.threads {
            if t.join().is_err() {
                tracing::error!("a connection worker panicked");
            }
        }
    }
}

/// One worker: serves every connection it is given until shutdown, then
/// lets them finish their batch in flight.
async fn run(
    rx: mpsc::UnboundedReceiver<Handoff>,
    shared: Arc<Shared>,
    here: Here,
    grace: Duration,
) {
    // The worker's io_uring (cold reads) is driven beside its connections
    // until they are done, then waits for its reads in flight.
    tokio::select! {
        _ = serve(rx, shared.clone(), here, grace) => {}
        _ = crate::uring::serve(shared) => {}
    }
    crate::uring::stop();
}

/// [`run`]'s connections.
async fn serve(
    mut rx: mpsc::UnboundedReceiver<Handoff>,
    shared: Arc<Shared>,
    here: Here,
    grace: Duration,
) {
    let mut shutdown = shared.shutdown_rx();
    let mut conns = JoinSet::new();
    tokio::spawn(flusher());
    loop {
        tokio::select! {
            handoff = rx.recv() => match handoff {
                Some(h) => start(&mut conns, h, &shared, &here),
                None => break,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = Shared::wait_shutdown(&mut shutdown) => break,
        }
    }
    // Connections notice the shutdown themselves, after their batch in
    // flight. One moving here meanwhile is taken in and closes at once.
    let drained = tokio::time::timeout(grace, async {
        loop {
            tokio::select! {
                Some(h) = rx.recv() => start(&mut conns, h, &shared, &here),
                next = conns.join_next() => if next.is_none() { break },
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!("connections did not finish in time; closing them");
        conns.shutdown().await;
    }
    rx.close();
    while let Ok(h) = rx.try_recv() {
        if let Handoff::Moved(_, moving) = h {
            crate::conn::release(&shared, &moving.conn.info);
        }
    }
}

/// Registers a handed-off socket with this worker's reactor and serves it.
fn start(conns: &mut JoinSet<()>, handoff: Handoff, shared: &Arc<Shared>, here: &Here) {
    let (stream, moving) = match handoff {
        Handoff::New(s, peer) => (s, Err(peer)),
        Handoff::Moved(s, m) => (s, Ok(m)),
    };
    let stream = match tokio::net::TcpStream::from_std(stream) {
        Ok(s) => s,
        Err(e) => {
            here.routes.open[here.index].fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "a worker cannot register a connection");
            if let Ok(m) = moving {
                crate::conn::release(shared, &m.conn.info);
            }
            return;
        }
    };
    let shared = shared.clone();
    let here = here.clone();
    conns.spawn(async move {
        let index = here.index;
        let routes = here.routes.clone();
        let moved = match moving {
            Err(peer) => crate::conn::serve(stream, peer, shared, here).await,
            Ok(m) => crate::conn::resume(stream, *m, shared, here).await,
        };
        if !moved {
            routes.open[index].fetch_sub(1, Ordering::Relaxed);
        }
    });
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::*;

    /// Runs `f` on a fresh single-threaded runtime, as a worker runs.
    fn on_worker_runtime<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn replies_of_one_turn_are_written_after_every_ready_batch_ran() {
        on_worker_runtime(async {
            tokio::spawn(flusher());
            tokio::task::yield_now().await; // the flusher registers
            let log = Rc::new(RefCell::new(Vec::new()));
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async {
                    let mut tasks = Vec::new();
                    for i in 0..3 {
                        let log = log.clone();
                        tasks.push(tokio::task::spawn_local(async move {
                            log.borrow_mut().push(format!("ran {i}"));
                            end_of_turn().await;
                            log.borrow_mut().push(format!("wrote {i}"));
                        }));
                    }
                    for t in tasks {
                        t.await.unwrap();
                    }
                })
                .await;
            let log = log.borrow();
            let first_write = log.iter().position(|e| e.starts_with("wrote")).unwrap();
            assert_eq!(first_write, 3, "every batch ran before any write: {log:?}");
            assert_eq!(log.len(), 6);
        });
    }

    #[test]
    fn a_lone_connection_is_released_in_the_same_turn() {
        on_worker_runtime(async {
            tokio::spawn(flusher());
            tokio::task::yield_now().await;
            // Twice: the flusher must come back for a second turn.
            for _ in 0..2 {
                tokio::time::timeout(Duration::from_secs(5), end_of_turn())
                    .await
                    .expect("released by the flusher");
            }
        });
    }

    #[test]
    fn off_a_worker_end_of_turn_is_immediate() {
        // No flusher on this thread: nothing to wait for.
        on_worker_runtime(async {
            tokio::time::timeout(Duration::from_secs(5), end_of_turn())
                .await
                .expect("immediate");
        });
    }
}
