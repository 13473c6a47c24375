//! One client connection: read, run every complete command, write every
//! reply with one call, repeat (brief decision 10).
//!
//! Backpressure: the loop does not read while it has replies to write
//! (`write_all` awaits), and a batch whose replies pass [`OUTPUT_FLUSH`]
//! bytes writes them before running more commands. So a client that sends
//! without reading stalls its own connection instead of growing the
//! server's memory: at most one unparsed command plus [`OUTPUT_FLUSH`] of
//! replies per connection.
//!
//! Durability: under `appendfsync always` a batch that ran a write command
//! (or an EXEC that did) calls `sync` once before any of its replies leaves
//! (group commit).
//!
//! Isolation of EXEC: a batch holds the exec gate shared while it runs
//! commands and releases it before every await (see `crate::tx`).
//!
//! Blocking commands (see `crate::blocking`): a handler that returns
//! [`After::Block`] has registered a waiter; the loop writes the replies so
//! far, parks in [`park`] (reading nothing else), and on a wakeup parses
//! the same command from the buffer again and re-runs it.
//!
//! Pub/sub (see `crate::pubsub`): messages wait in the client's mailbox. An
//! idle (or parked) connection wakes on the mailbox and writes them; a
//! busy one puts them in its batch output with the command in flight.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use basalt_resp::{Encoder, Limits, Parsed, Protocol, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::blocking::Unblock;
use crate::commands::{fetch, zbuild, After, Conn};
use crate::config::Appendfsync;
use crate::pubsub;
use crate::readers::{self, Deferred};
use crate::repl::{self, Route, WouldBlock};
use crate::state::{now_ms, now_ns, ClientInfo, Shared};
use crate::tx;
use crate::workers::{self, Here, MOVE_AFTER};

/// Replies buffered before they are written in the middle of a batch.
pub const OUTPUT_FLUSH: usize = 64 << 20;
/// Below this many buffered bytes a batch holds one or two commands and
/// looking ahead cannot overlap anything.
const PREFETCH_MIN_BYTES: usize = 96;
/// Commands a batch (or a replicated entry, `repl::run_commands`) looks
/// ahead at.
pub(crate) const PREFETCH_AHEAD: usize = 32;

/// Looks at the first commands of a batch and asks the engine to start
/// loading what they will touch: for a run of GETs, what they will read
/// (`Db::prefetch`: index slot, index entry, record), for a run of SETs on
/// a single node, the index entries they will replace
/// (`Db::prefetch_index`). In a pipeline the cache misses of each lookup
/// then overlap across keys instead of following one another. A hint
/// only: the first command of another kind, or that it cannot parse (the
/// buffer may start inside one whose head an earlier read consumed), ends
/// the look-ahead. In a group a SET goes to the log, not to the index
/// here, so only GETs are looked at.
fn prefetch_ahead(shared: &Shared, conn: &Conn, buf: &[u8]) {
    let mut parser = RequestParser::new(Limits::default());
    // Each key as a slice of `buf` (an argument borrows the parser, so it
    // cannot outlive the next parse).
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut sets = None;
    let mut pos = 0;
    while keys.len() < PREFETCH_AHEAD {
        match parser.parse(&buf[pos..]) {
            Ok(Parsed::Command { args, consumed }) => {
                // Only the leading GETs or SETs: a batch of other commands
                // pays for one extra parse, not for parsing it twice.
                let set = if args.len() == 2 && args[0].eq_ignore_ascii_case(b"get") {
                    false
                } else if args.len() >= 3 && args[0].eq_ignore_ascii_case(b"set") {
                    true
                } else {
                    break;
                };
                if *sets.get_or_insert(set) != set || (set && shared.repl.get().is_some()) {
                    break;
                }
                // An inline command's arguments live in the parser's
                // scratch buffer, not in `buf`: the look-ahead ends there.
                let Some(span) = span_in(buf, &args[1]) else {
                    break;
                };
                keys.push(&buf[span]);
                pos += consumed;
            }
            _ => break,
        }
    }
    if keys.len() >= 2 {
        if let Some(db) = shared.keyspace.read(conn.db).db() {
            if sets == Some(true) {
                db.prefetch_index(&keys);
            } else {
                db.prefetch(&keys);
            }
        }
    }
}

/// Where `arg` lies in `buf`, if it is a slice of it: a RESP command's
/// arguments point into the buffer parsed, an inline command's into the
/// parser's own scratch buffer.
pub(crate) fn span_in(buf: &[u8], arg: &[u8]) -> Option<std::ops::Range<usize>> {
    let start = (arg.as_ptr() as usize).checked_sub(buf.as_ptr() as usize)?;
    let end = start.checked_add(arg.len())?;
    (end <= buf.len()).then_some(start..end)
}

/// Commands run on one clock reading before it is read again.
const CLOCK_EVERY: u64 = 16;
/// Smallest free space offered to a read.
const READ_CHUNK: usize = 16 << 10;

/// What a connection carries when it moves to another worker between two
/// batches (`crate::workers`); its socket travels beside it, off any
/// reactor.
#[derive(Debug)]
pub(crate) struct Moving {
    /// Selected database, protocol, MULTI state, registry entry.
    pub(crate) conn: Conn,
    /// Input read but not yet run (an incomplete command).
    buf: Vec<u8>,
}

/// Serves a new connection until it ends (`false`) or moves to another
/// worker (`true`).
pub(crate) async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    here: Here,
) -> bool {
    let _ = stream.set_nodelay(true);
    // maxclients and protected mode (crate::auth): refused with one line.
    let admitted = match crate::auth::admit(&shared.security, peer) {
        Ok(a) => a,
        Err(line) => {
            let _ = stream.write_all(line).await;
            let _ = stream.shutdown().await;
            return false;
        }
    };
    // From here on `release` ends the admission, on whichever worker the
    // connection ends.
    admitted.keep();
    let laddr = stream.local_addr().unwrap_or(shared.addr);
    let info = shared.clients.register(peer, laddr, stream.as_raw_fd());
    crate::auth::set_default_auth(&shared, &info);
    shared.stats.connections.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(id = info.id, %peer, "client connected");
    let conn = Conn {
        db: 0,
        protocol: Protocol::Resp2,
        info,
        tx: Default::default(),
        batch_clock: 0,
        tick: 0,
        script: Vec::new(),
        may_defer: false,
        deferred: Vec::new(),
        may_build_index: false,
        index_wanted: Vec::new(),
    };
    let moving = Moving {
        conn,
        buf: Vec::with_capacity(READ_CHUNK),
    };
    resume(stream, moving, shared, here).await
}

