//! Scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT, FUNCTION, FCALL
//! and FCALL_RO, on Lua 5.1 (`mlua`, vendored), as Redis 7.0 has them.
//!
//! The one idea: **a script runs alone, on the script thread, as one write
//! batch.** A connection that receives a script command hands it (and its
//! connection state) to the script thread and awaits the reply; the script
//! thread takes the exec gate exclusively (`crate::tx`), so no other
//! client's command runs until the script ends, opens one engine write
//! batch, so its writes are crash-atomic, and runs the script. Running it
//! off the connection workers is what lets a long script be reported and
//! stopped: every worker stays free to answer `-BUSY` once the script has
//! run past `busy-reply-threshold`, and to run SCRIPT KILL, FUNCTION KILL
//! and SHUTDOWN NOSAVE (see [`crate::tx::Gate`]). Inside MULTI, a script
//! runs inline in EXEC, which already holds the gate.
//!
//! Scripts are compiled once per SHA1 and cached; scripts that came by EVAL
//! are evicted oldest first past [`MAX_EVAL_SCRIPTS`] (as Redis 7.4 does),
//! SCRIPT LOAD's stay until SCRIPT FLUSH. FUNCTION libraries are kept on
//! disk (`functions`) and loaded again at start-up.

mod functions;
pub mod libs;
mod lua;
pub(crate) use lua::in_script;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use mlua::{Function, MultiValue, Value};
use parking_lot::Mutex;

use basalt_resp::{Args, Limits, Parsed, RequestParser};

use crate::commands::{
    def, flags::*, is, sub_arity, unknown_subcommand, After, CommandDef, Conn, Ctx, Error, Group,
    Result,
};
use crate::state::Shared;
use functions::{FunctionDef, Library};
use lua::{CallEnv, Interp, Outcome};

/// Scripts kept from EVAL (not SCRIPT LOAD) before the oldest is evicted.
pub const MAX_EVAL_SCRIPTS: usize = 500;

/// A script's flags from its `#!lua flags=...` line (the function flags).
const SHEBANG: u32 = 1 << 16;

/// The scripting commands.
pub const COMMANDS: &[CommandDef] = &[
    def(
        "eval",
        -3,
        NOSCRIPT | SKIP_MONITOR | STALE | NO_MANDATORY_KEYS | MOVABLE_KEYS | RUNS_SCRIPT,
        (0, 0, 0),
        Group::Scripting,
        "2.6.0",
        "Execute a Lua script server side",
        eval,
    ),
    def(
        "evalsha",
        -3,
        NOSCRIPT | SKIP_MONITOR | STALE | NO_MANDATORY_KEYS | MOVABLE_KEYS | RUNS_SCRIPT,
        (0, 0, 0),
        Group::Scripting,
        "2.6.0",
        "Execute a Lua script server side",
        eval,
    ),
    def(
        "eval_ro",
        -3,
        NOSCRIPT | SKIP_MONITOR | READONLY | STALE | NO_MANDATORY_KEYS | MOVABLE_KEYS | RUNS_SCRIPT,
        (0, 0, 0),
        Group::Scripting,
        "7.0.0",
        "Execute a read-only Lua script server side",
        eval,
    ),
    def(
        "evalsha_ro",
        -3,
        NOSCRIPT | SKIP_MONITOR | READONLY | STALE | NO_MANDATORY_KEYS | MOVABLE_KEYS | RUNS_SCRIPT,
        (0, 0, 0),
        Group::Scripting,
        "7.0.0",
        "Execute a read-only Lua script server side",
        eval,
    ),
    def(
        "fcall",
        -3,
        NOSCRIPT | SKIP_MONITOR | STALE | NO_MANDATORY_KEYS | MOVABLE_KEYS | RUNS_SCRIPT,
        (0, 0, 0),
        Group::Scripting,
        "7.0.0",
        "Invoke a function",
        fcall,
    ),
    def(
        "fcall_ro",
        -3,
        NOSCRIPT | SKIP_MONITOR | READONLY | STALE | NO_MANDATORY_KEYS | MOVABLE_KEYS | RUNS_SCRIPT,
        (0, 0, 0),
        Group::Scripting,
        "7.0.0",
        "Invoke a read-only function",
        fcall,
    ),
    def(
        "script",
        -2,
        NOSCRIPT,
        (0, 0, 0),
        Group::Scripting,
        "2.6.0",
        "A container for Lua scripts management commands",
        script,
    ),
    def(
        "function",
        -2,
        NOSCRIPT,
        (0, 0, 0),
        Group::Scripting,
        "7.0.0",
        "A container for function commands",
        function,
    ),
];

/// Lower-case hex SHA1 of `bytes` (script ids, `redis.sha1hex`).
pub fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

/// A script's id: its SHA1 in lower-case hex.
type Sha = [u8; 40];

/// [`sha1_hex`] without allocating.
fn sha_of(bytes: &[u8]) -> Sha {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = sha1_smol::Sha1::from(bytes).digest().bytes();
    let mut out = [0u8; 40];
    for (i, b) in digest.iter().enumerate() {
        out[2 * i] = HEX[(b >> 4) as usize];
        out[2 * i + 1] = HEX[(b & 15) as usize];
    }
    out
}

