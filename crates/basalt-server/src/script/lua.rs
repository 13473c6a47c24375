//! The Lua 5.1 interpreter behind EVAL and FCALL: the sandbox, the `redis`
//! API scripts call, and the conversions between Lua values and RESP.
//!
//! The one idea: **scripts see the server through `redis.call`, which runs
//! an ordinary command through the command table** ([`commands::execute`])
//! on the calling connection, and reads its RESP reply back as a Lua value.
//! So a command run from a script takes the same locks, emits the same
//! keyspace events, wakes the same blocked clients and counts in the same
//! statistics as it does from a client, and replication will see the same
//! write commands (see `docs/architecture.md`, "Scripting").
//!
//! The sandbox follows Redis 7.0: the globals table is read-only (creating
//! or changing a global fails with "Attempt to modify a readonly table"),
//! reading an unknown global fails, the library tables cannot be changed,
//! and `os`, `io`, `debug`, `dofile`, `loadfile`, `print`, `require` and
//! `setfenv` are absent. Lua 5.1 has no read-only tables, so scripts run in
//! an environment that is an empty *proxy* of the real globals (`__index`
//! reads through, `__newindex` refuses), the library tables are proxies
//! too, and the raw writers (`rawset`, `setmetatable`, `table.insert`,
//! `table.remove`, `table.sort`) refuse proxies. One visible difference:
//! `pairs(_G)` iterates nothing.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};

use basalt_resp::{Encoder, Frame, Limits, Parsed, Protocol, RequestParser};

use crate::commands::{self, flags, After, Conn};
use crate::state::Shared;

/// The chunk name of EVAL scripts (Lua reports errors as `user_script:N:`).
pub(crate) const SCRIPT_SOURCE: &str = "@user_script";
/// The chunk name of FUNCTION libraries.
pub(crate) const FUNCTION_SOURCE: &str = "@user_function";
/// The chunk name of Basalt's own Lua code, skipped when an error is
/// attributed to a line of the user's script.
const INTERNAL: &str = "=basalt";
/// Lua instructions between two checks for SCRIPT KILL.
const HOOK_EVERY: u32 = 100_000;
/// Deepest Lua table converted to a reply (Redis stops at the same depth).
const MAX_DEPTH: usize = 1000;

/// What a running script's `redis.call` works with. Set by [`Interp::run`]
/// for the duration of one run on the running thread.
pub(crate) struct CallEnv<'a> {
    pub shared: &'a Shared,
    pub conn: &'a mut Conn,
    /// EVAL_RO, FCALL_RO or a `no-writes` script: write commands fail.
    pub read_only: bool,
    /// An `allow-oom` script: its calls ignore maxmemory.
    pub allow_oom: bool,
    /// `redis.setresp(3)`: commands reply in RESP3 and their replies are
    /// converted with the RESP3 rules.
    pub resp3: bool,
    /// Set once the script has called a write command (SCRIPT KILL then
    /// refuses).
    pub wrote: &'a std::sync::atomic::AtomicBool,
    /// Set by SCRIPT KILL / FUNCTION KILL.
    pub killed: &'a std::sync::atomic::AtomicBool,
}

thread_local! {
    /// The [`CallEnv`] of the script running on this thread, or null.
    static ENV: Cell<*mut CallEnv<'static>> = const { Cell::new(std::ptr::null_mut()) };
    /// The interpreter running a script on this thread (for `redis_call`'s
    /// replies built with mlua), or null.
    static LUA: Cell<Option<*const Lua>> = const { Cell::new(None) };
}

/// Whether a script is running on this thread (its commands run inside
/// it): what Redis's `CLIENT_SCRIPT` flag tells a command.
pub(crate) fn in_script() -> bool {
    ENV.with(|e| !e.get().is_null())
}