/// Serves a connection (new, or moved here) until it ends (`false`) or
/// moves on (`true`).
pub(crate) async fn resume(
    mut stream: TcpStream,
    mut m: Moving,
    shared: Arc<Shared>,
    here: Here,
) -> bool {
    let info = m.conn.info.clone();
    match run(&mut stream, &shared, &mut m.conn, &mut m.buf, &here).await {
        Ok(Ended::Closed) => {}
        Ok(Ended::Move(to)) => match stream.into_std() {
            Ok(std_stream) => {
                // Not sent: the target has stopped (shutdown) and the
                // socket is closed; the connection ends here.
                if here
                    .routes
                    .send_moved(here.index, to, std_stream, Box::new(m))
                {
                    shared.stats.client_moves.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(id = info.id, from = here.index, to, "client moved");
                    return true;
                }
            }
            Err(e) => tracing::debug!(id = info.id, error = %e, "cannot move a client"),
        },
        Err(e) => tracing::debug!(id = info.id, error = %e, "connection ended with an error"),
    }
    release(&shared, &info);
    false
}

/// Forgets an ended connection: a client that was blocked leaves the
/// queues (its wakeup, if it had one, passes to the next waiter), its
/// subscriptions go, it leaves CLIENT LIST and the maxclients count.
pub(crate) fn release(shared: &Shared, info: &ClientInfo) {
    shared.blocking.finish(info.id);
    // Clients redirecting their invalidations here now find it broken.
    info.pubsub.closed.store(true, Ordering::Relaxed);
    shared.pubsub.drop_client(info);
    shared.clients.unregister(info.id);
    crate::auth::release(&shared.security);
    tracing::debug!(id = info.id, "client disconnected");
}

/// Why [`run`] returned.
enum Ended {
    /// The client went away, quit, was killed, or the server is stopping.
    Closed,
    /// The connection should carry on on worker `.0` (`crate::workers`).
    Move(usize),
}

/// Writes the batch's replies, after the group-commit fsync if one is due.
/// A kill (CLIENT KILL, or a publisher finding this client over its output
/// limit) ends a write that a client which does not read has stalled.
async fn flush(
    stream: &mut TcpStream,
    shared: &Shared,
    info: &ClientInfo,
    out: &mut Vec<u8>,
    deferred: &mut Vec<Deferred>,
    wrote: &mut bool,
) -> std::io::Result<()> {
    // Cold reads' replies take their places first (crate::readers).
    readers::settle(out, deferred).await;
    if *wrote && shared.settings.appendfsync() == Appendfsync::Always {
        *wrote = false;
        // LATENCY's `aof-fsync-always` event, as Redis records its fsync.
        let started = std::time::Instant::now();
        let synced = sync_all(shared);
        let ms = started.elapsed().as_millis() as u64;
        shared
            .cmdstats
            .latency_sample_if_needed("aof-fsync-always", ms);
        if let Err(e) = synced {
            // The replies must not claim durability the disk did not give.
            out.clear();
            let line = format!("-ERR storage error: fsync failed: {e}\r\n");
            out.extend_from_slice(line.as_bytes());
            stream.write_all(out).await?;
            return Err(std::io::Error::other(e));
        }
    }
    *wrote = false;
    if !out.is_empty() {
        shared
            .stats
            .net_output
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        tokio::select! {
            biased;
            r = stream.write_all(out) => r?,
            _ = info.kill.notified() => {
                return Err(std::io::Error::other("client killed while its replies were pending"));
            }
        }
        out.clear();
        if out.capacity() > 4 * OUTPUT_FLUSH {
            out.shrink_to(READ_CHUNK);
        }
    }
    Ok(())
}

fn sync_all(shared: &Shared) -> basalt_engine::Result<()> {
    for n in 0..shared.keyspace.len() {
        if let Some(db) = shared.keyspace.read(n).db() {
            db.sync()?;
        }
    }
    // A batch over several databases is decided by its token there.
    shared.keyspace.sync_batch_log()
}

/// Most script commands of one batch handed to the script thread at once.
const MAX_HANDED_OVER: usize = 256;