/// An SHA argument as a cache key (lower-cased), if it is 40 bytes long.
fn sha_key(arg: &[u8]) -> Option<Sha> {
    let mut k: Sha = arg.try_into().ok()?;
    k.make_ascii_lowercase();
    Some(k)
}

/// A compiled script.
#[derive(Debug)]
struct Cached {
    f: Function,
    /// [`SHEBANG`] and the `functions` flags of its `#!lua` line.
    flags: u32,
    /// The source, for a replicated EVALSHA (`crate::repl` proposes the
    /// body, so followers need no SCRIPT LOAD).
    body: Vec<u8>,
}

/// The interpreter and what lives in it.
#[derive(Debug)]
struct Engine {
    interp: Interp,
    /// Compiled scripts by SHA1 (lower-case hex).
    scripts: HashMap<Sha, Cached>,
    /// SHAs that came by EVAL, oldest first (evictable).
    evictable: VecDeque<Sha>,
    /// Loaded libraries by name.
    libs: std::collections::BTreeMap<String, Library>,
    /// Function name -> library name.
    index: HashMap<String, String>,
}

/// The script running now, for SCRIPT KILL, FUNCTION KILL, FUNCTION STATS
/// and the `-BUSY` reply (its clock lives in the gate:
/// [`crate::tx::Gate::busy`]).
#[derive(Debug, Default)]
pub struct Running {
    /// The script has called a write command: it can no longer be killed.
    wrote: AtomicBool,
    /// SCRIPT KILL / FUNCTION KILL asked it to stop.
    killed: AtomicBool,
    /// What runs: [`IDLE`], [`EVAL`] or [`FUNCTION`].
    kind: std::sync::atomic::AtomicU8,
    /// The running function's name and command line (FUNCTION STATS).
    function: Mutex<Option<(String, Vec<Vec<u8>>)>>,
}

/// [`Running::kind`]: no script runs.
const IDLE: u8 = 0;
/// [`Running::kind`]: an EVAL script runs.
const EVAL: u8 = 1;
/// [`Running::kind`]: a function runs.
const FUNCTION: u8 = 2;

/// Scripting's server-wide state.
pub struct Scripts {
    engine: Mutex<Engine>,
    running: Running,
    dir: PathBuf,
    /// The script thread's queue, started on first use.
    thread: OnceLock<std::sync::mpsc::Sender<Job>>,
    /// The server, for the script thread.
    shared: OnceLock<Weak<Shared>>,
    /// Loaded libraries and functions, readable while a script holds
    /// `engine` (FUNCTION STATS runs during a busy script).
    counts: (AtomicUsize, AtomicUsize),
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scripts")
    }
}

/// Script commands of one connection handed to the script thread (the
/// ones in a row in its read buffer, as RESP in `conn.script`: a pipeline
/// of EVALs is one job), and the output buffer their replies go to.
struct Job {
    conn: Conn,
    out: Vec<u8>,
    /// Records fetched ahead for the scripts' keys (`conn.rs`), staged on
    /// the script thread while they run.
    staged: Vec<(basalt_engine::StagePlan, Vec<u8>)>,
    done: tokio::sync::oneshot::Sender<Done>,
}

/// Most jobs the script thread runs under one hold of the gate.
const JOBS_PER_HOLD: usize = 64;

/// What the script thread hands back.
pub(crate) struct Done {
    /// The connection state, back.
    pub conn: Conn,
    /// The reply.
    pub out: Vec<u8>,
    /// What the connection must do next.
    pub after: Option<After>,
    /// Whether the script wrote (for `appendfsync always` and the dirty
    /// counter).
    pub wrote: bool,
}

thread_local! {
    /// The functions a library being loaded has registered so far.
    static REGISTERING: std::cell::RefCell<Option<Vec<FunctionDef>>> =
        const { std::cell::RefCell::new(None) };
}