/// Runs `f` with the running script's [`CallEnv`], or fails outside a run
/// (a function kept from a script and called later cannot reach one: the
/// interpreter only runs inside [`Interp::run`]).
fn with_env<R>(f: impl FnOnce(&mut CallEnv<'_>) -> R) -> Option<R> {
    let p = ENV.with(Cell::get);
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` was set by `Interp::run` from a `&mut CallEnv` that
    // outlives the run and is not otherwise used while Lua runs; it is reset
    // to null before `run` returns. Callbacks do not nest (commands run from
    // scripts never run a script), so this is the only live reference.
    Some(f(unsafe { &mut *p }))
}

/// An error value as Redis's Lua API raises it: `{err = "CODE message"}`.
fn error_table(lua: &Lua, msg: &[u8]) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(msg)?)?;
    Ok(Value::Table(t))
}

/// What a script function returned, or why it failed.
pub(crate) enum Outcome {
    /// The script's return value, already converted to RESP in `out`.
    Replied,
    /// The script raised an error: the reply line without `-`, and whether
    /// INFO errorstats already counted it (a call's error passed on).
    Failed(String, bool),
}

/// The interpreter: one Lua state with the sandbox installed.
pub(crate) struct Interp {
    lua: Lua,
    /// The real globals table (scripts see [`Interp::env`]).
    globals: Table,
    /// The read-only environment scripts and libraries run in.
    env: Table,
    /// `mode(m)`: switches the environment to EVAL's globals (0), FUNCTION
    /// LOAD's (1: only `redis.register_function` and `redis.log`) or
    /// functions' (2).
    mode: Function,
    /// The mode set last.
    current: std::sync::atomic::AtomicU8,
    xpcall: Function,
    /// `xpcall2(f, handler, keys, args)`: xpcall of `f(keys, args)`.
    xpcall2: Function,
    handler: Function,
}

impl std::fmt::Debug for Interp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interp")
    }
}

/// The sandbox and the `redis` table, built over the real globals `G`
/// from the Rust functions in `api`.
const SETUP: &str = r#"
local G, api, version, version_num = ...
local error, type, tostring, select, next, ipairs = error, type, tostring, select, next, ipairs
local rawget, rawset, setmetatable, loadstring, load, setfenv = rawget, rawset, setmetatable, loadstring, load, setfenv
local pcall, unpack, floor = pcall, unpack, math.floor
local tinsert, tremove, tsort = table.insert, table.remove, table.sort
-- proxy -> the table it shows (weak keys: proxies are kept by their users).
local real_of = setmetatable({}, {__mode = 'k'})

local function deny() error('Attempt to modify a readonly table', 2) end
local function protect(real)
  local proxy = {}
  local mt = {__index = real, __newindex = deny}
  real_of[proxy] = real
  -- getmetatable() shows a read-only view of the metatable.
  local view = {}
  real_of[view] = mt
  setmetatable(view, {__index = mt, __newindex = deny, __metatable = false})
  mt.__metatable = view
  setmetatable(proxy, mt)
  return proxy, mt
end
local function guard(t)
  if real_of[t] then error('Attempt to modify a readonly table', 0) end
end
local function strict(t)
  setmetatable(t, {__index = function(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end})
  return t
end

local redis = {}
redis.call = api.call
redis.pcall = api.pcall
redis.error_reply = api.error_reply
redis.status_reply = api.status_reply
redis.sha1hex = api.sha1hex
redis.log = api.log
redis.setresp = api.setresp
redis.set_repl = api.set_repl
redis.acl_check_cmd = api.acl_check_cmd
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
local consts = {
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
  REDIS_VERSION = version, REDIS_VERSION_NUM = version_num,
}
for k, v in next, consts do redis[k] = v end

-- What FUNCTION LOAD's code sees: `redis` with register_function and log,
-- and no other global.
local load_api = {register_function = api.register_function, log = redis.log}
for k, v in next, consts do load_api[k] = v end
local load_globals = strict({redis = protect(strict(load_api))})

for _, name in ipairs({'dofile', 'loadfile', 'print', 'getfenv', 'setfenv', 'newproxy',
    'module', 'require', 'package', 'os', 'io', 'debug'}) do
  G[name] = nil
end

local ENV, env_mt = protect(G)
G._G = ENV
G.loadstring = function(s, name)
  local f, e = loadstring(s, name)
  if f then setfenv(f, ENV) end
  return f, e
end
G.load = function(fn, name)
  local f, e = load(fn, name)
  if f then setfenv(f, ENV) end
  return f, e
end
G.rawset = function(t, k, v) guard(t) return rawset(t, k, v) end
G.setmetatable = function(t, m) guard(t) return setmetatable(t, m) end
-- Iteration sees through the proxies.
local function see(t) return real_of[t] or t end
G.next = function(t, k) return next(see(t), k) end
G.pairs = function(t) return next, see(t), nil end
G.ipairs = function(t) return ipairs(see(t)) end
G.unpack = function(t, ...) return unpack(see(t), ...) end
-- A caught error table reads as its message (Redis 7.0's pcall).
local function caught(ok, ...)
  if ok then return ok, ... end
  local e = ...
  if type(e) == 'table' then
    local m = rawget(e, 'err')
    if type(m) == 'string' or type(m) == 'number' then return false, m end
  end
  return false, e
end
G.pcall = function(...) return caught(pcall(...)) end
G.__redis__err__handler = api.handler
local tablelib = {}
for k, v in next, G.table do tablelib[k] = v end
tablelib.insert = function(t, ...) guard(t) return tinsert(t, ...) end
tablelib.remove = function(t, ...) guard(t) return tremove(t, ...) end
tablelib.sort = function(t, ...) guard(t) return tsort(t, ...) end
G.table = tablelib
-- Redis's generator (rand48), so a seeded sequence is Redis's.
G.math.random = api.random
G.math.randomseed = api.randomseed
for _, name in ipairs({'string', 'table', 'math', 'coroutine', 'bit', 'cjson', 'cmsgpack', 'struct'}) do
  if G[name] ~= nil then G[name] = protect(G[name]) end
end
-- Methods on strings read the protected string table, and the string
-- metatable itself is read-only.
local smt = getmetatable('')
smt.__index = G.string
local _, view_mt = protect(smt)
smt.__metatable = view_mt.__metatable
G.redis = protect(redis)
strict(G)
-- What functions see: the same, less EVAL's error handler global and
-- EVAL's debugging and replication calls (as in Redis's function engine).
local fredis = {}
for k, v in next, redis do fredis[k] = v end
fredis.breakpoint, fredis.debug, fredis.replicate_commands = nil, nil, nil
local FG = {}
for k, v in next, G do FG[k] = v end
FG.__redis__err__handler = nil
FG.redis = protect(fredis)
strict(FG)
-- Lua 5.1's xpcall passes no arguments: FCALL's keys and args go
-- through a closure.
local xpcall = xpcall
local function xpcall2(f, h, k, a)
  return xpcall(function() return f(k, a) end, h)
end
-- The globals scripts (0), FUNCTION LOAD (1) and functions (2) see.
local modes = {[0] = G, [1] = load_globals, [2] = FG}
local function mode(m)
  env_mt.__index = modes[m]
  real_of[ENV] = modes[m]
end
return ENV, xpcall2, mode
"#;

impl Interp {
    /// A fresh interpreter with the sandbox installed. `register` is the
    /// Rust side of `redis.register_function` (FUNCTION LOAD).
    pub fn new(
        register: fn(&Lua, MultiValue) -> mlua::Result<(Value, bool)>,
    ) -> mlua::Result<Interp> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        super::libs::register(&lua)?;
        let globals = lua.globals();
        let xpcall: Function = globals.raw_get("xpcall")?;
        let api = lua.create_table()?;
        // SAFETY: `redis_call` follows the Lua C API protocol (see there).
        api.raw_set("pcall", unsafe {
            lua.create_c_function(redis_call::<false>)?
        })?;
        // SAFETY: as above.
        api.raw_set("call", unsafe {
            lua.create_c_function(redis_call::<true>)?
        })?;
        api.raw_set("error_reply", lua.create_function(error_reply)?)?;
        api.raw_set("status_reply", lua.create_function(status_reply)?)?;
        let handler = lua.create_function(error_handler)?;
        api.raw_set("handler", handler.clone())?;
        let state = Arc::new(AtomicU64::new(rand48_seed(0)));
        let s = state.clone();
        api.raw_set(
            "random",
            super::libs::raising_function(&lua, move |_, args| {
                let r = rand48_next(&s);
                let int = |i: usize| to_number(args.get(i)).floor();
                let v = match args.len() {
                    0 => r,
                    1 => {
                        let m = int(0);
                        if m < 1.0 {
                            return Err("bad argument #1 to 'random' (interval is empty)".into());
                        }
                        (r * m).floor() + 1.0
                    }
                    2 => {
                        let (l, u) = (int(0), int(1));
                        if l > u {
                            return Err("bad argument #2 to 'random' (interval is empty)".into());
                        }
                        (r * (u - l + 1.0)).floor() + l
                    }
                    _ => return Err("wrong number of arguments".into()),
                };
                Ok(vec![Value::Number(v)])
            })?,
        )?;
        api.raw_set(
            "randomseed",
            lua.create_function(move |_, seed: Value| {
                state.store(
                    rand48_seed(to_number(Some(&seed)) as i64 as i32),
                    Ordering::Relaxed,
                );
                Ok(())
            })?,
        )?;
        // Each API function is a Rust function returning (value, failed),
        // kept in the registry, behind a C function that raises `value`
        // when `failed`: raised from C, the error keeps the caller's
        // frame (`return redis.call(...)` is a tail call, which would drop
        // it if the raiser were Lua), so it names the script's line.
        type Api = fn(&Lua, MultiValue) -> mlua::Result<(Value, bool)>;
        let raising: [(&str, Api, mlua::ffi::lua_CFunction); 6] = [
            ("sha1hex", sha1hex, raise_from::<0>),
            ("log", log, raise_from::<1>),
            ("setresp", setresp, raise_from::<2>),
            ("set_repl", set_repl, raise_from::<3>),
            ("acl_check_cmd", acl_check_cmd, raise_from::<4>),
            ("register_function", register, raise_from::<5>),
        ];
        for (i, (name, f, shim)) in raising.into_iter().enumerate() {
            lua.set_named_registry_value(
                RAISING_KEYS[i].to_str().unwrap_or_default(),
                lua.create_function(f)?,
            )?;
            // SAFETY: `raise_from` follows the Lua C API protocol (see there).
            let shim = unsafe { lua.create_c_function(shim)? };
            api.raw_set(name, shim)?;
        }
        let version = crate::commands::connection::REDIS_VERSION;
        let num = version
            .split('.')
            .fold(0i64, |n, p| (n << 8) | p.parse::<i64>().unwrap_or(0));
        let (env, xpcall2, mode): (Table, Function, Function) = lua
            .load(SETUP)
            .set_name(INTERNAL)
            .call((globals.clone(), api, version, num))?;
        set_hook(&lua, false)?;
        Ok(Interp {
            lua,
            globals,
            env,
            mode,
            current: std::sync::atomic::AtomicU8::new(0),
            xpcall,
            xpcall2,
            handler,
        })
    }

    /// Compiles `body` as a function in the sandbox; the error is the
    /// message of Lua's compiler.
    pub fn compile(&self, body: &[u8], source: &str) -> Result<Function, String> {
        self.lua
            .load(body)
            .set_name(source)
            .set_environment(self.env.clone())
            .into_function()
            .map_err(|e| match e {
                mlua::Error::SyntaxError { message, .. } => message,
                e => e.to_string(),
            })
    }

    /// Runs a FUNCTION library's top-level code with `redis` being the
    /// load-time API (`redis.register_function`).
    pub fn run_library(&self, chunk: &Function) -> Result<(), String> {
        self.set_mode(MODE_LOAD).map_err(|e| e.to_string())?;
        let r = self.call_protected(chunk, MultiValue::new());
        match r {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(msg)) => Err(msg),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Bytes the interpreter holds.
    pub fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }

    /// Switches the globals scripts see (see [`Interp::mode`]).
    fn set_mode(&self, m: u8) -> mlua::Result<()> {
        if self.current.swap(m, Ordering::Relaxed) != m {
            self.mode.call::<()>(m)?;
        }
        Ok(())
    }

    /// Calls `f` under the error handler: `Ok(Ok(values))`, or
    /// `Ok(Err(reply line))` for an error the script raised.
    fn call_protected(
        &self,
        f: &Function,
        args: MultiValue,
    ) -> mlua::Result<Result<MultiValue, String>> {
        let mut call_args = MultiValue::with_capacity(args.len() + 2);
        call_args.push_back(Value::Function(f.clone()));
        call_args.push_back(Value::Function(self.handler.clone()));
        let runner = if args.is_empty() {
            &self.xpcall
        } else {
            &self.xpcall2
        };
        call_args.extend(args);
        let mut r: MultiValue = runner.call(call_args)?;
        match r.pop_front() {
            Some(Value::Boolean(true)) => Ok(Ok(r)),
            _ => Ok(Err(describe_failure_line(
                r.pop_front().unwrap_or(Value::Nil),
            ))),
        }
    }

    /// Runs a script (or a function) and writes its reply to `out` in the
    /// client's protocol. For EVAL, `keys` and `argv` become the globals
    /// KEYS and ARGV; for FCALL (`as_args`) they are the function's two
    /// arguments. `name` is what error replies call the script (the SHA or
    /// the function's name).
    pub fn run(
        &self,
        env: &mut CallEnv<'_>,
        f: &Function,
        args: &basalt_resp::Args<'_>,
        nkeys: usize,
        as_args: bool,
        out: &mut Vec<u8>,
    ) -> Outcome {
        let switched = self.set_mode(if as_args { MODE_FUNCTION } else { MODE_EVAL });
        if let Err(e) = switched {
            return Outcome::Failed(format!("ERR {}", one_line(&e.to_string())), false);
        }
        ENV.with(|c| c.set((env as *mut CallEnv<'_>).cast::<CallEnv<'static>>()));
        LUA.with(|c| c.set(Some(&self.lua as *const Lua)));
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                ENV.with(|c| c.set(std::ptr::null_mut()));
                LUA.with(|c| c.set(None));
            }
        }
        let reset = Reset;
        let r = self.call_raw(f, args, nkeys, as_args);
        drop(reset);
        if env.killed.load(std::sync::atomic::Ordering::Relaxed) {
            // The hook went to every line for the killed script; back to
            // its usual pace.
            let _ = set_hook(&self.lua, false);
        }
        let resp3 = env.resp3;
        match r {
            Ok((true, v)) => {
                // Every error in the reply, nested ones too, is an error
                // reply Redis counts, unless a call counted it already.
                let mut errors = Vec::new();
                let mut enc = Encoder::new(out, env.conn.protocol);
                write_reply(&mut enc, &v, resp3, 0, &mut errors);
                for line in errors {
                    env.shared.errors.count(format!("-{line}\r\n").as_bytes());
                }
                Outcome::Replied
            }
            Ok((false, e)) => {
                let (line, counted) = describe_failure(e);
                Outcome::Failed(line, counted)
            }
            Err(e) => Outcome::Failed(format!("ERR {}", one_line(&e.to_string())), false),
        }
    }

    /// Builds KEYS and ARGV from `args` (the keys after `numkeys`, then the
    /// rest) and calls `f` under the error handler, with the Lua C API in
    /// one protected call (this is every script's path, and one mlua call
    /// instead of one per key). For EVAL the tables become the globals
    /// KEYS and ARGV; for FCALL (`as_args`) they are `f`'s arguments.
    /// Returns whether `f` succeeded, and its first result or the handler's
    /// error table.
    fn call_raw(
        &self,
        f: &Function,
        args: &basalt_resp::Args<'_>,
        nkeys: usize,
        as_args: bool,
    ) -> mlua::Result<(bool, Value)> {
        use mlua::ffi;
        let keys = args.iter().skip(3).take(nkeys);
        let argv = args.iter().skip(3 + nkeys);
        let nargv = args.len() - 3 - nkeys;
        let pushed = (f.clone(), self.handler.clone(), self.globals.clone());
        // SAFETY: `exec_raw` runs the closure in protected mode with the
        // three values above at stack indices 1 (f), 2 (the handler) and 3
        // (the real globals); it leaves exactly two values (whether f
        // succeeded, and its result or error) for the caller. The closure
        // owns nothing that needs dropping, so a Lua error (out of memory)
        // unwinding through it leaks nothing; mlua reports it as `Err`.
        unsafe {
            self.lua.exec_raw::<(bool, Value)>(pushed, |state| {
                let fill = |state: *mut ffi::lua_State,
                            n: usize,
                            items: &mut dyn Iterator<Item = &[u8]>| {
                    ffi::lua_createtable(state, n as std::ffi::c_int, 0);
                    for (i, item) in items.enumerate() {
                        ffi::lua_pushlstring(state, item.as_ptr().cast(), item.len());
                        ffi::lua_rawseti(state, -2, (i + 1) as ffi::lua_Integer);
                    }
                };
                ffi::luaL_checkstack(state, 8, std::ptr::null());
                fill(state, nkeys, &mut keys.clone()); // 4: KEYS
                fill(state, nargv, &mut argv.clone()); // 5: ARGV
                let nargs = if as_args {
                    // f, handler, G, keys, args -> f, handler, G, f, keys, args
                    ffi::lua_pushvalue(state, 1);
                    ffi::lua_insert(state, 4);
                    2
                } else {
                    ffi::lua_pushstring(state, c"ARGV".as_ptr());
                    ffi::lua_insert(state, -2);
                    ffi::lua_rawset(state, 3);
                    ffi::lua_pushstring(state, c"KEYS".as_ptr());
                    ffi::lua_insert(state, -2);
                    ffi::lua_rawset(state, 3);
                    ffi::lua_pushvalue(state, 1);
                    0
                };
                let status = ffi::lua_pcall(state, nargs, 1, 2);
                // f, handler, G, result -> ok, result
                ffi::lua_pushboolean(state, (status == 0) as std::ffi::c_int);
                ffi::lua_insert(state, 4);
                ffi::lua_remove(state, 1);
                ffi::lua_remove(state, 1);
                ffi::lua_remove(state, 1);
            })
        }
    }
}

/// Registry keys of the API functions behind [`raise_from`], by index.
const RAISING_KEYS: [&std::ffi::CStr; 6] = [
    c"basalt.sha1hex",
    c"basalt.log",
    c"basalt.setresp",
    c"basalt.set_repl",
    c"basalt.acl_check_cmd",
    c"basalt.register_function",
];

/// A C function that calls the API function registered under
/// `RAISING_KEYS[K]` with its arguments, then returns the first result, or
/// raises it as the error value when the second result is true.
unsafe extern "C-unwind" fn raise_from<const K: usize>(
    state: *mut mlua::ffi::lua_State,
) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: Lua calls this with a valid state whose stack holds the
    // arguments; a C function may use LUA_MINSTACK (20) slots, and this one
    // pushes one (the function) above them. `lua_call` and `lua_error` may
    // unwind or longjmp through this frame, which owns nothing to drop.
    unsafe {
        let n = ffi::lua_gettop(state);
        ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, RAISING_KEYS[K].as_ptr());
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, n, 2);
        let failed = ffi::lua_toboolean(state, -1) != 0;
        ffi::lua_settop(state, -2);
        if failed {
            ffi::lua_error(state);
        }
        1
    }
}

/// Installs the hook that stops a killed script: every [`HOOK_EVERY`]
/// instructions, or on every line once the script is killed (`fine`), as
/// Redis does: an error raised inside a `pcall` is caught there, but the
/// next line outside it raises again, so a script cannot loop on past a
/// kill by catching it.
fn set_hook(lua: &Lua, fine: bool) -> mlua::Result<()> {
    let triggers = if fine {
        HookTriggers::EVERY_LINE
    } else {
        HookTriggers::new().every_nth_instruction(HOOK_EVERY)
    };
    lua.set_global_hook(triggers, move |lua, _| {
        if with_env(|e| e.killed.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(false) {
            if !fine {
                set_hook(lua, true)?;
            }
            return Err(mlua::Error::runtime(KILLED));
        }
        Ok(VmState::Continue)
    })
}

/// [`Interp::set_mode`]: EVAL scripts.
const MODE_EVAL: u8 = 0;
/// [`Interp::set_mode`]: a FUNCTION library's top-level code.
const MODE_LOAD: u8 = 1;
/// [`Interp::set_mode`]: FCALL.
const MODE_FUNCTION: u8 = 2;

/// The text of SCRIPT KILL's error in the killed script.
const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

/// The field Redis sets on an error table a call or pcall returned, whose
/// error INFO errorstats already counted.
const COUNTED: &str = "ignore_error_stats_update";

/// Whether error table `t` carries [`COUNTED`].
fn counted_error(t: &Table) -> bool {
    matches!(t.raw_get::<Value>(COUNTED), Ok(Value::Boolean(true)))
}

/// The reply line of a failed run from what the error handler returned:
/// `{err, source, line}` becomes `<err> script: ..., on <source>:<line>.`
/// (the caller fills in the script's name).
fn describe_failure(v: Value) -> (String, bool) {
    let counted = matches!(&v, Value::Table(t) if counted_error(t));
    (describe_failure_line(v), counted)
}

fn describe_failure_line(v: Value) -> String {
    match v {
        Value::Table(t) => {
            let err = t
                .raw_get::<mlua::String>("err")
                .map(|s| String::from_utf8_lossy(&s.as_bytes()).into_owned())
                .unwrap_or_else(|_| "ERR unknown error".into());
            let source: Option<String> = t.raw_get("source").ok();
            let line: Option<i64> = t.raw_get("line").ok();
            match (source, line) {
                (Some(s), Some(l)) => format!("{}\u{0}{s}:{l}", one_line(&err)),
                _ => one_line(&err),
            }
        }
        Value::String(s) => format!("ERR {}", one_line(&s.to_string_lossy())),
        other => format!("ERR {}", one_line(&format!("{other:?}"))),
    }
}

/// Error replies are one line: Redis turns line breaks into spaces.
fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// The message of a Rust-side error inside Lua (a hook's or a callback's).
fn error_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => error_message(cause),
        mlua::Error::MemoryError(m) => format!("ERR {m}"),
        e => format!("ERR {e}"),
    }
}

/// xpcall's handler: turns any error into `{err, source, line}`, the line
/// being the innermost frame of the user's code (as Redis's
/// `__redis__err__handler` reports it).
fn error_handler(lua: &Lua, err: Value) -> mlua::Result<Table> {
    let killed = with_env(|e| e.killed.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(false);
    let msg: Vec<u8> = if killed {
        KILLED.as_bytes().to_vec()
    } else {
        match &err {
            Value::Table(t) => match t.raw_get::<Value>("err")? {
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Integer(i) => i.to_string().into_bytes(),
                Value::Number(n) => number_arg(n).into_bytes(),
                _ => b"ERR unknown error".to_vec(),
            },
            Value::String(s) => [&b"ERR "[..], &s.as_bytes()].concat(),
            Value::Error(e) => error_message(e).into_bytes(),
            Value::Nil => b"ERR nil".to_vec(),
            other => format!("ERR {}", other.to_string().unwrap_or_default()).into_bytes(),
        }
    };
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(&msg)?)?;
    if let Value::Table(e) = &err {
        if !killed && counted_error(e) {
            t.raw_set(COUNTED, true)?;
        }
    }
    for level in 1..64 {
        let Some(found) = lua.inspect_stack(level, |d| {
            let src = d.source();
            let what = src.what;
            let source = src.source.map(|s| s.into_owned());
            (what, source, d.current_line().map_or(0, |l| l as i64))
        }) else {
            break;
        };
        let (what, source, line) = found;
        match source {
            Some(s) if what != "C" && what != "tail" && s != INTERNAL => {
                t.raw_set("source", s)?;
                t.raw_set("line", line)?;
                break;
            }
            _ => {}
        }
    }
    Ok(t)
}

/// Formats a Lua number as Redis passes it to a command: a number that
/// is a 64-bit integer as that integer, any other as C's `%.17g`.
fn number_arg(n: f64) -> String {
    // 2^63: the first double past i64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if n.fract() == 0.0 && (-TWO_63..TWO_63).contains(&n) {
        format!("{}", n as i64)
    } else {
        format_g17(n)
    }
}

/// C's `printf("%.17g", n)`.
fn format_g17(n: f64) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n < 0.0 { "-inf" } else { "inf" }.into();
    }
    const P: i32 = 17;
    let sci = format!("{:.*e}", (P - 1) as usize, n);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..P).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{:.*}", (P - 1 - exp) as usize, n))
    }
}

/// Redis's `redisSrand48`: the rand48 state for `seed`.
fn rand48_seed(seed: i32) -> u64 {
    ((seed as u32 as u64) << 16) | 0x330e
}

/// Redis's `redisLrand48` step and `math.random`'s scaling to [0, 1).
fn rand48_next(state: &AtomicU64) -> f64 {
    const MASK: u64 = (1 << 48) - 1;
    let x = state.load(Ordering::Relaxed);
    let x = (x.wrapping_mul(0x5_DEEC_E66D).wrapping_add(0xb)) & MASK;
    state.store(x, Ordering::Relaxed);
    let r = (x >> 17) as i64;
    const MAX: i64 = i32::MAX as i64;
    (r % MAX) as f64 / MAX as f64
}

/// How Redis 7.0 stores an error in Lua (`luaPushErrorBuff`): from
/// `-CODE message` (a leading `-` is added if missing) the text
/// `CODE message`, or `ERR text` when there is no space to take a code
/// from; line breaks at the ends are trimmed.
fn error_text(raw: &[u8]) -> Vec<u8> {
    let body = raw.strip_prefix(b"-").unwrap_or(raw);
    let (code, msg): (&[u8], &[u8]) = match body.iter().position(|&b| b == b' ') {
        Some(i) => (&body[..i], &body[i + 1..]),
        None => (b"ERR", body),
    };
    let is_break = |b: &u8| *b == b'\r' || *b == b'\n';
    let start = msg.iter().position(|b| !is_break(b)).unwrap_or(msg.len());
    let end = msg
        .iter()
        .rposition(|b| !is_break(b))
        .map_or(start, |i| i + 1);
    let mut out = code.to_vec();
    out.push(b' ');
    out.extend_from_slice(&msg[start..end.max(start)]);
    out
}

/// `redis.error_reply(text)`.
fn error_reply(lua: &Lua, args: MultiValue) -> mlua::Result<Value> {
    match args.front() {
        Some(Value::String(s)) if args.len() == 1 => error_table(lua, &error_text(&s.as_bytes())),
        _ => error_table(lua, b"ERR wrong number or type of arguments"),
    }
}

/// `redis.status_reply(text)`.
fn status_reply(lua: &Lua, args: MultiValue) -> mlua::Result<Value> {
    let text = match args.front() {
        Some(Value::String(s)) if args.len() == 1 => s.as_bytes().to_vec(),
        Some(Value::Integer(i)) if args.len() == 1 => i.to_string().into_bytes(),
        Some(Value::Number(n)) if args.len() == 1 => number_arg(*n).into_bytes(),
        _ => return error_table(lua, b"ERR wrong number or type of arguments"),
    };
    let t = lua.create_table()?;
    t.raw_set("ok", lua.create_string(text)?)?;
    Ok(Value::Table(t))
}

/// Buffers `redis.call` reuses: the command as RESP, its parser, and the
/// reply. Commands run from scripts never run a script, so a call never
/// finds them borrowed.
struct Scratch {
    wire: Vec<u8>,
    parser: RequestParser,
    out: Vec<u8>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch {
        wire: Vec::new(),
        parser: RequestParser::new(Limits {
            max_bulk_len: usize::MAX,
            ..Limits::default()
        }),
        out: Vec::new(),
    });
}

/// Appends one RESP bulk string.
fn push_bulk(wire: &mut Vec<u8>, bytes: &[u8]) {
    use std::io::Write as _;
    let _ = write!(wire, "${}\r\n", bytes.len());
    wire.extend_from_slice(bytes);
    wire.extend_from_slice(b"\r\n");
}

/// `redis.call` (`RAISE`) and `redis.pcall`, on the Lua C API: this is
/// every script's hot path, so it reads its arguments from the stack and
/// pushes the common replies (integers, bulk strings, nulls, statuses,
/// errors) without going through mlua values. It works in two phases: the
/// first only reads the stack and runs Rust (the command), the second only
/// pushes onto the stack, with nothing to drop pending (the buffers are
/// held in `ManuallyDrop`), so a Lua error there (out of memory, or the
/// raise itself) leaves no Rust frame with a destructor. Other replies
/// (arrays, RESP3 types) are built with mlua and passed through the
/// registry.
unsafe extern "C-unwind" fn redis_call<const RAISE: bool>(
    state: *mut mlua::ffi::lua_State,
) -> std::ffi::c_int {
    use mlua::ffi;
    use std::mem::ManuallyDrop;
    // Phase 1: read the arguments and run the command.
    let (wire, out, what) = SCRATCH.with(|cell| {
        let Ok(mut scratch) = cell.try_borrow_mut() else {
            return (
                Vec::new(),
                Vec::new(),
                Pushed::Fail("ERR redis.call cannot run here"),
            );
        };
        let mut wire = std::mem::take(&mut scratch.wire);
        let mut out = std::mem::take(&mut scratch.out);
        // SAFETY: reading the caller's arguments: lua_gettop, lua_type,
        // lua_tonumber and lua_tolstring of a string neither allocate nor
        // raise.
        let what = unsafe { prepare(state, &mut wire) };
        let what = match what {
            Some(msg) => Pushed::Fail(msg),
            None => {
                scratch.parser.reset();
                match scratch.parser.parse(&wire) {
                    Ok(Parsed::Command { args, .. }) => {
                        match with_env(|env| run_command(env, args, &mut out)) {
                            None => {
                                Pushed::Fail("ERR redis.call is only available while a script runs")
                            }
                            Some(Err(msg)) => Pushed::Refused(msg),
                            Some(Ok(resp3)) => classify(&out, resp3),
                        }
                    }
                    _ => Pushed::Fail("ERR command too large to run from a script"),
                }
            }
        };
        (wire, out, what)
    });
    let wire = ManuallyDrop::new(wire);
    let out = ManuallyDrop::new(out);
    // Phase 2: push the reply (or the error table) and hand the buffers
    // back before raising.
    // SAFETY: a C function may use LUA_MINSTACK slots; this pushes at most
    // three. Nothing with a destructor is live from here on (the buffers
    // are ManuallyDrop and go back into SCRATCH before any raise).
    unsafe {
        let failed = match what {
            Pushed::Number(n) => {
                ffi::lua_pushnumber(state, n);
                false
            }
            Pushed::False => {
                ffi::lua_pushboolean(state, 0);
                false
            }
            Pushed::Bulk(at, len) => {
                ffi::lua_pushlstring(state, out.as_ptr().add(at).cast(), len);
                false
            }
            Pushed::Status(at, len) => {
                ffi::lua_createtable(state, 0, 1);
                ffi::lua_pushlstring(state, out.as_ptr().add(at).cast(), len);
                ffi::lua_setfield(state, -2, c"ok".as_ptr());
                false
            }
            Pushed::Error(at, len) => {
                push_error(state, &out[at..at + len]);
                true
            }
            Pushed::Fail(msg) => {
                push_error(state, msg.as_bytes());
                true
            }
            Pushed::Refused(msg) => {
                // Refused before it ran: counted here, as Redis counts a
                // script's rejected call (INFO errorstats).
                with_env(|env| env.shared.errors.count(format!("-{msg}\r\n").as_bytes()));
                push_error(state, msg.as_bytes());
                true
            }
            Pushed::Registry(failed) => {
                ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, REPLY_KEY.as_ptr());
                failed
            }
        };
        // Redis marks the error a call or pcall hands the script when the
        // command (or its refusal) already counted it: passed on as the
        // script's reply, it is not counted again.
        let counted = matches!(
            what,
            Pushed::Error(..) | Pushed::Refused(_) | Pushed::Registry(true)
        );
        if failed && counted && ffi::lua_type(state, -1) == ffi::LUA_TTABLE {
            ffi::lua_pushboolean(state, 1);
            ffi::lua_setfield(state, -2, c"ignore_error_stats_update".as_ptr());
        }
        SCRATCH.with(|cell| {
            if let Ok(mut scratch) = cell.try_borrow_mut() {
                scratch.wire = ManuallyDrop::into_inner(wire);
                scratch.out = ManuallyDrop::into_inner(out);
            }
        });
        if failed && RAISE {
            ffi::lua_error(state);
        }
        1
    }
}

/// Registry key of a reply [`redis_call`] built with mlua.
const REPLY_KEY: &std::ffi::CStr = c"basalt.reply";

/// What [`redis_call`] pushes; offsets are into its reply buffer.
enum Pushed {
    Number(f64),
    False,
    Bulk(usize, usize),
    Status(usize, usize),
    Error(usize, usize),
    /// An error of the call itself (not the command's reply).
    Fail(&'static str),
    /// The call refused before the command ran (unknown, not allowed in
    /// scripts, a write in a read-only script, wrong arity, OOM).
    Refused(&'static str),
    /// A reply built with mlua, left in the registry (whether it is an error).
    Registry(bool),
}

/// Writes the caller's arguments as one RESP command into `wire`; the
/// error if one is neither a string nor a number.
///
/// # Safety
/// `state` is the Lua state of a C function call.
unsafe fn prepare(state: *mut mlua::ffi::lua_State, wire: &mut Vec<u8>) -> Option<&'static str> {
    use mlua::ffi;
    use std::io::Write as _;
    // SAFETY: the caller's stack holds `n` arguments; these calls only read.
    unsafe {
        let n = ffi::lua_gettop(state);
        if n == 0 {
            return Some("ERR Please specify at least one argument for this redis lib call");
        }
        wire.clear();
        let _ = write!(wire, "*{n}\r\n");
        for i in 1..=n {
            match ffi::lua_type(state, i) {
                ffi::LUA_TSTRING => {
                    let mut len = 0usize;
                    let p = ffi::lua_tolstring(state, i, &mut len);
                    push_bulk(wire, std::slice::from_raw_parts(p.cast::<u8>(), len));
                }
                ffi::LUA_TNUMBER => {
                    push_bulk(wire, number_arg(ffi::lua_tonumber(state, i)).as_bytes())
                }
                _ => {
                    return Some("ERR Lua redis lib command arguments must be strings or integers")
                }
            }
        }
        None
    }
}

/// Pushes `{err = <text>}` (the text as Redis stores errors in Lua).
///
/// # Safety
/// `state` is the Lua state of a C function call with a free slot.
unsafe fn push_error(state: *mut mlua::ffi::lua_State, raw: &[u8]) {
    use mlua::ffi;
    // SAFETY: see the caller; `error_text`'s buffer is dropped before the
    // Lua calls, which copy from a stack array of at most 512 bytes, or
    // from `raw` itself when it is longer (no code to split off).
    unsafe {
        let text = error_text(raw);
        let mut buf = [0u8; 512];
        let (ptr, len) = if text.len() <= buf.len() {
            buf[..text.len()].copy_from_slice(&text);
            (buf.as_ptr(), text.len())
        } else {
            (raw.as_ptr(), raw.len())
        };
        drop(text);
        ffi::lua_createtable(state, 0, 2);
        ffi::lua_pushlstring(state, ptr.cast(), len);
        ffi::lua_setfield(state, -2, c"err".as_ptr());
    }
}

/// How the reply in `out` is pushed: directly for the one-line replies and
/// bulk strings, else built with mlua into the registry.
fn classify(out: &[u8], resp3: bool) -> Pushed {
    let Some(eol) = out.windows(2).position(|w| w == b"\r\n") else {
        return Pushed::Fail("ERR a command's reply could not be read back");
    };
    let line = &out[1..eol];
    let int = || std::str::from_utf8(line).ok()?.parse::<i64>().ok();
    match out.first() {
        Some(b':') => {
            if let Some(n) = int() {
                return Pushed::Number(n as f64);
            }
        }
        Some(b'$') => match int() {
            Some(-1) => return Pushed::False,
            Some(len) if len >= 0 && out.len() >= eol + 2 + len as usize => {
                return Pushed::Bulk(eol + 2, len as usize)
            }
            _ => {}
        },
        Some(b'+') => return Pushed::Status(1, eol - 1),
        Some(b'-') => return Pushed::Error(1, eol - 1),
        _ => {}
    }
    let built = (|| -> Option<bool> {
        let frame = match Frame::parse(out) {
            Ok(Some((f, _))) => f,
            _ => return None,
        };
        let failed = matches!(frame, Frame::Error(_) | Frame::BlobError(_));
        let lua = LUA.with(Cell::get)?;
        // SAFETY: `LUA` is set by `Interp::run` to the interpreter running
        // this script, which outlives the call.
        let lua = unsafe { &*lua };
        let v = frame_to_lua(lua, frame, resp3).ok()?;
        lua.set_named_registry_value(REPLY_KEY.to_str().ok()?, v)
            .ok()?;
        Some(failed)
    })();
    match built {
        Some(failed) => Pushed::Registry(failed),
        None => Pushed::Fail("ERR a command's reply could not be read back"),
    }
}

/// Runs one command for a script: the checks Redis makes for scripts, then
/// the command table, the reply left in `out`. `Ok(resp3)`: whether the
/// reply is to be read with the RESP3 rules.
fn run_command(
    env: &mut CallEnv<'_>,
    args: basalt_resp::Args<'_>,
    out: &mut Vec<u8>,
) -> Result<bool, &'static str> {
    let Some((cmd, idx)) = commands::lookup_indexed(&args[0]) else {
        return Err("ERR Unknown Redis command called from script");
    };
    if !cmd.arity_ok(args.len()) {
        return Err("ERR Wrong number of args calling Redis command from script");
    }
    if cmd.flags & flags::NOSCRIPT != 0 {
        return Err("ERR This Redis command is not allowed from script");
    }
    // A read-only script may not write, nor publish (which replicates).
    if env.read_only && (cmd.is_write() || cmd.flags & flags::MAY_REPLICATE != 0) {
        return Err("ERR Write commands are not allowed from read-only scripts.");
    }
    // maxmemory: a call that may grow memory fails as the command would
    // (not on a replicated group, where every node runs the script and
    // must run it alike).
    if cmd.flags & flags::DENYOOM != 0
        && !env.allow_oom
        && env.shared.maxmemory.over()
        && env.shared.repl.get().is_none()
    {
        return Err(crate::maxmemory::OOM);
    }
    if cmd.is_write() {
        env.wrote.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let saved = env.conn.protocol;
    env.conn.protocol = if env.resp3 {
        Protocol::Resp3
    } else {
        Protocol::Resp2
    };
    out.clear();
    // The command is charged its own run time (commandstats, SLOWLOG),
    // not the Lua time before it; the script keeps its start as its tick,
    // so EVAL is charged its whole run, nested commands included (Redis).
    let script_tick = env.conn.tick;
    env.conn.tick = crate::state::command_ns();
    // Checked above, against the script's flags.
    let (found, after) = crate::maxmemory::unchecked(|| {
        commands::execute_found(env.shared, env.conn, out, args, cmd, idx)
    });
    env.conn.tick = script_tick;
    env.conn.protocol = saved;
    if after == Some(After::Block) {
        // Scripts never block: a blocking command that would wait answers
        // as it does on timeout.
        env.shared.blocking.finish(env.conn.info.id);
        out.clear();
        let mut e = Encoder::new(out, env.conn.protocol);
        match found.map(|c| c.name) {
            Some("blmove" | "brpoplpush") => e.null(),
            _ => e.null_array(),
        }
    }
    Ok(env.resp3)
}

/// A command's reply as a Lua value, by Redis's conversion rules (RESP2:
/// status -> `{ok=}`, error -> `{err=}`, null -> false; RESP3 adds maps,
/// sets, doubles, booleans, big numbers, verbatim strings, nil).
fn frame_to_lua(lua: &Lua, frame: Frame, resp3: bool) -> mlua::Result<Value> {
    let single = |field: &str, v: Value| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(field, v)?;
        Ok(Value::Table(t))
    };
    Ok(match frame {
        Frame::Simple(s) => single("ok", Value::String(lua.create_string(&s)?))?,
        Frame::Error(e) | Frame::BlobError(e) => error_table(lua, &error_text(&e))?,
        Frame::Integer(n) => Value::Number(n as f64),
        Frame::Bulk(b) => Value::String(lua.create_string(&b)?),
        Frame::NullBulk | Frame::NullArray => Value::Boolean(false),
        Frame::Null => {
            if resp3 {
                Value::Nil
            } else {
                Value::Boolean(false)
            }
        }
        Frame::Array(items) | Frame::Push(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, frame_to_lua(lua, item, resp3)?)?;
            }
            Value::Table(t)
        }
        Frame::Map(pairs) => {
            let m = lua.create_table_with_capacity(0, pairs.len())?;
            for (k, v) in pairs {
                m.raw_set(frame_to_lua(lua, k, resp3)?, frame_to_lua(lua, v, resp3)?)?;
            }
            single("map", Value::Table(m))?
        }
        Frame::Set(items) => {
            let s = lua.create_table_with_capacity(0, items.len())?;
            for item in items {
                s.raw_set(frame_to_lua(lua, item, resp3)?, true)?;
            }
            single("set", Value::Table(s))?
        }
        Frame::Double(d) => single("double", Value::Number(d))?,
        Frame::Boolean(b) => Value::Boolean(b),
        Frame::BigNumber(d) => single("big_number", Value::String(lua.create_string(&d)?))?,
        Frame::Verbatim { format, text } => {
            let v = lua.create_table()?;
            v.raw_set("format", lua.create_string(format)?)?;
            v.raw_set("string", lua.create_string(&text)?)?;
            single("verbatim_string", Value::Table(v))?
        }
        Frame::Attributed { frame, .. } => frame_to_lua(lua, *frame, resp3)?,
    })
}

/// Writes a script's return value as a reply, by Redis's rules: numbers
/// become integers (truncated), strings bulk strings, `{err=}` an error,
/// `{ok=}` a status, `{double=}`, `{map=}`, `{set=}`, `{big_number=}` and
/// `{verbatim_string=}` their RESP3 types, other tables arrays (up to the
/// first nil), booleans `:1` / null (or RESP3 booleans after
/// `redis.setresp(3)`), everything else null. The error lines written that
/// INFO errorstats has not counted yet (a call's error, marked
/// [`COUNTED`], has been) go to `errors`.
pub(crate) fn write_reply(
    enc: &mut Encoder<'_>,
    v: &Value,
    resp3: bool,
    depth: usize,
    errors: &mut Vec<String>,
) {
    match v {
        Value::Integer(i) => enc.integer(*i),
        Value::Number(n) => enc.integer(truncate(*n)),
        Value::String(s) => enc.bulk(&s.as_bytes()),
        Value::Boolean(b) => {
            if resp3 {
                enc.boolean(*b)
            } else if *b {
                enc.integer(1)
            } else {
                enc.null()
            }
        }
        Value::Table(t) if depth < MAX_DEPTH => write_table(enc, t, resp3, depth, errors),
        Value::Table(_) => {
            let line = "ERR reached lua stack limit";
            enc.error(line.as_bytes());
            errors.push(line.into());
        }
        _ => enc.null(),
    }
}

/// C's `(long long)` cast of a double, saturating as x86 does not.
fn truncate(n: f64) -> i64 {
    if n.is_nan() {
        i64::MIN
    } else {
        n as i64
    }
}

fn write_table(
    enc: &mut Encoder<'_>,
    t: &Table,
    resp3: bool,
    depth: usize,
    errors: &mut Vec<String>,
) {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        let line = one_line(&e.to_string_lossy());
        enc.error(line.as_bytes());
        if !counted_error(t) {
            errors.push(line);
        }
        return;
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        let line = one_line(&s.to_string_lossy());
        enc.simple(line.as_bytes());
        return;
    }
    if let Ok(v) = t.raw_get::<Value>("double") {
        match v {
            Value::Number(d) => return enc.double(d),
            Value::Integer(i) => return enc.double(i as f64),
            _ => {}
        }
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("big_number") {
        enc.big_number(&s.as_bytes());
        return;
    }
    if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
        let pairs: Vec<(Value, Value)> = m.pairs::<Value, Value>().filter_map(Result::ok).collect();
        enc.map(pairs.len());
        for (k, v) in &pairs {
            write_reply(enc, k, resp3, depth + 1, errors);
            write_reply(enc, v, resp3, depth + 1, errors);
        }
        return;
    }
    if let Ok(Value::Table(s)) = t.raw_get::<Value>("set") {
        let items: Vec<Value> = s
            .pairs::<Value, Value>()
            .filter_map(Result::ok)
            .map(|(k, _)| k)
            .collect();
        enc.set(items.len());
        for k in &items {
            write_reply(enc, k, resp3, depth + 1, errors);
        }
        return;
    }
    if let Ok(Value::Table(v)) = t.raw_get::<Value>("verbatim_string") {
        if let (Ok(Value::String(f)), Ok(Value::String(s))) =
            (v.raw_get::<Value>("format"), v.raw_get::<Value>("string"))
        {
            let f = f.as_bytes();
            let mut format = [b't', b'x', b't'];
            if f.len() == 3 {
                format.copy_from_slice(&f);
            }
            enc.verbatim(&format, &s.as_bytes());
            return;
        }
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(v),
        }
    }
    enc.array(items.len());
    for v in &items {
        write_reply(enc, v, resp3, depth + 1, errors);
    }
}

/// Builds the failure tuple the Lua wrappers raise.
fn raise(lua: &Lua, msg: &str) -> mlua::Result<(Value, bool)> {
    Ok((error_table(lua, msg.as_bytes())?, true))
}

fn sha1hex(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
    let bytes: Vec<u8> = match args.front() {
        Some(Value::String(s)) if args.len() == 1 => s.as_bytes().to_vec(),
        Some(Value::Integer(i)) if args.len() == 1 => i.to_string().into_bytes(),
        Some(Value::Number(n)) if args.len() == 1 => number_arg(*n).into_bytes(),
        // Redis hashes what lua_tolstring gives: nothing for other types.
        Some(_) if args.len() == 1 => Vec::new(),
        _ => return raise(lua, "ERR wrong number of arguments"),
    };
    let hex = super::sha1_hex(&bytes);
    Ok((Value::String(lua.create_string(hex)?), false))
}

fn log(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
    if args.len() < 2 {
        return raise(lua, "ERR redis.log() requires two arguments or more.");
    }
    let level = match args.front() {
        Some(Value::Integer(i)) => *i,
        Some(Value::Number(n)) => *n as i64,
        _ => return raise(lua, "ERR First argument must be a number (log level)."),
    };
    if !(0..=3).contains(&level) {
        return raise(lua, "ERR Invalid debug level.");
    }
    let mut text = String::new();
    for (i, v) in args.iter().skip(1).enumerate() {
        if i > 0 {
            text.push(' ');
        }
        match v {
            Value::String(s) => text.push_str(&s.to_string_lossy()),
            Value::Integer(n) => text.push_str(&n.to_string()),
            Value::Number(n) => text.push_str(&number_arg(*n)),
            _ => {}
        }
    }
    match level {
        0 => tracing::debug!(target: "script", "{text}"),
        1 | 2 => tracing::info!(target: "script", "{text}"),
        _ => tracing::warn!(target: "script", "{text}"),
    }
    Ok((Value::Nil, false))
}

/// Lua's `lua_tonumber`: numbers, and strings that read as numbers; else 0.
fn to_number(v: Option<&Value>) -> f64 {
    match v {
        Some(Value::Integer(i)) => *i as f64,
        Some(Value::Number(n)) => *n,
        Some(Value::String(s)) => s
            .to_str()
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

fn setresp(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
    if args.len() != 1 {
        return raise(lua, "ERR redis.setresp() requires one argument.");
    }
    let n = to_number(args.front()) as i64;
    if n != 2 && n != 3 {
        return raise(lua, "ERR RESP version must be 2 or 3.");
    }
    with_env(|e| e.resp3 = n == 3);
    Ok((Value::Nil, false))
}

fn set_repl(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
    if args.len() != 1 {
        // Redis 7.0's words.
        return raise(lua, "ERR redis.set_repl() requires two arguments.");
    }
    let n = to_number(args.front()) as i64;
    if !(0..=3).contains(&n) {
        return raise(
            lua,
            "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
        );
    }
    // Basalt records a script's effects whole (its write commands); there
    // is no AOF/replica split to choose from yet, so the flags are accepted.
    Ok((Value::Nil, false))
}

fn acl_check_cmd(lua: &Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
    let name = match args.front() {
        Some(Value::String(s)) => s.as_bytes().to_vec(),
        _ => {
            return raise(
                lua,
                "ERR Please specify at least one argument for this redis lib call",
            )
        }
    };
    match commands::lookup(&name) {
        // No ACL users: the default user may run every command.
        Some(c) if c.arity_ok(args.len()) => Ok((Value::Boolean(true), false)),
        Some(_) => raise(
            lua,
            "ERR Wrong number of args calling Redis command from script",
        ),
        None => raise(lua, "ERR Invalid command passed to redis.acl_check_cmd()"),
    }
}