async fn run(
    stream: &mut TcpStream,
    shared: &Arc<Shared>,
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    here: &Here,
) -> std::io::Result<Ended> {
    let mut shutdown = shared.shutdown_rx();
    let mut parser = RequestParser::new(Limits::default());
    let mut out: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let info = conn.info.clone();
    // Batches in a row that waited for a stripe held by worker `rival`.
    let mut rival = usize::MAX;
    let mut streak = 0u32;
    loop {
        if streak >= MOVE_AFTER {
            if !shared.shutting_down() && here.routes.may_move(here.index, rival) {
                return Ok(Ended::Move(rival));
            }
            streak = 0;
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            // Doubling growth, so a big argument costs O(log n) reallocations.
            buf.reserve(buf.len().clamp(READ_CHUNK, 64 << 20));
        }
        let n = tokio::select! {
            biased;
            _ = info.kill.notified() => return Ok(Ended::Closed),
            _ = Shared::wait_shutdown(&mut shutdown) => return Ok(Ended::Closed),
            r = stream.read_buf(buf) => r?,
            // After the read: a client that keeps sending gets its messages
            // appended to each batch's output instead.
            _ = info.pubsub.ready() => {
                if !pubsub::deliver(stream, &info, &shared.pubsub, conn.protocol, &shared.stats).await? {
                    return Ok(Ended::Closed);
                }
                continue;
            }
        };
        if n == 0 {
            return Ok(Ended::Closed);
        }
        if info.killed.load(Ordering::SeqCst)
            || crate::auth::query_buffer_exceeded(shared, &info, buf)
        {
            return Ok(Ended::Closed);
        }
        shared
            .stats
            .net_input
            .fetch_add(n as u64, Ordering::Relaxed);

        let mut pos = 0;
        let mut wrote = false;
        let mut close = false;
        let mut shutdown_after = false;
        let mut count = 0u64;
        let mut writes = 0u64;
        let mut last: Option<&'static str> = None;
        // Held while commands run, released before every await (crate::tx).
        // Taken by the first command that needs it (`tx::run`): a batch of
        // script commands, which the script thread runs under the gate,
        // never takes it here.
        // Reads on a node of a replicated group are linearizable: one read
        // barrier (ReadIndex) per batch, before its first read, not one per
        // read (crate::repl). If it cannot be passed, the batch's reads are
        // refused rather than served stale.
        let mut barrier: Option<Result<(), String>> = None;
        // Writes for the leader's log not answered yet, in order.
        let mut pending = repl::Pipelined::default();
        let mut gate = shared.gate.lazy();
        // Contention noted on this thread before the batch is not its own.
        let _ = workers::take_contention();
        // One clock read for the batch; anything that waits below resets it.
        conn.tick = now_ns();
        conn.batch_clock = conn.tick / 1_000_000;
        crate::auth::sync_bulk_limit(shared, &mut parser);
        if buf.len() > PREFETCH_MIN_BYTES && info.authenticated.load(Ordering::Relaxed) {
            prefetch_ahead(shared, conn, buf);
        }
        loop {
            let cmd_start = pos;
            crate::auth::sync_parser(shared, &info, &mut parser);
            // Where this command's reply begins; moved back when a wait
            // below flushes the output (a CLIENT PAUSE).
            let mut reply_at = out.len();
            let (found, after, ran_writes) = match parser.parse(&buf[pos..]) {
                Ok(Parsed::Command { args, consumed }) => {
                    if shared.pubsub.pause.active()
                        && shared.pubsub.pause.holds_command(&args).is_some()
                    {
                        gate.release();
                        let mut io = ConnIo {
                            stream,
                            info: &info,
                            out: &mut out,
                            deferred: &mut conn.deferred,
                            wrote: &mut wrote,
                            shutdown: &mut shutdown,
                        };
                        if io.wait_out_pause(shared, &args).await? {
                            return Ok(Ended::Closed);
                        }
                        reply_at = out.len();
                        conn.batch_clock = 0;
                        conn.tick = now_ns();
                    }
                    pos += consumed;
                    if count % CLOCK_EVERY == CLOCK_EVERY - 1 {
                        // A long batch must not run its last commands on
                        // the time its first one started. The clock was
                        // read when the previous command ended (`tick`).
                        conn.batch_clock = conn.tick / 1_000_000;
                    }
                    // A node of a replicated group proposes writes to the
                    // Raft log and answers with what applying them returned
                    // (crate::repl); a follower refuses them.
                    // The command's definition, looked up once for the
                    // routing below (only on a node of a group).
                    let def = match shared.repl.get() {
                        Some(_) => crate::commands::lookup(&args[0]),
                        None => None,
                    };
                    let reads = shared.repl.get().is_some() && repl::needs_barrier(conn, def);
                    if reads && !pending.is_empty() {
                        // A read after pipelined writes waits for them and
                        // then passes a barrier of its own: on a follower
                        // they were applied by the leader first, and an
                        // earlier barrier does not cover them.
                        gate.release();
                        let repl = shared.repl.get().expect("pending writes");
                        pending.resolve(repl, &mut out, conn.protocol).await;
                        barrier = None;
                        conn.batch_clock = 0;
                        conn.tick = now_ns();
                    }
                    if let Some(repl) = shared.repl.get().filter(|_| reads && barrier.is_none()) {
                        gate.release();
                        barrier = Some(repl.read_barrier().await);
                        conn.batch_clock = 0;
                        conn.tick = now_ns();
                    }
                    let routed = match shared.repl.get() {
                        None => None,
                        Some(_) if reads && matches!(barrier, Some(Err(_))) => {
                            barrier.clone().and_then(Result::err).map(Route::Refuse)
                        }
                        Some(repl)
                            if conn.tx.in_multi()
                                && args.len() == 1
                                && args[0].eq_ignore_ascii_case(b"exec") =>
                        {
                            repl.route_exec(conn)
                        }
                        Some(repl) => match repl.route(shared, conn, def, &args) {
                            Route::Local => None,
                            // maxmemory: the node a write is sent to refuses
                            // it before it is proposed (an apply never does).
                            Route::Propose(_)
                                if shared.maxmemory.over()
                                    && def.is_some_and(|c| {
                                        c.flags & crate::commands::flags::DENYOOM != 0
                                    }) =>
                            {
                                Some(Route::Refuse(crate::maxmemory::OOM.to_string()))
                            }
                            r => Some(r),
                        },
                    };
                    if !pending.is_empty() && !matches!(routed, Some(Route::Propose(_))) {
                        // A local command (or an error) answers after the
                        // pipelined writes before it, and sees them.
                        gate.release();
                        let repl = shared.repl.get().expect("pending writes");
                        pending.resolve(repl, &mut out, conn.protocol).await;
                        // A later read passes a barrier that covers them.
                        barrier = None;
                        conn.batch_clock = 0;
                        conn.tick = now_ns();
                    }
                    if let Some(route) = routed {
                        let cmd = def;
                        match route {
                            Route::Propose(p) => {
                                gate.release();
                                let repl = shared.repl.get().expect("routed by it");
                                let blocking = cmd.is_some_and(|c| {
                                    c.flags & crate::commands::flags::BLOCKING != 0
                                });
                                let mut after = None;
                                if !blocking && info.pubsub.modes.load(Ordering::Relaxed) == 0 {
                                    // Pipelined: proposed with the writes
                                    // around it (in one entry when they
                                    // follow each other), answered in order
                                    // when the next local command or the
                                    // batch's end needs the replies.
                                    pending.push(p);
                                } else {
                                    pending.resolve(repl, &mut out, conn.protocol).await;
                                    // A blocked client's re-run: signals
                                    // from now on wake it again.
                                    let p = if blocking && shared.blocking.rearm(info.id) {
                                        p.into_retry()
                                    } else {
                                        p
                                    };
                                    let reply = if blocking {
                                        // Rides out an election.
                                        repl.propose_patiently(&p).await
                                    } else {
                                        repl.propose(&p).await
                                    };
                                    let would_block = match &reply {
                                        Ok(r) if blocking => WouldBlock::from_reply(r),
                                        _ => None,
                                    };
                                    match would_block {
                                        // Nothing to serve: the client waits
                                        // here, and its command is proposed
                                        // again when a key is signalled.
                                        Some(b) => {
                                            repl.block_here(shared, info.id, conn.db, &b);
                                            after = Some(After::Block);
                                        }
                                        None => push_reply(&mut out, conn.protocol, reply),
                                    }
                                    // Forwarded: the leader applied it, this
                                    // node may not have yet; the next read
                                    // passes a new barrier, which covers it.
                                    barrier = None;
                                    conn.batch_clock = 0;
                                    conn.tick = now_ns();
                                }
                                (cmd, after, 0)
                            }
                            Route::Refuse(line) => {
                                crate::commands::refuse(
                                    shared,
                                    &mut out,
                                    conn.protocol,
                                    line.as_bytes(),
                                );
                                (None, None, 0)
                            }
                            Route::Local => unreachable!("filtered above"),
                        }
                    } else {
                        // What the command (or the transaction EXEC runs)
                        // reads and is not in memory is fetched first, off
                        // this worker's back, and it then runs in place on
                        // it; EXEC holds the gate alone while it runs.
                        let exec = conn.tx.in_multi() && args[0].eq_ignore_ascii_case(b"exec");
                        // EXEC runs its queue in place: the big sorted sets'
                        // and streams' indexes it would rebuild there are
                        // built first, off this worker (commands::zbuild).
                        if exec && crate::auth::may_run(shared, &info, 0) {
                            if let Some(queue) = conn.tx.queued_opening_indexes() {
                                let wanted = exec_indexes(shared, conn.db, queue);
                                if !wanted.is_empty() {
                                    gate.release();
                                    let build = zbuild::build(shared.clone(), conn.db, wanted);
                                    let mut io = ConnIo {
                                        stream,
                                        info: &info,
                                        out: &mut out,
                                        deferred: &mut conn.deferred,
                                        wrote: &mut wrote,
                                        shutdown: &mut shutdown,
                                    };
                                    if io.wait_for(shared, build, &args).await? {
                                        return Ok(Ended::Closed);
                                    }
                                    reply_at = out.len();
                                    conn.batch_clock = 0;
                                    conn.tick = now_ns();
                                }
                            }
                        }
                        let staged = StagedFor;
                        // One load first: while no database checks
                        // residency (warm data), nothing else is looked at.
                        let wanted = shared.keyspace.reads_may_be_cold()
                            && if exec {
                                args.len() == 1
                            } else {
                                fetch::fetches_ahead(&args) && !conn.tx.in_multi()
                            };
                        if wanted
                            && shared.readers.enabled()
                            && crate::auth::may_run(shared, &info, 0)
                        {
                            let reads = if exec {
                                exec_cold_reads(shared, conn)
                            } else {
                                command_cold_reads(shared, conn, &args)
                            };
                            if !reads.is_empty() {
                                gate.release();
                                let mut io = ConnIo {
                                    stream,
                                    info: &info,
                                    out: &mut out,
                                    deferred: &mut conn.deferred,
                                    wrote: &mut wrote,
                                    shutdown: &mut shutdown,
                                };
                                if io.fetch_and_stage(shared, reads, &args).await? {
                                    return Ok(Ended::Closed);
                                }
                                reply_at = out.len();
                                conn.batch_clock = 0;
                                conn.tick = now_ns();
                            }
                        }
                        if exec {
                            // EXEC runs its queue outside the command
                            // table's path: MONITOR is refused inside it,
                            // and EXEC is shown after the commands it ran.
                            let scope = crate::monitor::ExecScope::enter();
                            let ran = tx::run(shared, conn, &mut out, args, &mut gate);
                            drop(scope);
                            drop(staged);
                            if ran.0.is_some() {
                                crate::monitor::exec(&shared.pubsub, &info, conn.db, &args);
                            }
                            ran
                        } else {
                            // A GET whose value is not in memory may leave
                            // its reply to a reader thread (crate::readers)
                            // when nothing rewrites this reply after it: no
                            // CLIENT REPLY/CACHING mode, no pending pushes.
                            conn.may_defer = info.pubsub.modes.load(Ordering::Relaxed) == 0
                                && !info.pubsub.has_pending();
                            // A big sorted set's or stream's index the cache
                            // lacks is built off this worker (zbuild): the
                            // command stops before any effect, the index is
                            // built while only this connection waits, and
                            // the command runs again.
                            conn.may_build_index = !conn.tx.in_multi();
                            let mut ran = tx::run(shared, conn, &mut out, args, &mut gate);
                            let mut built = Vec::new();
                            let mut rounds = 0;
                            while !conn.index_wanted.is_empty() {
                                rounds += 1;
                                let mut wanted = std::mem::take(&mut conn.index_wanted);
                                // One built in this loop and missing again
                                // (evicted by the next build, or made stale
                                // by a write) is rebuilt in place.
                                wanted.retain(|w| !built.contains(w));
                                if wanted.is_empty() {
                                    conn.may_build_index = false;
                                } else {
                                    gate.release();
                                    built.extend(wanted.iter().cloned());
                                    let build = zbuild::build(shared.clone(), conn.db, wanted);
                                    let mut io = ConnIo {
                                        stream,
                                        info: &info,
                                        out: &mut out,
                                        deferred: &mut conn.deferred,
                                        wrote: &mut wrote,
                                        shutdown: &mut shutdown,
                                    };
                                    if io.wait_for(shared, build, &args).await? {
                                        return Ok(Ended::Closed);
                                    }
                                    reply_at = out.len();
                                    conn.batch_clock = 0;
                                    conn.tick = now_ns();
                                }
                                if rounds == zbuild::MAX_ROUNDS {
                                    conn.may_build_index = false;
                                }
                                ran = tx::run(shared, conn, &mut out, args, &mut gate);
                            }
                            conn.may_build_index = false;
                            conn.may_defer = false;
                            drop(staged);
                            ran
                        }
                    }
                }
                Ok(Parsed::Incomplete { consumed }) => {
                    pos += consumed;
                    break;
                }
                Err(e) => {
                    let at = out.len();
                    out.extend_from_slice(b"-ERR ");
                    out.extend_from_slice(e.to_string().as_bytes());
                    out.extend_from_slice(b"\r\n");
                    shared.errors.count(&out[at..]);
                    tracing::debug!(id = info.id, error = %e, "protocol error; closing");
                    close = true;
                    break;
                }
            };
            count += 1;
            if ran_writes > 0 {
                wrote = true;
                writes += ran_writes;
            }
            match found {
                Some(cmd) => {
                    last = Some(cmd.name);
                }
                None => {
                    shared.stats.rejected.fetch_add(1, Ordering::Relaxed);
                }
            }
            match after {
                None => {}
                Some(After::Close) => {
                    close = true;
                    break;
                }
                Some(After::Shutdown) => {
                    shutdown_after = true;
                    close = true;
                    break;
                }
                // The reply (already buffered) leaves after the sleep, as
                // in Redis; only this connection waits.
                Some(After::Sleep(d)) => {
                    gate.release();
                    tokio::time::sleep(d).await;
                    conn.batch_clock = 0;
                    conn.tick = now_ns();
                }
                Some(After::Script) => {
                    // The script thread runs it with the gate held
                    // exclusively; this connection lets go of its share and
                    // waits (its worker keeps serving the others).
                    gate.release();
                    // The script commands right behind it go in the same
                    // hand-over (`conn.script` holds them as RESP): a
                    // pipeline of EVALs is one round trip to the script
                    // thread, not one per command.
                    let mut handed = 1;
                    while handed < MAX_HANDED_OVER {
                        match parser.parse(&buf[pos..]) {
                            Ok(Parsed::Command { args, consumed })
                                if crate::script::handed_over(&args).is_some() =>
                            {
                                basalt_resp::write_command(&mut conn.script, args.iter());
                                pos += consumed;
                                count += 1;
                                handed += 1;
                            }
                            // Anything else (an incomplete command too) is
                            // parsed again, from its start, by the loop.
                            _ => {
                                parser.reset();
                                break;
                            }
                        }
                    }
                    readers::settle(&mut out, &mut conn.deferred).await;
                    // The script thread runs with the gate held alone, so a
                    // disk read there would stall every client: what the
                    // scripts' keys hold that is not in memory is fetched
                    // first, while only this connection waits.
                    let mut staged = Vec::new();
                    if crate::auth::may_run(shared, &info, 0) {
                        let reads = match shared.readers.enabled() {
                            true => script_cold_reads(shared, conn),
                            false => Vec::new(),
                        };
                        // So are the indexes of big sorted sets and streams
                        // among the scripts' keys that the cache lacks
                        // (commands::zbuild): rebuilt there, they would
                        // stall every client too.
                        let keys = script_keys(&conn.script);
                        let wanted = zbuild::uncached(shared, conn.db, keys.iter().map(|k| &k[..]));
                        if !reads.is_empty() || !wanted.is_empty() {
                            let script = std::mem::take(&mut conn.script);
                            let db = conn.db;
                            let mut io = ConnIo {
                                stream,
                                info: &info,
                                out: &mut out,
                                deferred: &mut conn.deferred,
                                wrote: &mut wrote,
                                shutdown: &mut shutdown,
                            };
                            if !wanted.is_empty() {
                                let build = zbuild::build(shared.clone(), db, wanted);
                                if io.until_done(build).await.is_none() {
                                    return Ok(Ended::Closed);
                                }
                            }
                            if !reads.is_empty() {
                                let Some(fetched) = io.fetch(shared, reads).await else {
                                    return Ok(Ended::Closed);
                                };
                                staged = fetched;
                            }
                            // A CLIENT PAUSE that began during the fetch
                            // holds the scripts it would have held before.
                            if shared.pubsub.pause.active() {
                                let mut parser =
                                    basalt_resp::RequestParser::new(basalt_resp::Limits {
                                        max_bulk_len: usize::MAX,
                                        ..basalt_resp::Limits::default()
                                    });
                                let mut at = 0;
                                while let Ok(Parsed::Command { args, consumed }) =
                                    parser.parse(&script[at..])
                                {
                                    at += consumed;
                                    if io.wait_out_pause(shared, &args).await? {
                                        return Ok(Ended::Closed);
                                    }
                                }
                            }
                            reply_at = out.len();
                            conn.script = script;
                        }
                    }
                    // The replies go straight into this batch's output.
                    let Some(done) = shared
                        .scripts
                        .offload(conn, std::mem::take(&mut out), staged)
                        .await
                    else {
                        return Ok(Ended::Closed);
                    };
                    out = done.out;
                    if done.wrote {
                        wrote = true;
                        writes += 1;
                    }
                    conn.batch_clock = 0;
                    conn.tick = now_ns();
                    match done.after {
                        Some(After::Close) => {
                            close = true;
                            break;
                        }
                        Some(After::Shutdown) => {
                            shutdown_after = true;
                            close = true;
                            break;
                        }
                        _ => {}
                    }
                }
                Some(After::Block) => {
                    gate.release();
                    flush(
                        stream,
                        shared,
                        &info,
                        &mut out,
                        &mut conn.deferred,
                        &mut wrote,
                    )
                    .await?;
                    // CLIENT LIST shows it blocked in this command.
                    if let Some(c) = found {
                        *info.last_cmd.lock() = c.name;
                    }
                    info.blocked.store(true, Ordering::Relaxed);
                    let parked =
                        park(stream, shared, &info, conn.protocol, buf, &mut shutdown).await;
                    info.blocked.store(false, Ordering::Relaxed);
                    let parked = parked?;
                    conn.batch_clock = 0;
                    conn.tick = now_ns();
                    match parked {
                        Parked::Rerun => {
                            // Run the same command again (it is still in
                            // `buf` at `cmd_start`); count it once.
                            count -= 1;
                            pos = cmd_start;
                            parser.reset();
                            continue;
                        }
                        // WAIT answers its count, not a null: it runs
                        // again and sees its deadline (or the release).
                        Parked::TimedOut if found.is_some_and(|c| c.name == "wait") => {
                            count -= 1;
                            pos = cmd_start;
                            parser.reset();
                            continue;
                        }
                        Parked::TimedOut => {
                            shared.blocking.finish(info.id);
                            Encoder::new(&mut out, conn.protocol).null_array();
                        }
                        Parked::Unblocked => {
                            shared.blocking.finish(info.id);
                            crate::commands::refuse(
                                shared,
                                &mut out,
                                conn.protocol,
                                b"UNBLOCKED client unblocked via CLIENT UNBLOCK",
                            );
                        }
                        Parked::Closed => return Ok(Ended::Closed),
                    }
                }
            }
            if after != Some(After::Block) && found.is_none_or(|c| c.may_block()) {
                // A re-run that served the client (or failed, or was
                // refused before it ran: `-BUSY` while a script runs
                // long): it no longer waits.
                shared.blocking.finish(info.id);
            }
            let modes = info.pubsub.modes.load(Ordering::Relaxed);
            if !conn.deferred.is_empty()
                && (modes != 0
                    || info.pubsub.has_pending()
                    || conn.deferred.len() >= readers::MAX_DEFERRED)
            {
                // What follows edits the output before this reply, or the
                // client has enough reads in flight: the cold replies take
                // their places now.
                gate.release();
                readers::settle(&mut out, &mut conn.deferred).await;
                conn.batch_clock = 0;
                conn.tick = now_ns();
            }
            if modes != 0 {
                after_modes(&info, modes, &mut out, reply_at, found, conn.tx.in_multi());
            }
            if info.pubsub.has_pending() {
                pubsub::write_pending(
                    &info,
                    &shared.pubsub,
                    &mut out,
                    reply_at,
                    found,
                    conn.protocol,
                );
            }
            if out.len() >= OUTPUT_FLUSH {
                gate.release();
                flush(
                    stream,
                    shared,
                    &info,
                    &mut out,
                    &mut conn.deferred,
                    &mut wrote,
                )
                .await?;
                conn.batch_clock = 0;
                conn.tick = now_ns();
            }
        }
        if !pending.is_empty() {
            gate.release();
            let repl = shared.repl.get().expect("pending writes");
            pending.resolve(repl, &mut out, conn.protocol).await;
        }
        drop(gate);
        // Read before the first await below lets another connection of this
        // worker run and note its own contention.
        match workers::take_contention() {
            Some(w) if w == rival => streak += 1,
            Some(w) => {
                rival = w;
                streak = 1;
            }
            None => streak = 0,
        }
        let batch_started = std::mem::take(&mut conn.batch_clock);
        shared.stats.commands.fetch_add(count, Ordering::Relaxed);
        if writes > 0 {
            shared.stats.dirty.fetch_add(writes, Ordering::Relaxed);
        }
        let now = if batch_started != 0 {
            batch_started
        } else {
            now_ms()
        };
        info.last_active_ms.store(now, Ordering::Relaxed);
        if let Some(name) = last {
            *info.last_cmd.lock() = name;
        }
        if !out.is_empty() {
            // Written with the replies of the other connections that ran in
            // this turn of the worker (crate::workers, `Turn`).
            workers::end_of_turn().await;
        }
        flush(
            stream,
            shared,
            &info,
            &mut out,
            &mut conn.deferred,
            &mut wrote,
        )
        .await?;
        buf.drain(..pos);
        if shutdown_after {
            shared.request_shutdown();
        }
        if close {
            let _ = stream.shutdown().await;
            return Ok(Ended::Closed);
        }
        if buf.is_empty() && buf.capacity() > 1 << 20 {
            *buf = Vec::with_capacity(READ_CHUNK);
        }
    }
}