/// `redis.register_function`, while FUNCTION LOAD runs a library's code.
fn register_function(lua: &mlua::Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
    let fail = |msg: &str| -> mlua::Result<(Value, bool)> {
        let t = lua.create_table()?;
        t.raw_set("err", format!("ERR {msg}"))?;
        Ok((Value::Table(t), true))
    };
    let (name, callback, mut flags, description) = match args.len() {
        1 => {
            let Some(Value::Table(t)) = args.front() else {
                return fail("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).");
            };
            let (mut name, mut callback, mut flags, mut description) = (None, None, 0, None);
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, v) = pair?;
                let key =
                    match &k {
                        Value::String(s) => s.to_string_lossy(),
                        _ => return fail(
                            "named argument key given to redis.register_function is not a string",
                        ),
                    };
                match key.as_str() {
                    "function_name" => match v {
                        Value::String(s) => name = Some(s.as_bytes().to_vec()),
                        Value::Integer(i) => name = Some(i.to_string().into_bytes()),
                        Value::Number(n) => name = Some(n.to_string().into_bytes()),
                        _ => return fail("function_name argument given to redis.register_function must be a string"),
                    },
                    "description" => match v {
                        Value::String(s) => description = Some(s.as_bytes().to_vec()),
                        Value::Integer(i) => description = Some(i.to_string().into_bytes()),
                        Value::Number(n) => description = Some(n.to_string().into_bytes()),
                        _ => return fail("description argument given to redis.register_function must be a string"),
                    },
                    "callback" => match v {
                        Value::Function(f) => callback = Some(f),
                        _ => return fail("callback argument given to redis.register_function must be a function"),
                    },
                    "flags" => match v {
                        Value::Table(list) => {
                            for item in list.sequence_values::<Value>() {
                                let bit = match item? {
                                    Value::String(s) => functions::flag(&s.as_bytes()),
                                    _ => None,
                                };
                                match bit {
                                    Some(b) => flags |= b,
                                    None => return fail("unknown flag given"),
                                }
                            }
                        }
                        _ => return fail("flags argument to redis.register_function must be a table representing function flags"),
                    },
                    _ => return fail("unknown argument given to redis.register_function"),
                }
            }
            let Some(name) = name else {
                return fail("redis.register_function must get a function name argument");
            };
            let Some(callback) = callback else {
                return fail("redis.register_function must get a callback argument");
            };
            (name, callback, flags, description)
        }
        2 => {
            let name = match args.front() {
                Some(Value::String(s)) => s.as_bytes().to_vec(),
                Some(Value::Integer(i)) => i.to_string().into_bytes(),
                Some(Value::Number(n)) => n.to_string().into_bytes(),
                _ => return fail("first argument to redis.register_function must be a string"),
            };
            let callback = match args.get(1) {
                Some(Value::Function(f)) => f.clone(),
                _ => return fail("second argument to redis.register_function must be a function"),
            };
            (name, callback, 0, None)
        }
        _ => return fail("wrong number of arguments to redis.register_function"),
    };
    flags &= !SHEBANG;
    if !functions::valid_name(&name) {
        return fail("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long");
    }
    let name = String::from_utf8_lossy(&name).into_owned();
    let outcome = REGISTERING.with(|r| {
        let mut r = r.borrow_mut();
        let Some(list) = r.as_mut() else {
            return Err("redis.register_function can only be called on FUNCTION LOAD command");
        };
        if list.iter().any(|f| f.name.eq_ignore_ascii_case(&name)) {
            return Err("Function already exists in the library");
        }
        list.push(FunctionDef {
            name,
            f: callback,
            flags,
            description,
        });
        Ok(())
    });
    match outcome {
        Ok(()) => Ok((Value::Nil, false)),
        Err(msg) => fail(msg),
    }
}

impl Scripts {
    /// The interpreter, with the libraries saved in `dir` loaded again.
    pub fn open(dir: PathBuf) -> anyhow::Result<Scripts> {
        let lua_err = |e: mlua::Error| anyhow::anyhow!("starting the Lua interpreter: {e}");
        let interp = Interp::new(register_function).map_err(lua_err)?;
        let mut engine = Engine {
            interp,
            scripts: HashMap::new(),
            evictable: VecDeque::new(),
            libs: Default::default(),
            index: HashMap::new(),
        };
        let codes = functions::load(&dir)
            .map_err(|e| anyhow::anyhow!("reading the saved functions: {e}"))?;
        for code in codes {
            let lib = engine
                .compile_library(&code)
                .map_err(|e| anyhow::anyhow!("loading a saved function library: {e}"))?;
            engine
                .install(lib, false)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let counts = (
            AtomicUsize::new(engine.libs.len()),
            AtomicUsize::new(engine.index.len()),
        );
        Ok(Scripts {
            counts,
            engine: Mutex::new(engine),
            running: Running::default(),
            dir,
            thread: OnceLock::new(),
            shared: OnceLock::new(),
        })
    }

    /// Tells the script thread which server it serves (once, at start-up).
    pub(crate) fn attach(&self, shared: &Arc<Shared>) {
        let _ = self.shared.set(Arc::downgrade(shared));
    }

    /// Runs the script commands `commands` of `conn` on the script thread
    /// and waits for them; `None` if the script thread is gone (the server
    /// is stopping), in which case `conn` is a stand-in and the connection
    /// must close.
    pub(crate) async fn offload(
        &self,
        conn: &mut Conn,
        out: Vec<u8>,
        staged: Vec<(basalt_engine::StagePlan, Vec<u8>)>,
    ) -> Option<Done> {
        let sender = self.thread.get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<Job>();
            let weak = self.shared.get().cloned().unwrap_or_default();
            std::thread::Builder::new()
                .name("basalt-script".into())
                .spawn(move || script_thread(weak, rx))
                .expect("spawn the script thread");
            tx
        });
        let stand_in = Conn {
            db: conn.db,
            protocol: conn.protocol,
            info: conn.info.clone(),
            tx: Default::default(),
            batch_clock: 0,
            tick: 0,
            script: Vec::new(),
            may_defer: false,
            deferred: Vec::new(),
            may_build_index: false,
            index_wanted: Vec::new(),
        };
        let owned = std::mem::replace(conn, stand_in);
        let (done, wait) = tokio::sync::oneshot::channel();
        sender
            .send(Job {
                conn: owned,
                out,
                staged,
                done,
            })
            .ok()?;
        let mut done = wait.await.ok()?;
        std::mem::swap(conn, &mut done.conn);
        Some(done)
    }

    /// Whether the last script run called a write command (and forgets it):
    /// the caller counts the write (dirty counter, `appendfsync always`).
    /// The source of the cached script with SHA1 `sha` (hex, any case).
    pub(crate) fn cached_body(&self, sha: &str) -> Option<Vec<u8>> {
        let key = sha_key(sha.as_bytes())?;
        self.engine.lock().scripts.get(&key).map(|c| c.body.clone())
    }

    pub(crate) fn take_wrote(&self) -> bool {
        self.running.wrote.swap(false, Ordering::Relaxed)
    }

    /// At shutdown: stops the running script if it has not written (a
    /// script that has runs to its end).
    pub(crate) fn stop_for_shutdown(&self) {
        if self.running.kind.load(Ordering::Acquire) != IDLE
            && !self.running.wrote.load(Ordering::Relaxed)
        {
            self.running.killed.store(true, Ordering::Relaxed);
        }
    }

    /// What `-BUSY` says while a script is past the threshold.
    pub(crate) fn busy_reply(&self) -> &'static str {
        if self.running.kind.load(Ordering::Acquire) == FUNCTION {
            "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
        } else {
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
        }
    }

    /// SCRIPT KILL (`eval`) or FUNCTION KILL.
    fn kill(&self, eval: bool) -> Result {
        let kind = self.running.kind.load(Ordering::Acquire);
        if kind == IDLE {
            return Err(Error::Msg(
                "NOTBUSY No scripts in execution right now.".into(),
            ));
        }
        if self.running.wrote.load(Ordering::Relaxed) {
            return Err(Error::Msg("UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.".into()));
        }
        if (kind == EVAL) != eval {
            // The other kind runs: the BUSY reply names the right command.
            return Err(Error::Msg(self.busy_reply().into()));
        }
        self.running.killed.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Number of loaded libraries and functions (INFO, FUNCTION STATS).
    fn counts(&self) -> (usize, usize) {
        (
            self.counts.0.load(Ordering::Relaxed),
            self.counts.1.load(Ordering::Relaxed),
        )
    }

    /// Saves the libraries to disk (after a change).
    fn persist(&self, engine: &Engine) -> Result {
        self.counts.0.store(engine.libs.len(), Ordering::Relaxed);
        self.counts.1.store(engine.index.len(), Ordering::Relaxed);
        let bytes = engine.dump();
        functions::save(&self.dir, &bytes)
            .map_err(|e| Error::err(format!("saving the functions failed: {e}")))
    }
}

