//! # basalt-server
//!
//! The Basalt server: the Redis protocol over the Basalt engine.
//!
//! ```text
//! listener ──accept──> workers (N threads, each a single-threaded runtime)
//!                      ──> conn::serve (one task per connection; a hot
//!                          key's connections move to one worker)
//!                         │  read ─> parse every complete command (basalt-resp)
//!                         │        ─> commands::execute (the command table)
//!                         │        ─> one output buffer ─> one write
//!                         v
//!                      keyspace (numbered databases, key stripes) ─> basalt-engine
//! ```
//!
//! The one idea a reader needs: **a socket wakeup is a batch.** Every
//! complete command in the read buffer is executed and every reply appended
//! to one buffer that is written with one call; under `appendfsync always`
//! the batch's writes share one fsync before any of its replies leaves.
//!
//! [`start`] runs a server on its own tokio runtime and returns a
//! [`ServerHandle`], so tests can run servers in-process on port 0.
//!
//! Start-up order: the runtime, then the HTTP listener (`crate::http`,
//! answering 503 while loading), then the databases are loaded, then the
//! RESP listener is bound; the HTTP API turns ready when the keyspace is.

pub mod auth;
pub mod blocking;
pub mod brlock;
pub mod check;
mod clock;
pub mod cmdstats;
pub mod commands;
pub mod config;
mod conn;
pub mod glob;
pub(crate) mod hdr;
pub mod http;
pub mod hyperloglog;
pub mod keyspace;
mod lanes;
pub mod maxmemory;
pub mod monitor;
pub mod notify;
pub mod pubsub;
pub mod rdb;
pub mod readers;
pub mod repl;
pub mod script;
mod state;
pub mod tracking;
pub mod tx;
mod uring;
mod workers;
pub mod zindex;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::net::TcpListener;

pub use config::{Appendfsync, Config};
pub use state::{ClientInfo, Clients, Shared, Stats};

use keyspace::Keyspace;

/// How long shutdown waits for connections to finish their batch in flight.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A running server. Dropping it shuts the server down.
#[derive(Debug)]
pub struct ServerHandle {
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
    done: Option<tokio::sync::oneshot::Receiver<anyhow::Result<()>>>,
    http_addr: Option<SocketAddr>,
}

/// Starts a server: opens the databases, binds, and serves on a new
/// multi-threaded tokio runtime. Returns once the listener is bound
/// ([`ServerHandle::addr`] is the real address, also with port 0).
pub fn start(config: Config) -> anyhow::Result<ServerHandle> {
    start_inner(config, false, None)
}

/// Like [`start`], and calls `on_http_bound` with the HTTP API's address
/// (`None` if it is off) once that listener serves and before the
/// databases are loaded: what a test needs to watch `GET /ready` answer 503
/// during loading.
pub fn start_with_loading_hook(
    config: Config,
    on_http_bound: impl FnOnce(Option<SocketAddr>),
) -> anyhow::Result<ServerHandle> {
    start_inner(config, false, Some(&mut Some(on_http_bound)))
}

/// Like [`start`], and SIGINT / SIGTERM shut the server down (for the
/// binary). The handlers are installed before the listener is bound, so a
/// signal that arrives once the server is reachable is always handled.
pub fn start_with_signals(config: Config) -> anyhow::Result<ServerHandle> {
    start_inner(config, true, None)
}

/// The loading hook, type-erased (`Option` so it can be taken once).
type Hook<'a> = &'a mut dyn HookFn;

trait HookFn {
    fn call(&mut self, addr: Option<SocketAddr>);
}

impl<F: FnOnce(Option<SocketAddr>)> HookFn for Option<F> {
    fn call(&mut self, addr: Option<SocketAddr>) {
        if let Some(f) = self.take() {
            f(addr)
        }
    }
}