/// What waiting inside a batch needs of a connection: its socket and the
/// replies so far (written before a CLIENT PAUSE wait, crate::monitor), and
/// the signals that end a wait (kill, shutdown).
struct ConnIo<'a> {
    stream: &'a mut TcpStream,
    info: &'a ClientInfo,
    out: &'a mut Vec<u8>,
    deferred: &'a mut Vec<Deferred>,
    wrote: &'a mut bool,
    shutdown: &'a mut tokio::sync::watch::Receiver<bool>,
}

impl ConnIo<'_> {
    /// Reads `reads` ahead ([`fetch_records`]) while only this connection
    /// waits; `None` when it is to close meanwhile. The caller has released
    /// the gate.
    async fn fetch(
        &mut self,
        shared: &Shared,
        reads: Vec<basalt_engine::ColdRead>,
    ) -> Option<Vec<(basalt_engine::StagePlan, Vec<u8>)>> {
        self.until_done(fetch_records(shared, reads)).await
    }

    /// `work`'s output (work done off this worker while only this
    /// connection waits); `None` when the connection is to close meanwhile
    /// (killed, shutdown).
    async fn until_done<T>(&mut self, work: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            biased;
            _ = self.info.kill.notified() => None,
            _ = Shared::wait_shutdown(self.shutdown) => None,
            done = work => Some(done),
        }
    }

    /// Waits for `work` ([`ConnIo::until_done`]), then holds `args` for a
    /// CLIENT PAUSE that began meanwhile, as [`ConnIo::fetch_and_stage`]
    /// does. True when the connection is to close.
    async fn wait_for(
        &mut self,
        shared: &Shared,
        work: impl std::future::Future<Output = ()>,
        args: &basalt_resp::Args<'_>,
    ) -> std::io::Result<bool> {
        if self.until_done(work).await.is_none() {
            return Ok(true);
        }
        Ok(shared.pubsub.pause.active() && self.wait_out_pause(shared, args).await?)
    }

    /// [`ConnIo::fetch`], then holds `args` for a CLIENT PAUSE that began
    /// meanwhile (as it would have been held before the fetch: the pause's
    /// OK promised no writes), then stages what arrived on this thread.
    /// True when the connection is to close.
    async fn fetch_and_stage(
        &mut self,
        shared: &Shared,
        reads: Vec<basalt_engine::ColdRead>,
        args: &basalt_resp::Args<'_>,
    ) -> std::io::Result<bool> {
        let Some(fetched) = self.fetch(shared, reads).await else {
            return Ok(true);
        };
        if shared.pubsub.pause.active() && self.wait_out_pause(shared, args).await? {
            return Ok(true);
        }
        for (plan, bytes) in fetched {
            basalt_engine::stage_record(&plan, &bytes);
        }
        Ok(false)
    }

    /// Holds `args` (unread, its reply not begun) while a CLIENT PAUSE
    /// holds it; true when the connection is to close meanwhile (killed,
    /// shutdown). The caller has released the gate.
    async fn wait_out_pause(
        &mut self,
        shared: &Shared,
        args: &basalt_resp::Args<'_>,
    ) -> std::io::Result<bool> {
        let pause = &shared.pubsub.pause;
        if pause.holds_command(args).is_none() {
            return Ok(false);
        }
        flush(
            self.stream,
            shared,
            self.info,
            self.out,
            self.deferred,
            self.wrote,
        )
        .await?;
        while let Some(until) = pause.holds_command(args) {
            tokio::select! {
                biased;
                _ = self.info.kill.notified() => return Ok(true),
                _ = Shared::wait_shutdown(self.shutdown) => return Ok(true),
                _ = pause.wait(until) => {}
            }
        }
        Ok(false)
    }
}