/// The script thread: runs the handed-over script commands holding the
/// exec gate exclusively, every job waiting (up to [`JOBS_PER_HOLD`]) under
/// one hold.
fn script_thread(shared: Weak<Shared>, jobs: std::sync::mpsc::Receiver<Job>) {
    let mut parser = RequestParser::new(Limits {
        max_bulk_len: usize::MAX,
        ..Limits::default()
    });
    while let Ok(first) = jobs.recv() {
        let Some(shared) = shared.upgrade() else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < JOBS_PER_HOLD {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut done = Vec::with_capacity(batch.len());
        // What was fetched ahead for the batch's keys: found by where each
        // record lies, so one job's records never answer for another's.
        for job in &mut batch {
            for (plan, bytes) in std::mem::take(&mut job.staged) {
                basalt_engine::stage_record(&plan, &bytes);
            }
        }
        shared.gate.exclusive(|| {
            for mut job in batch {
                let mut after = None;
                let mut wrote = false;
                let wire = std::mem::take(&mut job.conn.script);
                let mut at = 0;
                parser.reset();
                while at < wire.len() {
                    let Ok(Parsed::Command { args, consumed }) = parser.parse(&wire[at..]) else {
                        break;
                    };
                    at += consumed;
                    // One clock read per command, as a connection batch.
                    job.conn.tick = crate::state::now_ns();
                    job.conn.batch_clock = job.conn.tick / 1_000_000;
                    after = crate::commands::execute(&shared, &mut job.conn, &mut job.out, args).1;
                    wrote |= shared.scripts.take_wrote();
                }
                // The buffer goes back with the connection, to be reused.
                job.conn.script = wire;
                job.conn.script.clear();
                let out = std::mem::take(&mut job.out);
                done.push((job, out, after, wrote));
            }
        });
        basalt_engine::clear_staged();
        drop(shared);
        for (job, out, after, wrote) in done {
            let _ = job.done.send(Done {
                conn: job.conn,
                out,
                after,
                wrote,
            });
        }
    }
}

/// Whether `args` is a script command the connection hands to the script
/// thread (outside MULTI): EVAL and friends with a valid arity.
pub(crate) fn handed_over(args: &Args<'_>) -> Option<&'static CommandDef> {
    if !matches!(args[0].first(), Some(b'e' | b'E' | b'f' | b'F')) {
        return None;
    }
    crate::commands::lookup(&args[0])
        .filter(|cmd| cmd.flags & RUNS_SCRIPT != 0 && cmd.arity_ok(args.len()))
}

impl Engine {
    /// Compiles (or finds) the script `body`; `evictable` for EVAL.
    fn script(&mut self, body: &[u8], evictable: bool) -> Result<(Sha, &Cached)> {
        let sha = sha_of(body);
        if !self.scripts.contains_key(&sha) {
            let (flags, code) = shebang(body)?;
            let f = self
                .interp
                .compile(code, lua::SCRIPT_SOURCE)
                .map_err(|m| Error::err(format!("Error compiling script (new function): {m}")))?;
            let body = body.to_vec();
            self.scripts.insert(sha, Cached { f, flags, body });
            if evictable {
                self.evictable.push_back(sha);
                while self.evictable.len() > MAX_EVAL_SCRIPTS {
                    if let Some(old) = self.evictable.pop_front() {
                        self.scripts.remove(&old);
                    }
                }
            }
        } else if !evictable {
            // SCRIPT LOAD of a script EVAL brought: it stays from now on.
            self.evictable.retain(|s| *s != sha);
        }
        let cached = self.scripts.get(&sha).expect("inserted above");
        Ok((sha, cached))
    }

    /// Runs a library's code, collecting what it registers.
    fn compile_library(&mut self, code: &[u8]) -> std::result::Result<Library, String> {
        let name = functions::metadata(code)?;
        let body_at = code.iter().position(|&b| b == b'\n').unwrap_or(code.len());
        let chunk = self
            .interp
            .compile(&code[body_at..], lua::FUNCTION_SOURCE)
            .map_err(|m| format!("ERR Error compiling function: {m}"))?;
        REGISTERING.with(|r| *r.borrow_mut() = Some(Vec::new()));
        let ran = self.interp.run_library(&chunk);
        let registered = REGISTERING
            .with(|r| r.borrow_mut().take())
            .unwrap_or_default();
        if let Err(msg) = ran {
            let msg = msg.split('\u{0}').next().unwrap_or_default().to_string();
            return Err(format!("ERR Error registering functions: {msg}"));
        }
        if registered.is_empty() {
            return Err("ERR No functions registered".into());
        }
        Ok(Library {
            name,
            code: code.to_vec(),
            functions: registered,
        })
    }

    /// Adds a library; with `replace`, one of the same name goes first.
    fn install(&mut self, lib: Library, replace: bool) -> std::result::Result<(), String> {
        if self.libs.contains_key(&lib.name) && !replace {
            return Err(format!("ERR Library '{}' already exists", lib.name));
        }
        for f in &lib.functions {
            if let Some(owner) = self.index.get(&f.name.to_ascii_lowercase()) {
                if *owner != lib.name {
                    return Err(format!("ERR Function {} already exists", f.name));
                }
            }
        }
        if let Some(old) = self.libs.remove(&lib.name) {
            for f in old.functions {
                self.index.remove(&f.name.to_ascii_lowercase());
            }
        }
        for f in &lib.functions {
            self.index
                .insert(f.name.to_ascii_lowercase(), lib.name.clone());
        }
        self.libs.insert(lib.name.clone(), lib);
        Ok(())
    }

    /// A function by name, case-insensitively (as Redis finds them).
    fn function(&self, name: &str) -> Option<&FunctionDef> {
        let lower = name.to_ascii_lowercase();
        let lib = self.libs.get(self.index.get(&lower)?)?;
        lib.functions
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(&lower))
    }

    fn dump(&self) -> Vec<u8> {
        functions::encode(
            self.libs
                .values()
                .map(|l| l.code.as_slice())
                .collect::<Vec<_>>()
                .into_iter(),
        )
    }

    fn clear_functions(&mut self) {
        self.libs.clear();
        self.index.clear();
    }
}

/// Reads an EVAL script's optional `#!lua [flags=a,b]` first line: its
/// flags ([`SHEBANG`] set when the line is there) and the code to compile
/// (the line blanked, so line numbers stay).
fn shebang(body: &[u8]) -> Result<(u32, &[u8])> {
    if !body.starts_with(b"#!") {
        return Ok((0, body));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err(Error::err("Invalid script shebang"));
    };
    let line = String::from_utf8_lossy(&body[..end]).into_owned();
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if engine != "#!lua" {
        return Err(Error::err(format!(
            "Unexpected engine in script shebang: {engine}"
        )));
    }
    let mut flags = SHEBANG;
    for p in parts {
        let Some(list) = p.strip_prefix("flags=") else {
            return Err(Error::err(format!("Unknown lua shebang option: {p}")));
        };
        for f in list.split(',').filter(|f| !f.is_empty()) {
            match functions::flag(f.as_bytes()) {
                Some(b) => flags |= b,
                None => {
                    return Err(Error::err(format!(
                        "Unexpected flag in script shebang: {f}"
                    )))
                }
            }
        }
    }
    Ok((flags, &body[end..]))
}

/// `numkeys` of EVAL / FCALL: the keys and the arguments after them.
/// How many of the arguments after `numkeys` are keys.
fn split_keys(args: &Args<'_>, fcall: bool) -> Result<usize> {
    let n = match crate::commands::parse_i64(&args[2]) {
        Some(n) => n,
        None if fcall => return Err(Error::err("Bad number of keys provided")),
        None => return Err(Error::NotInteger),
    };
    if n < 0 {
        return Err(Error::err("Number of keys can't be negative"));
    }
    let rest = args.len() - 3;
    if n as usize > rest {
        return Err(Error::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    Ok(n as usize)
}

/// Runs a compiled script or function on `ctx`'s connection, as one
/// isolated write batch, and writes its reply.
#[allow(clippy::too_many_arguments)]
fn run(
    ctx: &mut Ctx<'_>,
    engine: &Engine,
    f: &Function,
    name: &str,
    function: bool,
    read_only: bool,
    allow_oom: bool,
    args: &Args<'_>,
    nkeys: usize,
    command: Option<Vec<Vec<u8>>>,
) {
    let scripts = &ctx.shared.scripts;
    scripts.running.killed.store(false, Ordering::Relaxed);
    scripts.running.wrote.store(false, Ordering::Relaxed);
    if let Some(command) = command {
        *scripts.running.function.lock() = Some((name.to_string(), command));
    }
    scripts
        .running
        .kind
        .store(if function { FUNCTION } else { EVAL }, Ordering::Release);
    // The clock was read when the command started (`tick`).
    ctx.shared.gate.busy().start(ctx.conn.tick);
    let (db, clock) = (ctx.conn.db, ctx.conn.batch_clock);
    ctx.conn.batch_clock = ctx.now_ms;
    let outcome = {
        let _batch = ctx.shared.keyspace.batch();
        let mut env = CallEnv {
            shared: ctx.shared,
            conn: ctx.conn,
            read_only,
            allow_oom,
            resp3: false,
            wrote: &scripts.running.wrote,
            killed: &scripts.running.killed,
        };
        let mut out = std::mem::take(ctx.out);
        let o = engine
            .interp
            .run(&mut env, f, args, nkeys, function, &mut out);
        *ctx.out = out;
        o
    };
    // INFO errorstats: the run counted its reply's errors (and its calls
    // theirs); a raised error is counted here unless it is a call's,
    // passed on (Redis marks those tables `ignore_error_stats_update`).
    ctx.error_counted = true;
    ctx.conn.db = db;
    ctx.conn.batch_clock = clock;
    ctx.shared.gate.busy().stop();
    scripts.running.kind.store(IDLE, Ordering::Release);
    if function {
        *scripts.running.function.lock() = None;
    }
    if let Outcome::Failed(msg, counted) = outcome {
        let line = match msg.split_once('\u{0}') {
            Some((err, at)) => format!("{err} script: {name}, on {at}."),
            None => msg,
        };
        if !counted {
            ctx.shared.errors.count(format!("-{line}\r\n").as_bytes());
        }
        ctx.error_line(&line);
    }
}

/// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO.
fn eval(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let name = ctx.cmd.name;
    let by_sha = name.starts_with("evalsha");
    let ro_cmd = name.ends_with("_ro");
    let nkeys = split_keys(&args, false)?;
    let scripts = &ctx.shared.scripts;
    let mut engine = scripts.engine.lock();
    let (sha, f, flags) = if by_sha {
        let found = sha_key(&args[1]).and_then(|k| Some((k, engine.scripts.get(&k)?)));
        match found {
            Some((k, c)) => (k, c.f.clone(), c.flags),
            None => {
                return Err(Error::Msg(
                    "NOSCRIPT No matching script. Please use EVAL.".into(),
                ))
            }
        }
    } else {
        let (sha, c) = engine.script(&args[1], true)?;
        let (f, flags) = (c.f.clone(), c.flags);
        (sha, f, flags)
    };
    if ro_cmd && flags & SHEBANG != 0 && flags & functions::NO_WRITES == 0 {
        return Err(Error::err(
            "Can not execute a script with write flag using *_ro command.",
        ));
    }
    let read_only = ro_cmd || flags & functions::NO_WRITES != 0;
    let name = std::str::from_utf8(&sha).unwrap_or_default();
    let allow_oom = flags & functions::ALLOW_OOM != 0;
    run(
        ctx, &engine, &f, name, false, read_only, allow_oom, &args, nkeys, None,
    );
    drop(engine);
    Ok(())
}

/// FCALL, FCALL_RO.
fn fcall(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let ro_cmd = ctx.cmd.name == "fcall_ro";
    let fname = String::from_utf8_lossy(&args[1]).into_owned();
    let engine = ctx.shared.scripts.engine.lock();
    let Some(def) = engine.function(&fname).cloned() else {
        return Err(Error::err("Function not found"));
    };
    let nkeys = split_keys(&args, true)?;
    if ro_cmd && def.flags & functions::NO_WRITES == 0 {
        return Err(Error::err(
            "Can not execute a script with write flag using *_ro command.",
        ));
    }
    let read_only = ro_cmd || def.flags & functions::NO_WRITES != 0;
    let command = Some(args.to_vec());
    let allow_oom = def.flags & functions::ALLOW_OOM != 0;
    run(
        ctx, &engine, &def.f, &fname, true, read_only, allow_oom, &args, nkeys, command,
    );
    Ok(())
}

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

fn help(ctx: &mut Ctx<'_>, lines: &[&str]) {
    ctx.array(lines.len());
    for l in lines {
        ctx.simple(l.as_bytes());
    }
}

/// FLUSH's optional ASYNC | SYNC (`script`: SCRIPT's words for a bad
/// one, else FUNCTION's).
fn flush_mode(args: &Args<'_>, script: bool) -> Result {
    match args.len() {
        2 => Ok(()),
        3 if is(&args[2], "async") || is(&args[2], "sync") => Ok(()),
        _ if script => Err(Error::err("SCRIPT FLUSH only support SYNC|ASYNC option")),
        3 => Err(Error::err("FUNCTION FLUSH only supports SYNC|ASYNC option")),
        _ => Err(Error::err(
            "unknown subcommand or wrong number of arguments for 'FLUSH'. Try FUNCTION HELP.",
        )),
    }
}

/// SCRIPT LOAD | EXISTS | FLUSH | KILL | HELP.
fn script(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    let scripts = &ctx.shared.scripts;
    if is(sub, "load") {
        sub_arity("script|load", 3, &args)?;
        let sha = scripts.engine.lock().script(&args[2], false)?.0;
        ctx.bulk(&sha);
    } else if is(sub, "exists") {
        sub_arity("script|exists", -3, &args)?;
        let engine = scripts.engine.lock();
        let found: Vec<bool> = args
            .iter()
            .skip(2)
            .map(|s| sha_key(s).is_some_and(|k| engine.scripts.contains_key(&k)))
            .collect();
        drop(engine);
        ctx.array(found.len());
        for f in found {
            ctx.int(f as i64);
        }
    } else if is(sub, "flush") {
        flush_mode(&args, true)?;
        let mut engine = scripts.engine.lock();
        engine.scripts.clear();
        engine.evictable.clear();
        ctx.ok();
    } else if is(sub, "kill") {
        sub_arity("script|kill", 2, &args)?;
        scripts.kill(true)?;
        ctx.ok();
    } else if is(sub, "debug") {
        sub_arity("script|debug", 3, &args)?;
        // Basalt has no Lua debugger (LDB): debugging stays off.
        if is(&args[2], "no") {
            ctx.ok();
        } else if is(&args[2], "yes") || is(&args[2], "sync") {
            return Err(Error::err(
                "SCRIPT DEBUG is not supported: Basalt has no Lua debugger",
            ));
        } else {
            return Err(Error::err("Use SCRIPT DEBUG YES/SYNC/NO"));
        }
    } else if is(sub, "help") {
        sub_arity("script|help", 2, &args)?;
        help(ctx, SCRIPT_HELP);
    } else {
        return Err(unknown_subcommand("script", sub));
    }
    Ok(())
}

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

/// FUNCTION LOAD | DELETE | FLUSH | LIST | DUMP | RESTORE | KILL | STATS | HELP.
fn function(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let sub = &args[1];
    let scripts = &ctx.shared.scripts;
    if is(sub, "load") {
        sub_arity("function|load", -3, &args)?;
        // Options, then the code (the last argument).
        let code = &args[args.len() - 1];
        let mut replace = false;
        for opt in args.iter().skip(2).take(args.len() - 3) {
            if is(opt, "replace") {
                replace = true;
            } else {
                return Err(Error::err(format!(
                    "Unknown option given: {}",
                    String::from_utf8_lossy(opt)
                )));
            }
        }
        let mut engine = scripts.engine.lock();
        let lib = engine
            .compile_library(code)
            .map_err(|m| Error::Msg(m.into()))?;
        let name = lib.name.clone();
        engine
            .install(lib, replace)
            .map_err(|m| Error::Msg(m.into()))?;
        scripts.persist(&engine)?;
        drop(engine);
        ctx.bulk(name.as_bytes());
    } else if is(sub, "delete") {
        sub_arity("function|delete", 3, &args)?;
        let name = String::from_utf8_lossy(&args[2]).into_owned();
        let mut engine = scripts.engine.lock();
        let Some(lib) = engine.libs.remove(&name) else {
            return Err(Error::err("Library not found"));
        };
        for f in lib.functions {
            engine.index.remove(&f.name.to_ascii_lowercase());
        }
        scripts.persist(&engine)?;
        ctx.ok();
    } else if is(sub, "flush") {
        flush_mode(&args, false)?;
        let mut engine = scripts.engine.lock();
        engine.clear_functions();
        scripts.persist(&engine)?;
        ctx.ok();
    } else if is(sub, "list") {
        function_list(ctx, &args)?;
    } else if is(sub, "dump") {
        sub_arity("function|dump", 2, &args)?;
        let bytes = scripts.engine.lock().dump();
        ctx.bulk(&bytes);
    } else if is(sub, "restore") {
        sub_arity("function|restore", -3, &args)?;
        function_restore(ctx, &args)?;
    } else if is(sub, "kill") {
        sub_arity("function|kill", 2, &args)?;
        scripts.kill(false)?;
        ctx.ok();
    } else if is(sub, "stats") {
        sub_arity("function|stats", 2, &args)?;
        if scripts.running.kind.load(Ordering::Acquire) == EVAL {
            return Err(Error::Msg(scripts.busy_reply().into()));
        }
        let running = scripts.running.function.lock().clone();
        let (libs, funcs) = scripts.counts();
        let started = ctx.shared.gate.busy().since_ns();
        ctx.enc().map(2);
        ctx.bulk(b"running_script");
        match running {
            Some((name, command)) => {
                ctx.enc().map(3);
                ctx.bulk(b"name");
                ctx.bulk(name.as_bytes());
                ctx.bulk(b"command");
                ctx.array(command.len());
                for c in &command {
                    ctx.bulk(c);
                }
                ctx.bulk(b"duration_ms");
                let ms = crate::state::now_ns().saturating_sub(started) / 1_000_000;
                ctx.int(ms as i64);
            }
            _ => ctx.null(),
        }
        ctx.bulk(b"engines");
        ctx.enc().map(1);
        ctx.bulk(b"LUA");
        ctx.enc().map(2);
        ctx.bulk(b"libraries_count");
        ctx.int(libs as i64);
        ctx.bulk(b"functions_count");
        ctx.int(funcs as i64);
    } else if is(sub, "help") {
        sub_arity("function|help", 2, &args)?;
        help(ctx, FUNCTION_HELP);
    } else {
        return Err(unknown_subcommand("function", sub));
    }
    Ok(())
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
fn function_list(ctx: &mut Ctx<'_>, args: &Args<'_>) -> Result {
    let mut pattern: Option<&[u8]> = None;
    let mut with_code = false;
    let mut i = 2;
    while i < args.len() {
        if is(&args[i], "withcode") && !with_code {
            with_code = true;
        } else if is(&args[i], "libraryname") && pattern.is_none() && i + 1 < args.len() {
            pattern = Some(&args[i + 1]);
            i += 1;
        } else if is(&args[i], "libraryname") && i + 1 >= args.len() {
            return Err(Error::err("library name argument was not given"));
        } else {
            return Err(Error::err(format!(
                "Unknown argument {}",
                String::from_utf8_lossy(&args[i])
            )));
        }
        i += 1;
    }
    let engine = ctx.shared.scripts.engine.lock();
    let libs: Vec<&Library> = engine
        .libs
        .values()
        .filter(|l| pattern.is_none_or(|p| crate::glob::matches(p, l.name.as_bytes(), false)))
        .collect();
    ctx.array(libs.len());
    for lib in libs {
        ctx.enc().map(if with_code { 4 } else { 3 });
        ctx.bulk(b"library_name");
        ctx.bulk(lib.name.as_bytes());
        ctx.bulk(b"engine");
        ctx.bulk(b"LUA");
        ctx.bulk(b"functions");
        ctx.array(lib.functions.len());
        for f in &lib.functions {
            ctx.enc().map(3);
            ctx.bulk(b"name");
            ctx.bulk(f.name.as_bytes());
            ctx.bulk(b"description");
            ctx.opt_bulk(f.description.as_deref());
            ctx.bulk(b"flags");
            let names: Vec<&str> = functions::FLAG_NAMES
                .iter()
                .filter(|(b, _)| f.flags & b != 0)
                .map(|(_, n)| *n)
                .collect();
            ctx.enc().set(names.len());
            for n in names {
                ctx.simple(n.as_bytes());
            }
        }
        if with_code {
            ctx.bulk(b"library_code");
            ctx.bulk(&lib.code);
        }
    }
    Ok(())
}

/// FUNCTION RESTORE payload [FLUSH | APPEND | REPLACE].
fn function_restore(ctx: &mut Ctx<'_>, args: &Args<'_>) -> Result {
    #[derive(PartialEq)]
    enum Policy {
        Flush,
        Append,
        Replace,
    }
    let policy = match args.get(3) {
        None => Policy::Append,
        Some(p) if is(p, "flush") => Policy::Flush,
        Some(p) if is(p, "append") => Policy::Append,
        Some(p) if is(p, "replace") => Policy::Replace,
        Some(_) => {
            return Err(Error::err(
                "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            ))
        }
    };
    if args.len() > 4 {
        return Err(Error::err(
            "unknown subcommand or wrong number of arguments for 'RESTORE'. Try FUNCTION HELP.",
        ));
    }
    let Some(codes) = functions::decode(&args[2]) else {
        return Err(Error::err("DUMP payload version or checksum are wrong"));
    };
    let scripts = &ctx.shared.scripts;
    let mut engine = scripts.engine.lock();
    // Compile every library first: a payload that fails changes nothing.
    let mut libs = Vec::with_capacity(codes.len());
    for code in &codes {
        libs.push(
            engine
                .compile_library(code)
                .map_err(|m| Error::Msg(m.into()))?,
        );
    }
    let saved: Vec<Vec<u8>> = engine.libs.values().map(|l| l.code.clone()).collect();
    if policy == Policy::Flush {
        engine.clear_functions();
    }
    for lib in libs {
        if let Err(m) = engine.install(lib, policy == Policy::Replace) {
            // RESTORE words a clash without the quotes LOAD uses.
            let m = m.replace('\'', "");
            // Put the previous set back as it was.
            engine.clear_functions();
            for code in &saved {
                if let Ok(l) = engine.compile_library(code) {
                    let _ = engine.install(l, false);
                }
            }
            return Err(Error::Msg(m.into()));
        }
    }
    scripts.persist(&engine)?;
    drop(engine);
    ctx.ok();
    Ok(())
}

/// `basalt check`: the state of `<dir>/FUNCTIONS`: `None` if absent, the
/// number of libraries it holds, or why it cannot be read.
pub fn check_functions(dir: &std::path::Path) -> Option<std::result::Result<usize, String>> {
    if !dir.join(functions::FILE).exists() {
        return None;
    }
    Some(
        functions::load(dir)
            .map(|l| l.len())
            .map_err(|e| e.to_string()),
    )
}

/// INFO's scripting numbers: (cached scripts, libraries, functions).
pub fn info(scripts: &Scripts) -> (usize, usize, usize) {
    let e = scripts.engine.lock();
    (e.scripts.len(), e.libs.len(), e.index.len())
}

/// Bytes the Lua interpreter uses (INFO `used_memory_vm_eval`).
pub fn lua_memory(scripts: &Scripts) -> usize {
    scripts.engine.lock().interp.used_memory()
}