fn start_inner(
    mut config: Config,
    signals: bool,
    hook: Option<Hook<'_>>,
) -> anyhow::Result<ServerHandle> {
    auth::fit_maxclients(&mut config);
    state::start_command_clock();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("basalt");
    if config.threads > 0 {
        builder.worker_threads(config.threads);
    }
    let runtime = builder.build().context("cannot start the tokio runtime")?;
    let signal_streams = if signals {
        let _guard = runtime.enter();
        use tokio::signal::unix::{signal, SignalKind};
        Some((
            signal(SignalKind::interrupt()).context("cannot install the SIGINT handler")?,
            signal(SignalKind::terminate()).context("cannot install the SIGTERM handler")?,
        ))
    } else {
        None
    };
    // The HTTP API listens before the data is loaded, so `/ready` can say
    // 503 meanwhile (and `/health` 200).
    let http = match config.http_port {
        Some(port) => Some(
            runtime
                .block_on(http::HttpServer::start(&config, port))
                .with_context(|| format!("cannot listen on {}:{} (HTTP)", config.bind, port))?,
        ),
        None => None,
    };
    let http_addr = http.as_ref().map(|h| h.addr());
    // CONFIG GET http-port answers the bound port (an ephemeral one too).
    let mut config = config;
    if let Some(a) = http_addr {
        config.http_port = Some(a.port());
    }
    if let Some(hook) = hook {
        hook.call(http_addr);
    }
    let load_started = Instant::now();
    let sync = match config.appendfsync {
        Appendfsync::Always | Appendfsync::Everysec => basalt_engine::SyncPolicy::EveryMs(1000),
        Appendfsync::No => basalt_engine::SyncPolicy::Never,
    };
    let hub = Arc::new(pubsub::Hub::default());
    hub.set_events(config.notify_keyspace_events);
    hub.set_limits(config.client_output_buffer_limit);
    let stats = state::Stats::default();
    let on_expired: keyspace::ExpiredHook = {
        let (hub, expired) = (hub.clone(), stats.expired.clone());
        Arc::new(move |db: usize, key: &[u8]| {
            expired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            hub.notify(notify::EXPIRED, "expired", key, db)
        })
    };
    let raft_state = config
        .node_id
        .map(|_| config.dir.join("raft").join("state"));
    let keyspace = Keyspace::open_replicated(
        &config.dir,
        config.databases as usize,
        sync,
        config.data_file_size,
        Some(on_expired),
        raft_state.as_deref(),
    )
    .with_context(|| format!("cannot open the data directory {}", config.dir.display()))?;
    let scripts = script::Scripts::open(config.dir.clone())
        .with_context(|| format!("cannot load the functions in {}", config.dir.display()))?;
    let load_time = load_started.elapsed();
    let listener = runtime
        .block_on(TcpListener::bind((config.bind, config.port)))
        .with_context(|| format!("cannot listen on {}:{}", config.bind, config.port))?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared::new(config, addr, keyspace, hub, scripts, stats));
    shared.cmdstats.configure(&shared.config);
    shared.apply_residency();
    shared.scripts.attach(&shared);
    if shared.config.node_id.is_some() {
        let repl = runtime
            .block_on(repl::Repl::start(&shared))
            .context("cannot start replication (Raft)")?;
        tracing::info!(
            "node {} of a replicated group, Raft on {}",
            repl.id(),
            repl.node.raft_addr()
        );
        let _ = shared.repl.set(repl);
        runtime.spawn(repl::expiry_sweeper(shared.clone()));
        runtime.spawn(repl::switch_master_announcer(shared.clone()));
    }
    let keys: u64 = (0..shared.keyspace.len())
        .map(|n| shared.keyspace.figures(n).keys)
        .sum();
    if let Some(h) = &http {
        h.set_ready(shared.clone());
        tracing::info!("HTTP API on http://{}", h.addr());
    }
    tracing::info!(
        "Basalt {} ready on {} (dir {}, {} keys loaded in {:.3}s, appendfsync {})",
        env!("CARGO_PKG_VERSION"),
        addr,
        shared.config.dir.display(),
        keys,
        load_time.as_secs_f64(),
        shared.config.appendfsync.as_str()
    );
    if let Some((mut int, mut term)) = signal_streams {
        let shared = shared.clone();
        runtime.spawn(async move {
            tokio::select! {
                _ = int.recv() => tracing::info!("SIGINT received"),
                _ = term.recv() => tracing::info!("SIGTERM received"),
            }
            shared.request_shutdown();
        });
    }
    let threads = shared.config.workers();
    let workers = workers::Workers::start(threads, &shared, SHUTDOWN_GRACE).inspect_err(|_| {
        // Workers already started end on the shutdown signal.
        shared.request_shutdown();
    })?;
    // Writes refused after a failed write (a full disk) resume by
    // themselves once that is safe; checked every second, when the batch
    // log is fsynced too.
    let resumer = shared.clone();
    runtime.spawn(async move {
        let mut shutdown = resumer.shutdown_rx();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    resumer.apply_residency();
                    // The batch log follows the databases' everysec fsync.
                    if let Err(e) = resumer.keyspace.sync_batch_log() {
                        tracing::error!(error = %e, "fsync of the batch log failed");
                    }
                    if resumer.keyspace.write_error().is_some() {
                        let ks = resumer.clone();
                        let _ = tokio::task::spawn_blocking(move || ks.keyspace.resume_writes()).await;
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
    });
    // The maxmemory flag follows the allocator ten times a second (a
    // command reads the flag only: crate::maxmemory), and INFO's
    // instantaneous rates take their samples.
    let watcher = shared.clone();
    runtime.spawn(async move {
        let mut shutdown = watcher.shutdown_rx();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        // After a stall, one late tick rather than a burst of catch-up
        // ticks, which would fill the rates' samples with zeros.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    watcher.maxmemory.refresh();
                    watcher.stats.sample_rates();
                }
                _ = shutdown.changed() => break,
            }
        }
    });
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let acceptor = shared.clone();
    runtime.spawn(async move {
        let result = accept_loop(listener, acceptor, workers, http).await;
        let _ = done_tx.send(result);
    });
    Ok(ServerHandle {
        shared,
        runtime: Some(runtime),
        done: Some(done_rx),
        http_addr,
    })
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    workers: workers::Workers,
    http: Option<http::HttpServer>,
) -> anyhow::Result<()> {
    let mut shutdown = shared.shutdown_rx();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => workers.dispatch(stream, peer),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = Shared::wait_shutdown(&mut shutdown) => break,
        }
    }
    drop(listener);
    tracing::info!(
        "shutting down: {} connection(s) finishing",
        shared.clients.len()
    );
    // A script still running is stopped now if it has written nothing (its
    // client gets the kill error); one that has runs to its end.
    shared.scripts.stop_for_shutdown();
    tokio::task::spawn_blocking(move || workers.finish())
        .await
        .context("a connection worker panicked")?;
    if let Some(http) = http {
        // Requests in flight finish (event streams end at once) before the
        // databases close.
        http.stop(SHUTDOWN_GRACE).await;
    }
    // A replicated node stops its Raft node first: no entry applies into
    // databases being closed, and it stops answering as a member.
    if let Some(repl) = shared.repl.get() {
        if let Err(e) = repl.stop().await {
            tracing::warn!(error = %e, "stopping the Raft node");
        }
    }
    // The databases close under the exec gate, so never in the middle of
    // a script's (or an EXEC's) batch.
    shared.scripts.stop_for_shutdown();
    let ks = shared.clone();
    tokio::task::spawn_blocking(move || {
        ks.gate.exclusive(|| {
            ks.keyspace.sync_all()?;
            ks.keyspace.close()
        })
    })
    .await
    .context("closing the databases panicked")?
    .context("closing the databases failed")?;
    tracing::info!("Basalt stopped; data synced and directory released");
    Ok(())
}

impl ServerHandle {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The HTTP API's address, if it is on.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// State shared by every connection (for tests and embedding).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops accepting, lets connections finish their batch, syncs and
    /// closes the databases. Returns the first error met on the way.
    pub fn shutdown(mut self) -> anyhow::Result<()> {
        self.shared.request_shutdown();
        self.finish()
    }

    /// Waits until the server stops (the SHUTDOWN command, or a signal for
    /// [`start_with_signals`]) and returns how closing went.
    pub fn wait(mut self) -> anyhow::Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        let (Some(rt), Some(done)) = (self.runtime.take(), self.done.take()) else {
            return Ok(());
        };
        let result = rt
            .block_on(done)
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the server task ended without a result")));
        rt.shutdown_timeout(Duration::from_secs(1));
        result
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if self.runtime.is_some() {
            self.shared.request_shutdown();
            if let Err(e) = self.finish() {
                tracing::warn!(error = %e, "shutdown failed");
            }
        }
    }
}