/// The reads a command about to run needs that are not in memory, to be
/// fetched before it (`commands::fetch` says which). Nothing for a
/// database whose residency is not checked.
fn command_cold_reads(
    shared: &Shared,
    conn: &Conn,
    args: &basalt_resp::Args<'_>,
) -> Vec<basalt_engine::ColdRead> {
    with_checked_db(shared, conn, |db, gen| {
        fetch::cold_reads(db, gen, conn.db, args)
    })
}

/// Calls `f` with the selected database and its slot's generation when
/// that database checks residency (reads there may be cold); nothing to
/// fetch otherwise (a database reading in place, or none opened yet).
fn with_checked_db(
    shared: &Shared,
    conn: &Conn,
    f: impl FnOnce(&basalt_engine::Db, u64) -> Vec<basalt_engine::ColdRead>,
) -> Vec<basalt_engine::ColdRead> {
    let slot = shared.keyspace.read(conn.db);
    match slot.db() {
        Some(db) if db.residency() != basalt_engine::Residency::InPlace => f(db, slot.generation()),
        _ => Vec::new(),
    }
}

/// Cold reads gathered for one transaction or hand-over of scripts,
/// within bounds (reads, bytes).
struct Gathered {
    reads: Vec<basalt_engine::ColdRead>,
    bytes: usize,
    max_reads: usize,
    max_bytes: usize,
    /// What each read fetches: a record wanted twice (`GET k` twice) is
    /// fetched once.
    places: std::collections::HashSet<(u64, u32, u32)>,
}

impl Gathered {
    fn new(max_reads: usize, max_bytes: usize) -> Gathered {
        Gathered {
            reads: Vec::new(),
            bytes: 0,
            max_reads,
            max_bytes,
            places: Default::default(),
        }
    }

    /// Adds `found`, what one key needs, whole or not at all: a key whose
    /// reads do not fit is left to be read where it is needed, and the
    /// next keys still get theirs (one long value does not use up the
    /// budget). False once no read fits any more.
    fn add(&mut self, found: impl IntoIterator<Item = basalt_engine::ColdRead>) -> bool {
        let (reads, bytes) = (self.reads.len(), self.bytes);
        for read in found {
            if !self.places.insert(read.place()) {
                continue;
            }
            self.bytes += read.record_len();
            self.reads.push(read);
        }
        if self.reads.len() > self.max_reads || self.bytes > self.max_bytes {
            // Does not fit: taken back.
            for read in self.reads.drain(reads..) {
                self.places.remove(&read.place());
            }
            self.bytes = bytes;
        }
        self.reads.len() < self.max_reads && self.bytes < self.max_bytes
    }

    /// Bytes still to be had: what the next key may fetch at most.
    fn room(&self) -> usize {
        self.max_bytes - self.bytes
    }
}

/// The reads of the records that the commands queued for EXEC read and
/// that are not in memory: GET and MGET's values, HGET and HMGET's fields,
/// and what each other command reads that `commands::fetch` fetches ahead
/// of it outside a transaction; at most `fetch::FETCH_AHEAD_MAX` reads and
/// `fetch::FETCH_AHEAD_BYTES` (what one command may hold staged).
/// Stops at a SELECT (later commands read another database). Fetching a
/// record that the transaction then does not read (a write before it moved
/// the key) costs a read and nothing else: staged bytes are found by where
/// a record lies, and records never change.
fn exec_cold_reads(shared: &Shared, conn: &Conn) -> Vec<basalt_engine::ColdRead> {
    let Some(queue) = conn.tx.queued() else {
        return Vec::new();
    };
    with_checked_db(shared, conn, |db, gen| exec_reads_in(db, gen, conn, queue))
}

fn exec_reads_in(
    db: &basalt_engine::Db,
    gen: u64,
    conn: &Conn,
    queue: &[u8],
) -> Vec<basalt_engine::ColdRead> {
    let mut gathered = Gathered::new(fetch::FETCH_AHEAD_MAX, fetch::FETCH_AHEAD_BYTES);
    let mut parser = basalt_resp::RequestParser::new(basalt_resp::Limits::default());
    let mut popped = crate::commands::list::Popped::default();
    let mut pos = 0;
    while let Ok(Parsed::Command { args, consumed }) = parser.parse(&queue[pos..]) {
        pos += consumed;
        let is = |name: &str| args[0].eq_ignore_ascii_case(name.as_bytes());
        let more = if is("select") {
            break;
        } else if is("get") && args.len() == 2 {
            gathered.add(fetch::whole(db, &args[1], gathered.room()))
        } else if is("mget") {
            args.iter()
                .skip(1)
                .all(|key| gathered.add(fetch::whole(db, key, gathered.room())))
        } else if (is("hget") && args.len() == 3) || (is("hmget") && args.len() >= 3) {
            // Field by field: the fields before one that does not fit are
            // still fetched.
            args.iter()
                .skip(2)
                .all(|field| gathered.add(db.cold_field_read(&args[1], field).ok().flatten()))
        } else if fetch::fetches_ahead(&args) {
            // What the command reads as the keys are now, but for the
            // list elements that pops queued before it take: a read of a
            // key an earlier command wrote reads on the worker.
            gathered.add(fetch::cold_reads_queued(
                db,
                gen,
                conn.db,
                &args,
                &mut popped,
                gathered.room(),
            ))
        } else {
            true
        };
        if !more {
            break;
        }
    }
    gathered.reads
}

/// Most records of one map a script's key fetches ahead: a script may read
/// one field of a hash, or all of them, and which is not known before it
/// runs.
const SCRIPT_MAP_MAX: usize = 64;

/// Most reads and bytes one hand-over of scripts fetches ahead (the script
/// thread stages up to 64 hand-overs at once).
const SCRIPT_FETCH_READS: usize = 64;
const SCRIPT_FETCH_BYTES: usize = 1 << 20;
/// Most segments of one string value a hand-over of scripts fetches ahead
/// (512 KiB of value: its records fit [`SCRIPT_FETCH_BYTES`]).
const SCRIPT_LONG_SEGMENTS: usize = 1024;

/// The reads of what the keys that the scripts handed over (`conn.script`:
/// EVAL, EVALSHA, FCALL and their read-only forms) declare hold and is not
/// in memory: a string's value (a segmented one's segments), or a map's
/// records when it has at most [`SCRIPT_MAP_MAX`] missing; at most 64
/// reads and 1 MiB per hand-over
/// (the script thread stages up to 64 hand-overs at once). Keys in the
/// selected database (a script that selects another reads on).
fn script_cold_reads(shared: &Shared, conn: &Conn) -> Vec<basalt_engine::ColdRead> {
    with_checked_db(shared, conn, |db, _| script_reads_in(db, &conn.script))
}

fn script_reads_in(db: &basalt_engine::Db, script: &[u8]) -> Vec<basalt_engine::ColdRead> {
    let mut gathered = Gathered::new(SCRIPT_FETCH_READS, SCRIPT_FETCH_BYTES);
    for key in script_keys(script).iter() {
        let segments = fetch::segments_in(gathered.room(), key).min(SCRIPT_LONG_SEGMENTS);
        let found = match fetch::whole_within(db, key, segments) {
            reads if !reads.is_empty() => reads,
            _ => db.cold_field_reads(key, SCRIPT_MAP_MAX),
        };
        if !gathered.add(found) {
            break;
        }
    }
    gathered.reads
}

/// The keys the scripts handed over (`conn.script`) declare, in order.
fn script_keys(script: &[u8]) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let mut parser = basalt_resp::RequestParser::new(basalt_resp::Limits {
        max_bulk_len: usize::MAX,
        ..basalt_resp::Limits::default()
    });
    let mut pos = 0;
    while let Ok(Parsed::Command { args, consumed }) = parser.parse(&script[pos..]) {
        pos += consumed;
        // EVAL* and FCALL* name their keys the same way: body or name,
        // the number of keys, the keys.
        let Some(count) = args
            .get(2)
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
        else {
            continue;
        };
        if count > args.len() - 3 {
            // EVAL refuses it ("Number of keys can't be greater than
            // number of args"): no keys.
            continue;
        }
        keys.extend(
            (3..3 + count)
                .filter_map(|i| args.get(i))
                .map(<[u8]>::to_vec),
        );
    }
    keys
}

/// The big sorted sets' and streams' indexes that the commands queued for
/// EXEC (`queue`, up to a SELECT) would open and the cache lacks
/// (`commands::zbuild`): built before EXEC runs them in place.
fn exec_indexes(shared: &Shared, dbi: usize, queue: &[u8]) -> Vec<zbuild::Wanted> {
    let mut keys = Vec::new();
    let mut parser = basalt_resp::RequestParser::new(basalt_resp::Limits::default());
    let mut pos = 0;
    while let Ok(Parsed::Command { args, consumed }) = parser.parse(&queue[pos..]) {
        pos += consumed;
        if args[0].eq_ignore_ascii_case(b"select") {
            break;
        }
        keys.extend(zbuild::read_keys(&args).into_iter().map(<[u8]>::to_vec));
    }
    zbuild::uncached(shared, dbi, keys.iter().map(|k| &k[..]))
}

/// Reads `reads` on this worker's io_uring (or the reader threads) and
/// returns each record that arrived whole and checked, with where it is,
/// for `basalt_engine::stage_record`. A read that failed is left out: the
/// command reads that record itself and reports the error.
async fn fetch_records(
    shared: &Shared,
    reads: Vec<basalt_engine::ColdRead>,
) -> Vec<(basalt_engine::StagePlan, Vec<u8>)> {
    let mut fetched = Vec::with_capacity(reads.len());
    let mut waits = std::collections::VecDeque::with_capacity(FETCH_WINDOW);
    let mut reads = reads.into_iter();
    loop {
        // At most FETCH_WINDOW of this connection's reads wait in the ring
        // (or for the reader threads) at once, so that a transaction's
        // hundreds of reads do not queue every other client's GET of this
        // worker behind them.
        while waits.len() < FETCH_WINDOW {
            let Some(read) = reads.next() else { break };
            let at = read.stage_plan();
            // Without readers the record is read by the command itself.
            waits.push_back((at, readers::fetch_record(&shared.readers, read)));
        }
        let Some((at, rx)) = waits.pop_front() else {
            return fetched;
        };
        if let Ok(record) = rx.await {
            if !record.is_empty() {
                fetched.push((at, record));
            }
        }
    }
}

/// Reads of one fetch ahead in flight at once ([`fetch_records`]).
const FETCH_WINDOW: usize = 16;

/// Drops the records staged for one command when the command is done,
/// however it ends.
struct StagedFor;

impl Drop for StagedFor {
    fn drop(&mut self) {
        basalt_engine::clear_staged();
    }
}

/// Appends a replicated write's reply, or its error line.
fn push_reply(out: &mut Vec<u8>, protocol: Protocol, reply: Result<Vec<u8>, String>) {
    match reply {
        Ok(bytes) => out.extend_from_slice(&bytes),
        Err(line) => Encoder::new(out, protocol).error(line.as_bytes()),
    }
}

/// CLIENT REPLY and CLIENT CACHING after a command (`modes` is not 0): drops
/// the reply under OFF or SKIP (pushes still go out, as in Redis), moves
/// SKIP on, and ends CACHING after the command (or the transaction) it was
/// given for, unless that was a CLIENT command.
fn after_modes(
    info: &ClientInfo,
    modes: u32,
    out: &mut Vec<u8>,
    reply_at: usize,
    found: Option<&'static crate::commands::CommandDef>,
    in_multi: bool,
) {
    use crate::pubsub::modes::{CACHING, REPLY_OFF, REPLY_SKIP, REPLY_SKIP_NEXT};
    if modes & (REPLY_OFF | REPLY_SKIP) != 0 {
        out.truncate(reply_at);
    }
    let mut clear = 0;
    let mut set = 0;
    if modes & REPLY_SKIP != 0 {
        clear |= REPLY_SKIP;
    }
    if modes & REPLY_SKIP_NEXT != 0 {
        clear |= REPLY_SKIP_NEXT;
        set |= REPLY_SKIP;
    }
    if modes & CACHING != 0 && !in_multi && found.is_none_or(|c| c.name != "client") {
        clear |= CACHING;
    }
    if clear != 0 {
        info.pubsub.modes.fetch_and(!clear, Ordering::Relaxed);
    }
    if set != 0 {
        info.pubsub.modes.fetch_or(set, Ordering::Relaxed);
    }
}

/// How a parked connection resumes.
enum Parked {
    /// A key was signalled: run the command again.
    Rerun,
    /// The deadline passed (or CLIENT UNBLOCK ... TIMEOUT).
    TimedOut,
    /// CLIENT UNBLOCK ... ERROR.
    Unblocked,
    /// The client went away, was killed, or the server is stopping.
    Closed,
}

/// Most input buffered while parked; past it the loop stops reading (and
/// so stops noticing a close) until the client is unblocked.
const PARKED_INPUT: usize = 1 << 20;

/// Waits, without running anything, until this client's waiter is woken,
/// its deadline passes, or the connection ends. Input that arrives
/// meanwhile is kept in `buf` for after the blocked command, as Redis keeps
/// it in the query buffer; reading it is how a close is noticed.
async fn park(
    stream: &mut TcpStream,
    shared: &Shared,
    info: &ClientInfo,
    protocol: Protocol,
    buf: &mut Vec<u8>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<Parked> {
    let Some(waiter) = shared.blocking.waiter(info.id) else {
        // Nothing registered (a handler bug): do not hang, run it again.
        return Ok(Parked::Rerun);
    };
    // Set while this client waits in line for the turn (crate::blocking):
    // when to check whether the holder has stalled.
    let mut patience: Option<tokio::time::Instant> = None;
    loop {
        let deadline = waiter.deadline();
        let read_more = buf.len() < PARKED_INPUT;
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            biased;
            _ = info.kill.notified() => return Ok(Parked::Closed),
            _ = Shared::wait_shutdown(shutdown) => return Ok(Parked::Closed),
            _ = waiter.woken() => {
                match waiter.unblock_reason() {
                    Unblock::Timeout => return Ok(Parked::TimedOut),
                    Unblock::Error => return Ok(Parked::Unblocked),
                    Unblock::No if waiter.has_turn() => return Ok(Parked::Rerun),
                    // Woken, but others are served first: wait for the turn.
                    Unblock::No => {}
                }
            }
            _ = sleep_until_opt(deadline) => return Ok(Parked::TimedOut),
            _ = sleep_until_opt(patience) => {
                shared.blocking.step_over_stalled();
                patience = None;
            }
            _ = info.pubsub.ready() => {
                if !pubsub::deliver(stream, info, &shared.pubsub, protocol, &shared.stats).await? {
                    return Ok(Parked::Closed);
                }
            }
            r = stream.read_buf(buf), if read_more => {
                match r {
                    Ok(0) | Err(_) => return Ok(Parked::Closed),
                    Ok(n) => {
                        shared.stats.net_input.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
            }
        }
        if info.killed.load(Ordering::SeqCst) {
            return Ok(Parked::Closed);
        }
        if !waiter.in_line() {
            patience = None;
        } else if patience.is_none() {
            patience = Some(tokio::time::Instant::now() + crate::blocking::TURN_PATIENCE);
        }
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
