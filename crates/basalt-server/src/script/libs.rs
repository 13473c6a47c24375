//! The four C libraries Redis links into its Lua 5.1 interpreter, rewritten in Rust.
//!
//! * `bit` — LuaBitOp: 32-bit bitwise operations on Lua numbers. Numbers are normalised the
//!   LuaBitOp way (add 2^52 + 2^51 and keep the low 32 bits of the double), so rounding and
//!   wrap-around match the C library, including for huge values, NaN and infinities.
//! * `cjson` — lua-cjson 2.1.0: JSON encoding and decoding with the same table/array rules,
//!   `%.14g` number formatting, escaping (`/` becomes `\/`), configuration functions, error
//!   messages and `cjson.null` (a NULL light userdata).
//! * `cmsgpack` — lua-cmsgpack 0.4.0: MessagePack `pack`, `unpack`, `unpack_one`, `unpack_limit`.
//! * `struct` — lua-struct: binary `pack`, `unpack` and `size` with the C format language.
//!
//! Behaviour was checked against redis-server 7.0.15. Errors are raised as plain Lua strings
//! (not mlua error userdata): every library function is a Rust function behind a C closure
//! that raises its message with the caller's position, as `luaL_error` does, so
//! `pcall(cjson.decode, "x")` and a script's error line read as in Redis. Argument errors read `bad argument #N to 'name' (...)` with the library name of the
//! function, whereas C Lua names the function as it was called (`'f'` for a local alias, `'?'`
//! under `pcall`).
//!
//! Known differences from Redis, all about extreme nesting (the C code is bounded by the Lua C
//! stack, 8000 slots; here every nested level holds mlua references and Rust stack frames, so
//! nesting is capped at [`MAX_NESTING`] levels):
//! * `cjson.encode`/`cjson.decode` never nest deeper than 1000 levels even if
//!   `encode_max_depth`/`decode_max_depth` are raised (Redis stops near 4000-8000); the error
//!   messages are the same ones Redis gives at its limit.
//! * `cmsgpack.unpack` reports `stack overflow (in function mp_decode_to_lua_array)` (or `_hash`)
//!   beyond 1000 nested levels; Redis does so near 4000.

use std::sync::Arc;

use mlua::{Function, LightUserData, Lua, Table, Value, Variadic};
use parking_lot::Mutex;

/// Deepest table nesting the encoders and decoders will walk (see the module comment).
const MAX_NESTING: usize = 1000;

/// Lua 5.1's `LUAI_MAXCSTACK`: the C libraries fail `lua_checkstack` beyond this many slots.
const LUA_MAX_CSTACK: usize = 8000;

/// A Lua function from `f` that raises its `Err(message)` as `luaL_error` does in a C
/// library function (prefixed with the calling Lua code's position).
pub(crate) fn raising_function<F>(lua: &Lua, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, &[Value]) -> Result<Vec<Value>, String> + Send + 'static,
{
    let w = Wrapper::new(lua)?;
    w.func(lua, move |lua, a| {
        f(lua, a).map_err(|m| Raise::Msg(m.into_bytes()))
    })
}

/// Installs the `bit`, `cjson`, `cmsgpack` and `struct` tables as globals of `lua`.
pub fn register(lua: &Lua) -> mlua::Result<()> {
    let wrap = Wrapper::new(lua)?;
    let globals = lua.globals();
    globals.set("bit", bit::create(lua, &wrap)?)?;
    globals.set("cjson", cjson::create(lua, &wrap)?)?;
    globals.set("cmsgpack", cmsgpack::create(lua, &wrap)?)?;
    globals.set("struct", lstruct::create(lua, &wrap)?)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Plumbing shared by the libraries.
// ---------------------------------------------------------------------------------------------

/// Why a library function failed.
enum Raise {
    /// A Lua error whose value is this (byte) string, as `luaL_error` would raise.
    Msg(Vec<u8>),
    /// An internal mlua failure (memory, ...), propagated as is.
    Lua(mlua::Error),
}

impl From<mlua::Error> for Raise {
    fn from(e: mlua::Error) -> Self {
        Raise::Lua(e)
    }
}

type Res<T> = Result<T, Raise>;

fn raise<T>(msg: impl Into<Vec<u8>>) -> Res<T> {
    Err(Raise::Msg(msg.into()))
}

/// `luaL_argerror`: `bad argument #n to 'fname' (extra)`.
fn arg_error<T>(n: usize, fname: &str, extra: &str) -> Res<T> {
    raise(format!("bad argument #{n} to '{fname}' ({extra})"))
}

/// Lua's name for the type of an argument, `no value` when absent.
fn type_name(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_) | Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

/// The number in `v`, converting numeric strings like `lua_tonumber` does.
fn to_number(lua: &Lua, v: Option<&Value>) -> Res<Option<f64>> {
    Ok(match v {
        Some(Value::Integer(i)) => Some(*i as f64),
        Some(Value::Number(n)) => Some(*n),
        Some(s @ Value::String(_)) => lua.coerce_number(s.clone())?,
        _ => None,
    })
}

/// `luaL_checknumber` on argument `n` (1-based).
fn check_number(lua: &Lua, args: &[Value], n: usize, fname: &str) -> Res<f64> {
    let v = args.get(n - 1);
    match to_number(lua, v)? {
        Some(x) => Ok(x),
        None => arg_error(n, fname, &format!("number expected, got {}", type_name(v))),
    }
}

/// `luaL_checkinteger` on argument `n`: the number truncated towards zero (as C casts it).
fn check_integer(lua: &Lua, args: &[Value], n: usize, fname: &str) -> Res<i64> {
    check_number(lua, args, n, fname).map(c_double_to_i64)
}

/// `luaL_optinteger`: `default` when the argument is absent or nil.
fn opt_integer(lua: &Lua, args: &[Value], n: usize, fname: &str, default: i64) -> Res<i64> {
    match args.get(n - 1) {
        None | Some(Value::Nil) => Ok(default),
        _ => check_integer(lua, args, n, fname),
    }
}

/// `luaL_checklstring` on argument `n`: the bytes, numbers converted like Lua does.
fn check_bytes(lua: &Lua, args: &[Value], n: usize, fname: &str) -> Res<Vec<u8>> {
    let v = args.get(n - 1);
    match v {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(num @ (Value::Integer(_) | Value::Number(_))) => {
            match lua.coerce_string(num.clone())? {
                Some(s) => Ok(s.as_bytes().to_vec()),
                None => arg_error(n, fname, "string expected, got number"),
            }
        }
        _ => arg_error(n, fname, &format!("string expected, got {}", type_name(v))),
    }
}

/// x86-64 `cvttsd2si` (what C's `(int64_t)d` compiles to): truncation, `i64::MIN` when out of
/// range or NaN.
fn c_double_to_i64(d: f64) -> i64 {
    if d > -9_223_372_036_854_775_809.0 && d < 9_223_372_036_854_775_808.0 {
        d as i64
    } else {
        i64::MIN
    }
}

/// x86-64 `(int)d`: truncation, `i32::MIN` when out of range or NaN.
fn c_double_to_i32(d: f64) -> i32 {
    if d > -2_147_483_649.0 && d < 2_147_483_648.0 {
        d as i32
    } else {
        i32::MIN
    }
}

/// x86-64 `(uint64_t)d` for `d >= 0` (gcc's two-step conversion).
fn c_double_to_u64(d: f64) -> u64 {
    if d < 9_223_372_036_854_775_808.0 || d.is_nan() {
        c_double_to_i64(d) as u64
    } else {
        (c_double_to_i64(d - 9_223_372_036_854_775_808.0) as u64) ^ (1 << 63)
    }
}

fn num(x: f64) -> Value {
    Value::Number(x)
}

fn bytes_value(lua: &Lua, b: &[u8]) -> Res<Value> {
    Ok(Value::String(lua.create_string(b)?))
}

/// Turns Rust functions into Lua functions that raise string errors.
///
/// The Rust side returns `(true, results...)` or `(false, message)`; a C closure around it
/// (see [`raise_where`]) forwards the results or raises the message prefixed with the
/// caller's position, exactly as `luaL_error` does in a C library function.
struct Wrapper {
    /// Lua's `next` (cjson walks objects with it).
    next: Function,
}

/// The C closure of [`Wrapper::func`]: calls its upvalue (the Rust function) with the
/// arguments, returns its results after the leading `true`, or raises `where .. message`
/// where `where` is the calling Lua code's `chunk:line: ` (empty when the caller is C, such
/// as `pcall`).
unsafe extern "C-unwind" fn raise_where(state: *mut mlua::ffi::lua_State) -> std::ffi::c_int {
    use mlua::ffi;
    // SAFETY: Lua calls this with a valid state; a C function may use LUA_MINSTACK slots and
    // this one pushes at most two above its arguments and the callee's results. `lua_call`
    // and `lua_error` may unwind or longjmp through this frame, which owns nothing to drop.
    unsafe {
        let n = ffi::lua_gettop(state);
        ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
        ffi::lua_insert(state, 1);
        ffi::lua_call(state, n, ffi::LUA_MULTRET);
        let total = ffi::lua_gettop(state);
        if ffi::lua_toboolean(state, 1) != 0 {
            return total - 1;
        }
        ffi::luaL_where(state, 1);
        ffi::lua_pushvalue(state, 2);
        ffi::lua_concat(state, 2);
        ffi::lua_error(state);
    }
}

impl Wrapper {
    fn new(lua: &Lua) -> mlua::Result<Self> {
        let next = lua.globals().get("next")?;
        Ok(Wrapper { next })
    }

    fn func<F>(&self, lua: &Lua, f: F) -> mlua::Result<Function>
    where
        F: Fn(&Lua, &[Value]) -> Res<Vec<Value>> + Send + 'static,
    {
        let raw = lua.create_function(move |lua, args: Variadic<Value>| match f(lua, &args) {
            Ok(values) => {
                let mut out = Vec::with_capacity(values.len() + 1);
                out.push(Value::Boolean(true));
                out.extend(values);
                Ok(Variadic::from(out))
            }
            Err(Raise::Msg(m)) => Ok(Variadic::from(vec![
                Value::Boolean(false),
                Value::String(lua.create_string(&m)?),
            ])),
            Err(Raise::Lua(e)) => Err(e),
        })?;
        // SAFETY: `raw` is pushed as the only argument; `lua_pushcclosure` pops it as the
        // closure's upvalue and leaves the closure, the one result.
        unsafe {
            lua.exec_raw::<Function>(raw, |state| {
                mlua::ffi::lua_pushcclosure(state, raise_where, 1);
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// bit (LuaBitOp 1.0.2)
// ---------------------------------------------------------------------------------------------

mod bit {
    use super::*;

    /// LuaBitOp's normalisation: round to nearest (ties to even) and wrap into int32, done by
    /// adding 2^52 + 2^51 and reading the low word of the double.
    pub(super) fn tobit(x: f64) -> i32 {
        (x + 6_755_399_441_055_744.0).to_bits() as u32 as i32
    }

    fn barg(lua: &Lua, args: &[Value], n: usize, fname: &str) -> Res<i32> {
        Ok(tobit(check_number(lua, args, n, fname)?))
    }

    fn int(i: i32) -> Vec<Value> {
        vec![Value::Integer(i64::from(i))]
    }

    pub(super) fn create(lua: &Lua, w: &Wrapper) -> mlua::Result<Table> {
        let t = lua.create_table()?;
        t.set(
            "tobit",
            w.func(lua, |lua, a| Ok(int(barg(lua, a, 1, "tobit")?)))?,
        )?;
        t.set(
            "bnot",
            w.func(lua, |lua, a| Ok(int(!barg(lua, a, 1, "bnot")?)))?,
        )?;
        t.set(
            "bswap",
            w.func(lua, |lua, a| {
                Ok(int(barg(lua, a, 1, "bswap")?.swap_bytes()))
            })?,
        )?;
        t.set(
            "tohex",
            w.func(lua, |lua, a| {
                let mut b = barg(lua, a, 1, "tohex")? as u32;
                let mut n = if a.len() < 2 {
                    8
                } else {
                    barg(lua, a, 2, "tohex")?
                };
                let mut digits: &[u8] = b"0123456789abcdef";
                if n == i32::MIN {
                    n = i32::MIN + 1;
                }
                if n < 0 {
                    n = -n;
                    digits = b"0123456789ABCDEF";
                }
                let n = n.min(8) as usize;
                let mut buf = vec![0u8; n];
                for slot in buf.iter_mut().rev() {
                    *slot = digits[(b & 15) as usize];
                    b >>= 4;
                }
                Ok(vec![bytes_value(lua, &buf)?])
            })?,
        )?;
        type Fold = fn(i32, i32) -> i32;
        let folds: [(&'static str, Fold); 3] = [
            ("band", |x, y| x & y),
            ("bor", |x, y| x | y),
            ("bxor", |x, y| x ^ y),
        ];
        for (name, op) in folds {
            t.set(
                name,
                w.func(lua, move |lua, a| {
                    let mut acc = barg(lua, a, 1, name)?;
                    for i in 2..=a.len() {
                        acc = op(acc, barg(lua, a, i, name)?);
                    }
                    Ok(int(acc))
                })?,
            )?;
        }
        type Shift = fn(i32, u32) -> i32;
        let shifts: [(&'static str, Shift); 5] = [
            ("lshift", |b, n| ((b as u32) << n) as i32),
            ("rshift", |b, n| ((b as u32) >> n) as i32),
            ("arshift", |b, n| b >> n),
            ("rol", |b, n| b.rotate_left(n)),
            ("ror", |b, n| b.rotate_right(n)),
        ];
        for (name, op) in shifts {
            t.set(
                name,
                w.func(lua, move |lua, a| {
                    let b = barg(lua, a, 1, name)?;
                    let n = barg(lua, a, 2, name)? as u32 & 31;
                    Ok(int(op(b, n)))
                })?,
            )?;
        }
        Ok(t)
    }
}

// ---------------------------------------------------------------------------------------------
// Number formatting shared by cjson (`%.<p>g`).
// ---------------------------------------------------------------------------------------------

/// C's `printf("%.<prec>g", x)` (glibc spelling of infinities and NaN).
fn format_g(x: f64, prec: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let p = prec.max(1);
    let sci = format!("{:.*e}", p - 1, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let mantissa = strip_fraction_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        strip_fraction_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

fn strip_fraction_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

// ---------------------------------------------------------------------------------------------
// cjson (lua-cjson 2.1.0)
// ---------------------------------------------------------------------------------------------

mod cjson {
    use super::*;

    #[derive(Clone, Copy)]
    struct Config {
        encode_sparse_convert: i32,
        encode_sparse_ratio: i32,
        encode_sparse_safe: i32,
        encode_max_depth: i32,
        encode_invalid_numbers: i32, // 0 off, 1 on, 2 null
        encode_number_precision: i32,
        encode_keep_buffer: i32,
        decode_invalid_numbers: i32,
        decode_max_depth: i32,
    }

    impl Default for Config {
        fn default() -> Self {
            Config {
                encode_sparse_convert: 0,
                encode_sparse_ratio: 2,
                encode_sparse_safe: 10,
                encode_max_depth: 1000,
                encode_invalid_numbers: 0,
                encode_number_precision: 14,
                encode_keep_buffer: 1,
                decode_invalid_numbers: 1,
                decode_max_depth: 1000,
            }
        }
    }

    type Shared = Arc<Mutex<Config>>;

    pub(super) fn null() -> Value {
        Value::LightUserData(LightUserData(std::ptr::null_mut()))
    }

    pub(super) fn create(lua: &Lua, w: &Wrapper) -> mlua::Result<Table> {
        let t = lua.create_table()?;
        let cfg: Shared = Arc::new(Mutex::new(Config::default()));

        let c = cfg.clone();
        let next = w.next.clone();
        t.set(
            "encode",
            w.func(lua, move |lua, a| {
                if a.len() != 1 {
                    return arg_error(1, "encode", "expected 1 argument");
                }
                let config = *c.lock();
                let mut enc = Encoder {
                    cfg: config,
                    out: Vec::new(),
                    next: next.clone(),
                };
                enc.encode(&a[0])?;
                Ok(vec![bytes_value(lua, &enc.out)?])
            })?,
        )?;
        let c = cfg.clone();
        t.set(
            "decode",
            w.func(lua, move |lua, a| {
                if a.len() != 1 {
                    return arg_error(1, "decode", "expected 1 argument");
                }
                let data = check_bytes(lua, a, 1, "decode")?;
                let config = *c.lock();
                Ok(vec![decode(lua, config, &data)?])
            })?,
        )?;

        // Configuration functions.
        let c = cfg.clone();
        t.set(
            "encode_sparse_array",
            w.func(lua, move |lua, a| {
                let name = "encode_sparse_array";
                verify_arg_count(a, 3, name)?;
                let mut g = c.lock();
                let convert =
                    enum_option(lua, a, 1, name, &mut g.encode_sparse_convert, BOOL_OPTIONS)?;
                let ratio =
                    integer_option(lua, a, 2, name, &mut g.encode_sparse_ratio, 0, i32::MAX)?;
                let safe = integer_option(lua, a, 3, name, &mut g.encode_sparse_safe, 0, i32::MAX)?;
                Ok(vec![convert, ratio, safe])
            })?,
        )?;
        type Field = fn(&mut Config) -> &mut i32;
        let ints: [(&'static str, Field, i32, i32); 3] = [
            ("encode_max_depth", |c| &mut c.encode_max_depth, 1, i32::MAX),
            ("decode_max_depth", |c| &mut c.decode_max_depth, 1, i32::MAX),
            (
                "encode_number_precision",
                |c| &mut c.encode_number_precision,
                1,
                14,
            ),
        ];
        for (name, field, min, max) in ints {
            let c = cfg.clone();
            t.set(
                name,
                w.func(lua, move |lua, a| {
                    verify_arg_count(a, 1, name)?;
                    let mut g = c.lock();
                    Ok(vec![integer_option(
                        lua,
                        a,
                        1,
                        name,
                        field(&mut g),
                        min,
                        max,
                    )?])
                })?,
            )?;
        }
        let enums: [(&'static str, Field, &'static [&'static str]); 3] = [
            (
                "encode_keep_buffer",
                |c| &mut c.encode_keep_buffer,
                BOOL_OPTIONS,
            ),
            (
                "encode_invalid_numbers",
                |c| &mut c.encode_invalid_numbers,
                &["off", "on", "null"],
            ),
            (
                "decode_invalid_numbers",
                |c| &mut c.decode_invalid_numbers,
                BOOL_OPTIONS,
            ),
        ];
        for (name, field, options) in enums {
            let c = cfg.clone();
            t.set(
                name,
                w.func(lua, move |lua, a| {
                    verify_arg_count(a, 1, name)?;
                    let mut g = c.lock();
                    Ok(vec![enum_option(lua, a, 1, name, field(&mut g), options)?])
                })?,
            )?;
        }

        // `cjson.new()` returns an independent module with its own configuration.
        let shim = Wrapper {
            next: w.next.clone(),
        };
        t.set(
            "new",
            lua.create_function(move |lua, ()| create(lua, &shim))?,
        )?;
        t.set("null", null())?;
        t.set("_NAME", "cjson")?;
        t.set("_VERSION", "2.1.0")?;
        Ok(t)
    }

    const BOOL_OPTIONS: &[&str] = &["off", "on"];

    fn verify_arg_count(a: &[Value], max: usize, name: &str) -> Res<()> {
        if a.len() > max {
            return arg_error(max + 1, name, "found too many arguments");
        }
        Ok(())
    }

    /// lua-cjson's `json_integer_option` (its range error always names argument #1).
    fn integer_option(
        lua: &Lua,
        a: &[Value],
        n: usize,
        name: &str,
        setting: &mut i32,
        min: i32,
        max: i32,
    ) -> Res<Value> {
        if !matches!(a.get(n - 1), None | Some(Value::Nil)) {
            let value = check_integer(lua, a, n, name)? as i32;
            if value < min || value > max {
                return arg_error(
                    1,
                    name,
                    &format!("expected integer between {min} and {max}"),
                );
            }
            *setting = value;
        }
        Ok(Value::Integer(i64::from(*setting)))
    }

    /// lua-cjson's `json_enum_option`: booleans or one of the option names; returns a boolean
    /// for off/on and the option name otherwise.
    fn enum_option(
        lua: &Lua,
        a: &[Value],
        n: usize,
        name: &str,
        setting: &mut i32,
        options: &[&str],
    ) -> Res<Value> {
        match a.get(n - 1) {
            None | Some(Value::Nil) => {}
            Some(Value::Boolean(b)) => *setting = i32::from(*b),
            Some(_) => {
                let s = check_bytes(lua, a, n, name)?;
                match options.iter().position(|o| o.as_bytes() == s.as_slice()) {
                    Some(i) => *setting = i as i32,
                    None => {
                        return arg_error(
                            n,
                            name,
                            &format!("invalid option '{}'", String::from_utf8_lossy(&s)),
                        )
                    }
                }
            }
        }
        Ok(if *setting <= 1 {
            Value::Boolean(*setting == 1)
        } else {
            Value::String(lua.create_string(options[*setting as usize])?)
        })
    }

    // ------------------------------------------------------------------ encoding

    struct Encoder {
        cfg: Config,
        out: Vec<u8>,
        /// Lua's raw `next`, to walk objects without holding an iterator per level.
        next: Function,
    }

    /// A table being encoded.
    enum Open {
        Array {
            table: Table,
            len: i64,
            next: i64,
            top: usize,
        },
        Object {
            table: Table,
            key: Value,
            first: bool,
            top: usize,
        },
    }

    fn encode_exception<T>(v: &Value, reason: &str) -> Res<T> {
        raise(format!("Cannot serialise {}: {reason}", type_name(Some(v))))
    }

    impl Encoder {
        /// Appends the JSON for `root`. Nesting uses an explicit stack, not recursion.
        fn encode(&mut self, root: &Value) -> Res<()> {
            let mut stack: Vec<Open> = Vec::new();
            self.emit(root, &mut stack, 1)?;
            while let Some(open) = stack.last_mut() {
                let (item, top) = match open {
                    Open::Array {
                        table,
                        len,
                        next,
                        top,
                    } => {
                        if *next > *len {
                            self.out.push(b']');
                            stack.pop();
                            continue;
                        }
                        if *next > 1 {
                            self.out.push(b',');
                        }
                        let item: Value = table.raw_get(*next)?;
                        *next += 1;
                        (item, *top + 1)
                    }
                    Open::Object {
                        table,
                        key,
                        first,
                        top,
                    } => {
                        let (k, item): (Value, Value) =
                            self.next.call((table.clone(), std::mem::take(key)))?;
                        if k.is_nil() {
                            self.out.push(b'}');
                            stack.pop();
                            continue;
                        }
                        if !*first {
                            self.out.push(b',');
                        }
                        *first = false;
                        match &k {
                            Value::Integer(_) | Value::Number(_) => {
                                self.out.push(b'"');
                                self.number(&k)?;
                                self.out.extend_from_slice(b"\":");
                            }
                            Value::String(s) => {
                                self.string(&s.as_bytes());
                                self.out.push(b':');
                            }
                            _ => {
                                return encode_exception(&k, "table key must be a number or string")
                            }
                        }
                        *key = k;
                        (item, *top + 2)
                    }
                };
                self.emit(&item, &mut stack, top)?;
            }
            Ok(())
        }

        /// Appends a scalar, or opens a table (pushing it on `stack`). `top` is the number of
        /// Lua stack slots the C encoder would be using (it fails `lua_checkstack(3)` past
        /// 8000).
        fn emit(&mut self, v: &Value, stack: &mut Vec<Open>, top: usize) -> Res<()> {
            match v {
                Value::String(s) => self.string(&s.as_bytes()),
                Value::Integer(_) | Value::Number(_) => self.number(v)?,
                Value::Boolean(b) => {
                    self.out
                        .extend_from_slice(if *b { b"true" } else { b"false" })
                }
                Value::Nil => self.out.extend_from_slice(b"null"),
                Value::LightUserData(p) if p.0.is_null() => self.out.extend_from_slice(b"null"),
                Value::Table(t) => {
                    let depth = stack.len() + 1;
                    if depth > self.cfg.encode_max_depth as usize
                        || depth > MAX_NESTING
                        || top + 3 > LUA_MAX_CSTACK
                    {
                        return raise(format!("Cannot serialise, excessive nesting ({depth})"));
                    }
                    let len = self.array_length(t, v)?;
                    if len > 0 {
                        self.out.push(b'[');
                        stack.push(Open::Array {
                            table: t.clone(),
                            len,
                            next: 1,
                            top,
                        });
                    } else {
                        self.out.push(b'{');
                        stack.push(Open::Object {
                            table: t.clone(),
                            key: Value::Nil,
                            first: true,
                            top,
                        });
                    }
                }
                _ => return encode_exception(v, "type not supported"),
            }
            Ok(())
        }

        /// lua-cjson's `lua_array_length`: the array size, or -1 / 0 to encode as an object.
        fn array_length(&self, t: &Table, tv: &Value) -> Res<i64> {
            let mut max: i32 = 0;
            let mut items: i32 = 0;
            for pair in t.pairs::<Value, Value>() {
                let (k, _) = pair?;
                let k = match k {
                    Value::Integer(i) => i as f64,
                    Value::Number(n) => n,
                    _ => return Ok(-1),
                };
                if k.floor() == k && k >= 1.0 {
                    if k > f64::from(max) {
                        max = c_double_to_i32(k);
                    }
                    items = items.wrapping_add(1);
                } else {
                    return Ok(-1);
                }
            }
            let ratio = self.cfg.encode_sparse_ratio;
            if ratio > 0 && max > items.wrapping_mul(ratio) && max > self.cfg.encode_sparse_safe {
                if self.cfg.encode_sparse_convert == 0 {
                    return encode_exception(tv, "excessively sparse array");
                }
                return Ok(-1);
            }
            Ok(i64::from(max))
        }

        fn number(&mut self, v: &Value) -> Res<()> {
            let x = match v {
                Value::Integer(i) => *i as f64,
                Value::Number(n) => *n,
                _ => 0.0,
            };
            if !x.is_finite() {
                match self.cfg.encode_invalid_numbers {
                    0 => return encode_exception(v, "must not be NaN or Inf"),
                    1 if x.is_nan() => {
                        self.out.extend_from_slice(b"nan");
                        return Ok(());
                    }
                    1 => {}
                    _ => {
                        self.out.extend_from_slice(b"null");
                        return Ok(());
                    }
                }
            }
            let s = format_g(x, self.cfg.encode_number_precision as usize);
            self.out.extend_from_slice(s.as_bytes());
            Ok(())
        }

        fn string(&mut self, s: &[u8]) {
            self.out.reserve(s.len() + 2);
            self.out.push(b'"');
            for &c in s {
                match c {
                    b'"' => self.out.extend_from_slice(b"\\\""),
                    b'\\' => self.out.extend_from_slice(b"\\\\"),
                    b'/' => self.out.extend_from_slice(b"\\/"),
                    b'\n' => self.out.extend_from_slice(b"\\n"),
                    b'\r' => self.out.extend_from_slice(b"\\r"),
                    b'\t' => self.out.extend_from_slice(b"\\t"),
                    0x08 => self.out.extend_from_slice(b"\\b"),
                    0x0c => self.out.extend_from_slice(b"\\f"),
                    0..=0x1f | 0x7f => {
                        const HEX: &[u8; 16] = b"0123456789abcdef";
                        self.out.extend_from_slice(b"\\u00");
                        self.out.push(HEX[usize::from(c >> 4)]);
                        self.out.push(HEX[usize::from(c & 15)]);
                    }
                    _ => self.out.push(c),
                }
            }
            self.out.push(b'"');
        }
    }

    // ------------------------------------------------------------------ decoding

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Tok {
        ObjBegin,
        ObjEnd,
        ArrBegin,
        ArrEnd,
        Str,
        Number,
        Boolean,
        Null,
        Colon,
        Comma,
        End,
        Error,
    }

    impl Tok {
        fn name(self) -> &'static str {
            match self {
                Tok::ObjBegin => "T_OBJ_BEGIN",
                Tok::ObjEnd => "T_OBJ_END",
                Tok::ArrBegin => "T_ARR_BEGIN",
                Tok::ArrEnd => "T_ARR_END",
                Tok::Str => "T_STRING",
                Tok::Number => "T_NUMBER",
                Tok::Boolean => "T_BOOLEAN",
                Tok::Null => "T_NULL",
                Tok::Colon => "T_COLON",
                Tok::Comma => "T_COMMA",
                Tok::End => "T_END",
                Tok::Error => "T_ERROR",
            }
        }
    }

    struct Token {
        kind: Tok,
        index: usize,
        string: Vec<u8>,
        number: f64,
        boolean: bool,
        error: &'static str,
    }

    /// An open container while decoding.
    enum Frame {
        /// The array and the index of its next element.
        Array(Table, i64),
        /// The object and the key of the value being parsed.
        Object(Table, Vec<u8>),
    }

    struct Parser<'a> {
        lua: &'a Lua,
        cfg: Config,
        data: &'a [u8],
        pos: usize,
        depth: usize,
        top: usize,
    }

    fn decode(lua: &Lua, cfg: Config, data: &[u8]) -> Res<Value> {
        if data.len() >= 2 && (data[0] == 0 || data[1] == 0) {
            return raise("JSON parser does not support UTF-16 or UTF-32");
        }
        let mut p = Parser {
            lua,
            cfg,
            data,
            pos: 0,
            depth: 0,
            top: 1,
        };
        let tok = p.next_token();
        let value = p.process_value(&tok)?;
        let tok = p.next_token();
        if tok.kind != Tok::End {
            return p.parse_error("the end", &tok);
        }
        Ok(value)
    }

    impl Parser<'_> {
        /// The byte at `i`; the end of the data reads as NUL, like the C string it was.
        fn at(&self, i: usize) -> u8 {
            self.data.get(i).copied().unwrap_or(0)
        }

        fn starts_with(&self, s: &[u8]) -> bool {
            self.data
                .get(self.pos..)
                .is_some_and(|rest| rest.starts_with(s))
        }

        fn token(&self, kind: Tok) -> Token {
            Token {
                kind,
                index: self.pos,
                string: Vec::new(),
                number: 0.0,
                boolean: false,
                error: "",
            }
        }

        fn error_token(&self, msg: &'static str) -> Token {
            Token {
                error: msg,
                ..self.token(Tok::Error)
            }
        }

        fn next_token(&mut self) -> Token {
            while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
                self.pos += 1;
            }
            let ch = self.at(self.pos);
            let single = match ch {
                b'{' => Some(Tok::ObjBegin),
                b'}' => Some(Tok::ObjEnd),
                b'[' => Some(Tok::ArrBegin),
                b']' => Some(Tok::ArrEnd),
                b',' => Some(Tok::Comma),
                b':' => Some(Tok::Colon),
                0 => return self.token(Tok::End),
                _ => None,
            };
            if let Some(kind) = single {
                let t = self.token(kind);
                self.pos += 1;
                return t;
            }
            let unknown = matches!(
                ch,
                b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'"' | b'+' | b'-'
            ) || ch.is_ascii_digit();
            if !unknown {
                return self.error_token("invalid token");
            }
            if ch == b'"' {
                return self.string_token();
            }
            if ch == b'-' || ch.is_ascii_digit() {
                if self.cfg.decode_invalid_numbers == 0 && self.is_invalid_number() {
                    return self.error_token("invalid number");
                }
                return self.number_token();
            }
            if self.starts_with(b"true") {
                let t = Token {
                    boolean: true,
                    ..self.token(Tok::Boolean)
                };
                self.pos += 4;
                return t;
            }
            if self.starts_with(b"false") {
                let t = self.token(Tok::Boolean);
                self.pos += 5;
                return t;
            }
            if self.starts_with(b"null") {
                let t = self.token(Tok::Null);
                self.pos += 4;
                return t;
            }
            if self.cfg.decode_invalid_numbers != 0 && self.is_invalid_number() {
                return self.number_token();
            }
            self.error_token("invalid token")
        }

        /// Forms `strtod` accepts but strict JSON does not (sign '+', hex, leading zeros, inf,
        /// nan).
        fn is_invalid_number(&self) -> bool {
            let mut p = self.pos;
            if self.at(p) == b'+' {
                return true;
            }
            if self.at(p) == b'-' {
                p += 1;
            }
            let c = self.at(p);
            if c == b'0' {
                let c2 = self.at(p + 1);
                return (c2 | 0x20) == b'x' || c2.is_ascii_digit();
            } else if c <= b'9' {
                return false;
            }
            let rest = self.data.get(p..).unwrap_or_default();
            let ci = |w: &[u8]| rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(w);
            ci(b"inf") || ci(b"nan")
        }

        fn number_token(&mut self) -> Token {
            match strtod(self.data, self.pos) {
                Some((x, end)) => {
                    let t = Token {
                        number: x,
                        ..self.token(Tok::Number)
                    };
                    self.pos = end;
                    t
                }
                None => self.error_token("invalid number"),
            }
        }

        fn string_token(&mut self) -> Token {
            let start = self.pos;
            self.pos += 1;
            let mut buf = Vec::new();
            loop {
                let ch = self.at(self.pos);
                if ch == b'"' {
                    break;
                }
                if ch == 0 {
                    return self.error_token("unexpected end of string");
                }
                if ch == b'\\' {
                    let esc = match self.at(self.pos + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            if self.unicode_escape(&mut buf) {
                                continue;
                            }
                            return self.error_token("invalid unicode escape code");
                        }
                        _ => return self.error_token("invalid escape code"),
                    };
                    buf.push(esc);
                    self.pos += 2;
                    continue;
                }
                buf.push(ch);
                self.pos += 1;
            }
            self.pos += 1;
            Token {
                kind: Tok::Str,
                index: start,
                string: buf,
                number: 0.0,
                boolean: false,
                error: "",
            }
        }

        fn hex4(&self, at: usize) -> Option<u32> {
            let mut v = 0;
            for i in 0..4 {
                v = (v << 4) | char::from(self.at(at + i)).to_digit(16)?;
            }
            Some(v)
        }

        /// Decodes `\uXXXX` (or a surrogate pair) at `pos` into UTF-8; false when invalid.
        fn unicode_escape(&mut self, buf: &mut Vec<u8>) -> bool {
            let Some(mut cp) = self.hex4(self.pos + 2) else {
                return false;
            };
            let mut len = 6;
            if cp & 0xF800 == 0xD800 {
                if cp & 0x400 != 0 {
                    return false;
                }
                if self.at(self.pos + 6) != b'\\' || self.at(self.pos + 7) != b'u' {
                    return false;
                }
                let Some(low) = self.hex4(self.pos + 8) else {
                    return false;
                };
                if low & 0xFC00 != 0xDC00 {
                    return false;
                }
                cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
                len = 12;
            }
            match char::from_u32(cp) {
                Some(c) => {
                    let mut tmp = [0u8; 4];
                    buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                }
                None => return false,
            }
            self.pos += len;
            true
        }

        fn parse_error<T>(&self, expected: &str, tok: &Token) -> Res<T> {
            let found = if tok.kind == Tok::Error {
                tok.error
            } else {
                tok.kind.name()
            };
            raise(format!(
                "Expected {expected} but found {found} at character {}",
                tok.index + 1
            ))
        }

        fn descend(&mut self, slots: usize) -> Res<()> {
            self.depth += 1;
            if self.depth > self.cfg.decode_max_depth as usize
                || self.depth > MAX_NESTING
                || self.top + slots > LUA_MAX_CSTACK
            {
                return raise(format!(
                    "Found too many nested data structures ({}) at character {}",
                    self.depth, self.pos
                ));
            }
            Ok(())
        }

        /// Parses the value starting with `tok`. Nesting is handled with an explicit stack
        /// rather than recursion, so deep documents cannot exhaust the Rust stack.
        fn process_value(&mut self, first: &Token) -> Res<Value> {
            let mut stack: Vec<Frame> = Vec::new();
            let mut tok = self.next_placeholder(first);
            loop {
                // Parse one value starting at `tok`, opening containers as needed.
                let mut value = match tok.kind {
                    Tok::Str => bytes_value(self.lua, &tok.string)?,
                    Tok::Number => num(tok.number),
                    Tok::Boolean => Value::Boolean(tok.boolean),
                    Tok::Null => null(),
                    Tok::ObjBegin => {
                        self.descend(3)?;
                        let t = self.lua.create_table()?;
                        self.top += 2; // the table and the pending key
                        tok = self.next_token();
                        if tok.kind == Tok::ObjEnd {
                            self.ascend(2);
                            Value::Table(t)
                        } else {
                            let key = self.object_key(&mut tok)?;
                            stack.push(Frame::Object(t, key));
                            tok = self.next_token();
                            continue;
                        }
                    }
                    Tok::ArrBegin => {
                        self.descend(2)?;
                        let t = self.lua.create_table()?;
                        self.top += 1;
                        tok = self.next_token();
                        if tok.kind == Tok::ArrEnd {
                            self.ascend(1);
                            Value::Table(t)
                        } else {
                            stack.push(Frame::Array(t, 1));
                            continue;
                        }
                    }
                    _ => return self.parse_error("value", &tok),
                };
                // Store it in the enclosing containers, closing those that end here.
                loop {
                    match stack.last_mut() {
                        None => return Ok(value),
                        Some(Frame::Array(t, i)) => {
                            t.raw_set(*i, value)?;
                            *i += 1;
                            tok = self.next_token();
                            if tok.kind == Tok::ArrEnd {
                                let Some(Frame::Array(t, _)) = stack.pop() else {
                                    unreachable!()
                                };
                                self.ascend(1);
                                value = Value::Table(t);
                                continue;
                            }
                            if tok.kind != Tok::Comma {
                                return self.parse_error("comma or array end", &tok);
                            }
                            tok = self.next_token();
                            break;
                        }
                        Some(Frame::Object(t, key)) => {
                            t.raw_set(self.lua.create_string(&*key)?, value)?;
                            tok = self.next_token();
                            if tok.kind == Tok::ObjEnd {
                                let Some(Frame::Object(t, _)) = stack.pop() else {
                                    unreachable!()
                                };
                                self.ascend(2);
                                value = Value::Table(t);
                                continue;
                            }
                            if tok.kind != Tok::Comma {
                                return self.parse_error("comma or object end", &tok);
                            }
                            tok = self.next_token();
                            *key = self.object_key(&mut tok)?;
                            tok = self.next_token();
                            break;
                        }
                    }
                }
            }
        }

        /// Checks that `tok` is a key string followed by a colon; returns the key.
        fn object_key(&mut self, tok: &mut Token) -> Res<Vec<u8>> {
            if tok.kind != Tok::Str {
                return self.parse_error("object key string", tok);
            }
            let key = std::mem::take(&mut tok.string);
            let colon = self.next_token();
            if colon.kind != Tok::Colon {
                return self.parse_error("colon", &colon);
            }
            Ok(key)
        }

        fn next_placeholder(&self, first: &Token) -> Token {
            Token {
                kind: first.kind,
                index: first.index,
                string: first.string.clone(),
                number: first.number,
                boolean: first.boolean,
                error: first.error,
            }
        }

        fn ascend(&mut self, slots: usize) {
            self.top -= slots;
            self.depth -= 1;
        }
    }

    /// C `strtod` on `data[start..]` (data ends at the first NUL): the value and the index just
    /// past the longest number prefix, or `None` when nothing converts.
    pub(super) fn strtod(data: &[u8], start: usize) -> Option<(f64, usize)> {
        let at = |i: usize| data.get(i).copied().unwrap_or(0);
        let mut p = start;
        let negative = match at(p) {
            b'-' => {
                p += 1;
                true
            }
            b'+' => {
                p += 1;
                false
            }
            _ => false,
        };
        let signed = |x: f64| if negative { -x } else { x };
        let word = |p: usize, w: &[u8]| {
            data.get(p..p + w.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(w))
        };
        if word(p, b"infinity") {
            return Some((signed(f64::INFINITY), p + 8));
        }
        if word(p, b"inf") {
            return Some((signed(f64::INFINITY), p + 3));
        }
        if word(p, b"nan") {
            let mut end = p + 3;
            if at(end) == b'(' {
                let mut q = end + 1;
                while at(q).is_ascii_alphanumeric() || at(q) == b'_' {
                    q += 1;
                }
                if at(q) == b')' {
                    end = q + 1;
                }
            }
            return Some((signed(f64::NAN), end));
        }
        if at(p) == b'0' && (at(p + 1) | 0x20) == b'x' {
            if let Some((x, end)) = hex_float(data, p + 2) {
                return Some((signed(x), end));
            }
            // "0x" without hex digits: only the "0" converts.
            return Some((signed(0.0), p + 1));
        }
        let digits_from = |mut q: usize| {
            while at(q).is_ascii_digit() {
                q += 1;
            }
            q
        };
        let int_end = digits_from(p);
        let mut end = int_end;
        let mut ndigits = int_end - p;
        if at(end) == b'.' {
            let frac_end = digits_from(end + 1);
            ndigits += frac_end - (end + 1);
            end = frac_end;
        }
        if ndigits == 0 {
            return None;
        }
        if at(end) | 0x20 == b'e' {
            let mut q = end + 1;
            if matches!(at(q), b'+' | b'-') {
                q += 1;
            }
            let exp_end = digits_from(q);
            if exp_end > q {
                end = exp_end;
            }
        }
        let text = std::str::from_utf8(&data[p..end]).ok()?;
        let x: f64 = text.parse().ok()?;
        Some((signed(x), end))
    }

    /// Hex digits (with optional fraction and binary exponent) after "0x".
    fn hex_float(data: &[u8], start: usize) -> Option<(f64, usize)> {
        let at = |i: usize| data.get(i).copied().unwrap_or(0);
        let mut p = start;
        let mut mantissa: u64 = 0;
        let mut exp: i64 = 0;
        let mut sticky = false;
        let mut any = false;
        let mut push = |d: u32, mantissa: &mut u64, exp: &mut i64, fraction: bool| {
            if *mantissa >> 60 == 0 {
                *mantissa = (*mantissa << 4) | u64::from(d);
                if fraction {
                    *exp -= 4;
                }
            } else {
                sticky |= d != 0;
                if !fraction {
                    *exp += 4;
                }
            }
        };
        while let Some(d) = char::from(at(p)).to_digit(16) {
            push(d, &mut mantissa, &mut exp, false);
            any = true;
            p += 1;
        }
        if at(p) == b'.' {
            let mut q = p + 1;
            let mut frac_any = false;
            while let Some(d) = char::from(at(q)).to_digit(16) {
                push(d, &mut mantissa, &mut exp, true);
                frac_any = true;
                q += 1;
            }
            if any || frac_any {
                p = q;
                any = true;
            }
        }
        if !any {
            return None;
        }
        if at(p) | 0x20 == b'p' {
            let mut q = p + 1;
            let neg = match at(q) {
                b'-' => {
                    q += 1;
                    true
                }
                b'+' => {
                    q += 1;
                    false
                }
                _ => false,
            };
            let digits_start = q;
            let mut e: i64 = 0;
            while at(q).is_ascii_digit() {
                e = (e * 10 + i64::from(at(q) - b'0')).min(1 << 20);
                q += 1;
            }
            if q > digits_start {
                exp += if neg { -e } else { e };
                p = q;
            }
        }
        if sticky {
            mantissa |= 1;
        }
        let x = mantissa as f64 * 2f64.powi(exp.clamp(-2000, 2000) as i32);
        Some((x, p))
    }
}

// ---------------------------------------------------------------------------------------------
// cmsgpack (lua-cmsgpack 0.4.0)
// ---------------------------------------------------------------------------------------------

mod cmsgpack {
    use super::*;

    /// Tables nested deeper than this are packed as nil.
    const MAX_PACK_NESTING: usize = 16;

    pub(super) fn create(lua: &Lua, w: &Wrapper) -> mlua::Result<Table> {
        let t = lua.create_table()?;
        t.set(
            "pack",
            w.func(lua, |lua, a| {
                if a.is_empty() {
                    return arg_error(0, "pack", "MessagePack pack needs input.");
                }
                let mut out = Vec::new();
                for v in a {
                    encode(&mut out, v, 0)?;
                }
                Ok(vec![bytes_value(lua, &out)?])
            })?,
        )?;
        t.set(
            "unpack",
            w.func(lua, |lua, a| {
                let s = check_bytes(lua, a, 1, "unpack")?;
                unpack_full(lua, &s, 0, 0)
            })?,
        )?;
        t.set(
            "unpack_one",
            w.func(lua, |lua, a| {
                let offset = opt_integer(lua, a, 2, "unpack_one", 0)? as i32;
                let s = check_bytes(lua, a, 1, "unpack_one")?;
                unpack_full(lua, &s, 1, offset)
            })?,
        )?;
        t.set(
            "unpack_limit",
            w.func(lua, |lua, a| {
                let limit = check_integer(lua, a, 2, "unpack_limit")? as i32;
                let offset = opt_integer(lua, a, 3, "unpack_limit", 0)? as i32;
                let s = check_bytes(lua, a, 1, "unpack_limit")?;
                unpack_full(lua, &s, limit, offset)
            })?,
        )?;
        t.set("_NAME", "cmsgpack")?;
        t.set("_VERSION", "lua-cmsgpack 0.4.0")?;
        t.set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
        t.set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
        Ok(t)
    }

    // ------------------------------------------------------------------ packing

    fn encode(out: &mut Vec<u8>, v: &Value, level: usize) -> Res<()> {
        match v {
            Value::String(s) => encode_bytes(out, &s.as_bytes()),
            Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
            Value::Integer(i) => encode_number(out, *i as f64),
            Value::Number(n) => encode_number(out, *n),
            Value::Table(t) if level < MAX_PACK_NESTING => encode_table(out, t, level)?,
            _ => out.push(0xc0),
        }
        Ok(())
    }

    fn encode_bytes(out: &mut Vec<u8>, s: &[u8]) {
        let len = s.len();
        if len < 32 {
            out.push(0xa0 | len as u8);
        } else if len <= 0xff {
            out.extend_from_slice(&[0xd9, len as u8]);
        } else if len <= 0xffff {
            out.push(0xda);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            out.push(0xdb);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
        out.extend_from_slice(s);
    }

    fn encode_number(out: &mut Vec<u8>, n: f64) {
        // lua-cmsgpack's `(int64_t)n == n` test, as compiled for x86-64.
        if n.is_finite() && c_double_to_i64(n) as f64 == n {
            encode_int(out, c_double_to_i64(n));
        } else {
            let f = n as f32;
            if f64::from(f) == n {
                out.push(0xca);
                out.extend_from_slice(&f.to_bits().to_be_bytes());
            } else {
                out.push(0xcb);
                out.extend_from_slice(&n.to_bits().to_be_bytes());
            }
        }
    }

    fn encode_int(out: &mut Vec<u8>, n: i64) {
        if n >= 0 {
            if n <= 127 {
                out.push(n as u8);
            } else if n <= 0xff {
                out.extend_from_slice(&[0xcc, n as u8]);
            } else if n <= 0xffff {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            } else if n <= 0xffff_ffff {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            } else {
                out.push(0xcf);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        } else if n >= -32 {
            out.push(n as i8 as u8);
        } else if n >= -128 {
            out.extend_from_slice(&[0xd0, n as i8 as u8]);
        } else if n >= -32768 {
            out.push(0xd1);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        } else if n >= -2_147_483_648 {
            out.push(0xd2);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }

    fn encode_header(out: &mut Vec<u8>, len: usize, fix: u8, b16: u8, b32: u8) {
        if len <= 15 {
            out.push(fix | len as u8);
        } else if len <= 0xffff {
            out.push(b16);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            out.push(b32);
            out.extend_from_slice(&(len as u32).to_be_bytes());
        }
    }

    fn encode_table(out: &mut Vec<u8>, t: &Table, level: usize) -> Res<()> {
        // An array when every key is a positive integer and they are 1..n without holes.
        let mut count: u64 = 0;
        let mut max: i64 = 0;
        let mut is_array = true;
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            count += 1;
            let n = match k {
                Value::Integer(i) => i as f64,
                Value::Number(n) => n,
                _ => {
                    is_array = false;
                    break;
                }
            };
            // `n <= 0 || (int)n != n`, as lua-cmsgpack checks keys.
            if n <= 0.0 || !n.is_finite() || f64::from(c_double_to_i32(n)) != n {
                is_array = false;
                break;
            }
            max = max.max(i64::from(c_double_to_i32(n)));
        }
        if is_array && max as u64 == count {
            let len = t.raw_len();
            encode_header(out, len, 0x90, 0xdc, 0xdd);
            for i in 1..=len {
                let v: Value = t.raw_get(i)?;
                encode(out, &v, level + 1)?;
            }
        } else {
            let mut len = 0usize;
            for pair in t.pairs::<Value, Value>() {
                pair?;
                len += 1;
            }
            encode_header(out, len, 0x80, 0xde, 0xdf);
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair?;
                encode(out, &k, level + 1)?;
                encode(out, &v, level + 1)?;
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------------ unpacking

    enum Fail {
        Eof,
        BadFormat,
        Raise(Raise),
    }

    impl From<mlua::Error> for Fail {
        fn from(e: mlua::Error) -> Self {
            Fail::Raise(Raise::Lua(e))
        }
    }

    struct Cursor<'a> {
        lua: &'a Lua,
        data: &'a [u8],
        pos: usize,
    }

    /// One decoded item: a complete value or the header of a container.
    enum Item {
        Scalar(Value),
        Array(usize),
        Map(usize),
    }

    /// A container being filled while unpacking.
    struct Open {
        table: Table,
        left: usize,
        next: i64,
        map: bool,
        /// For maps: the key read, waiting for its value.
        key: Option<Value>,
    }

    fn unpack_full(lua: &Lua, s: &[u8], limit: i32, offset: i32) -> Res<Vec<Value>> {
        let decode_all = limit == 0 && offset == 0;
        let len = s.len();
        if offset < 0 || limit < 0 {
            return raise(format!(
                "Invalid request to unpack with offset of {offset} and limit of {}.",
                len as i32
            ));
        }
        if offset as usize > len {
            return raise(format!(
                "Start offset {offset} greater than input length {}.",
                len as i32
            ));
        }
        let limit = if decode_all { i32::MAX } else { limit };
        let mut c = Cursor {
            lua,
            data: s,
            pos: offset as usize,
        };
        let mut out = Vec::new();
        let mut cnt = 0;
        while c.pos < len && cnt < limit {
            // The C code checks the Lua stack for each returned value (arg + values + 1).
            if out.len() + 2 > LUA_MAX_CSTACK {
                return raise(
                    "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)",
                );
            }
            match c.value() {
                Ok(v) => out.push(v),
                Err(Fail::Eof) => return raise("Missing bytes in input."),
                Err(Fail::BadFormat) => return raise("Bad data format in input."),
                Err(Fail::Raise(r)) => return Err(r),
            }
            cnt += 1;
        }
        if !decode_all {
            let next = if c.pos >= len { -1 } else { c.pos as i64 };
            out.insert(0, Value::Integer(next));
        }
        Ok(out)
    }

    impl<'a> Cursor<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8], Fail> {
            let data: &'a [u8] = self.data;
            if data.len() - self.pos < n {
                return Err(Fail::Eof);
            }
            let s = &data[self.pos..self.pos + n];
            self.pos += n;
            Ok(s)
        }

        fn be(&mut self, n: usize) -> Result<u64, Fail> {
            Ok(self
                .take(n)?
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
        }

        fn string(&mut self, n: usize) -> Result<Value, Fail> {
            let s = self.take(n)?;
            Ok(Value::String(self.lua.create_string(s)?))
        }

        fn item(&mut self) -> Result<Item, Fail> {
            let tag = self.take(1)?[0];
            Ok(Item::Scalar(match tag {
                0x00..=0x7f => num(f64::from(tag)),
                0xe0..=0xff => num(f64::from(tag as i8)),
                0xa0..=0xbf => self.string(usize::from(tag & 0x1f))?,
                0x90..=0x9f => return Ok(Item::Array(usize::from(tag & 0x0f))),
                0x80..=0x8f => return Ok(Item::Map(usize::from(tag & 0x0f))),
                0xc0 => Value::Nil,
                0xc2 => Value::Boolean(false),
                0xc3 => Value::Boolean(true),
                0xcc => num(self.be(1)? as f64),
                0xcd => num(self.be(2)? as f64),
                0xce => num(self.be(4)? as f64),
                // uint64 goes through lua_Integer (int64) in the C code.
                0xcf => num(self.be(8)? as i64 as f64),
                0xd0 => num(f64::from(self.be(1)? as u8 as i8)),
                0xd1 => num(f64::from(self.be(2)? as u16 as i16)),
                0xd2 => num(f64::from(self.be(4)? as u32 as i32)),
                0xd3 => num(self.be(8)? as i64 as f64),
                0xca => num(f64::from(f32::from_bits(self.be(4)? as u32))),
                0xcb => num(f64::from_bits(self.be(8)?)),
                0xd9 => {
                    let n = self.be(1)? as usize;
                    self.string(n)?
                }
                0xda => {
                    let n = self.be(2)? as usize;
                    self.string(n)?
                }
                0xdb => {
                    let n = self.be(4)? as usize;
                    self.string(n)?
                }
                0xdc => return Ok(Item::Array(self.be(2)? as usize)),
                0xdd => return Ok(Item::Array(self.be(4)? as usize)),
                0xde => return Ok(Item::Map(self.be(2)? as usize)),
                0xdf => return Ok(Item::Map(self.be(4)? as usize)),
                _ => return Err(Fail::BadFormat),
            }))
        }

        /// Decodes one value; containers are filled with an explicit stack, not recursion.
        fn value(&mut self) -> Result<Value, Fail> {
            let mut stack: Vec<Open> = Vec::new();
            loop {
                let (len, map) = match self.item()? {
                    Item::Scalar(v) => {
                        if let Some(v) = self.store(&mut stack, v)? {
                            return Ok(v);
                        }
                        continue;
                    }
                    Item::Array(len) => (len, false),
                    Item::Map(len) => (len, true),
                };
                if stack.len() + 1 > MAX_NESTING {
                    let what = if map { "hash" } else { "array" };
                    let msg = format!("stack overflow (in function mp_decode_to_lua_{what})");
                    return Err(Fail::Raise(Raise::Msg(msg.into_bytes())));
                }
                let table = self.lua.create_table()?;
                if len == 0 {
                    if let Some(v) = self.store(&mut stack, Value::Table(table))? {
                        return Ok(v);
                    }
                } else {
                    stack.push(Open {
                        table,
                        left: len,
                        next: 1,
                        map,
                        key: None,
                    });
                }
            }
        }

        /// Puts `v` into the innermost open container, closing the containers it completes.
        /// Returns the top-level value once everything is closed.
        fn store(&self, stack: &mut Vec<Open>, mut v: Value) -> Result<Option<Value>, Fail> {
            loop {
                let Some(open) = stack.last_mut() else {
                    return Ok(Some(v));
                };
                if open.map {
                    let Some(key) = open.key.take() else {
                        open.key = Some(v);
                        return Ok(None);
                    };
                    match &key {
                        Value::Nil => {
                            return Err(Fail::Raise(Raise::Msg(b"table index is nil".to_vec())))
                        }
                        Value::Number(n) if n.is_nan() => {
                            return Err(Fail::Raise(Raise::Msg(b"table index is NaN".to_vec())))
                        }
                        _ => {}
                    }
                    open.table.raw_set(key, v)?;
                } else {
                    open.table.raw_set(open.next, v)?;
                    open.next += 1;
                }
                open.left -= 1;
                if open.left > 0 {
                    return Ok(None);
                }
                let Some(done) = stack.pop() else {
                    return Ok(None);
                };
                v = Value::Table(done.table);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// struct (lua-struct 0.2 as shipped with Redis)
// ---------------------------------------------------------------------------------------------

mod lstruct {
    use super::*;

    /// Largest `i[n]`/`I[n]` size.
    const MAX_INT_SIZE: usize = 32;
    /// Default `!` alignment (the platform's strictest).
    const MAX_ALIGN: usize = 8;

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Endian {
        Little,
        Big,
    }

    struct Header {
        endian: Endian,
        align: usize,
    }

    impl Default for Header {
        fn default() -> Self {
            Header {
                endian: Endian::Little,
                align: 1,
            }
        }
    }

    /// The format string as C sees it: up to the first NUL.
    fn format_bytes(lua: &Lua, a: &[Value], fname: &str) -> Res<Vec<u8>> {
        let mut f = check_bytes(lua, a, 1, fname)?;
        if let Some(nul) = f.iter().position(|&b| b == 0) {
            f.truncate(nul);
        }
        Ok(f)
    }

    fn getnum(fmt: &[u8], i: &mut usize, default: usize) -> Res<usize> {
        if !fmt.get(*i).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: i32 = 0;
        while let Some(&c) = fmt.get(*i).filter(|c| c.is_ascii_digit()) {
            let d = i32::from(c - b'0');
            if a > i32::MAX / 10 || a * 10 > i32::MAX - d {
                return raise("integral size overflow");
            }
            a = a * 10 + d;
            *i += 1;
        }
        Ok(a as usize)
    }

    fn optsize(opt: u8, fmt: &[u8], i: &mut usize) -> Res<usize> {
        Ok(match opt {
            b'b' | b'B' | b'x' => 1,
            b'h' | b'H' => 2,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => getnum(fmt, i, 1)?,
            b'i' | b'I' => {
                let sz = getnum(fmt, i, 4)?;
                if sz > MAX_INT_SIZE {
                    return raise(format!(
                        "integral size {sz} is larger than limit of {MAX_INT_SIZE}"
                    ));
                }
                sz
            }
            _ => 0,
        })
    }

    /// Padding needed to align an item of `size` at `len` (wrapping like the C code).
    fn gettoalign(len: usize, h: &Header, opt: u8, size: usize) -> usize {
        if size == 0 || opt == b'c' {
            return 0;
        }
        let size = size.min(h.align);
        (size.wrapping_sub(len & size.wrapping_sub(1))) & size.wrapping_sub(1)
    }

    fn controloptions(opt: u8, fmt: &[u8], i: &mut usize, h: &mut Header, fname: &str) -> Res<()> {
        match opt {
            b' ' => {}
            b'>' => h.endian = Endian::Big,
            b'<' => h.endian = Endian::Little,
            b'!' => {
                let a = getnum(fmt, i, MAX_ALIGN)?;
                if a == 0 || a & (a - 1) != 0 {
                    return raise(format!("alignment {a} is not a power of 2"));
                }
                h.align = a;
            }
            _ => {
                let mut msg =
                    format!("bad argument #1 to '{fname}' (invalid format option '").into_bytes();
                msg.push(opt);
                msg.extend_from_slice(b"')");
                return Err(Raise::Msg(msg));
            }
        }
        Ok(())
    }

    pub(super) fn create(lua: &Lua, w: &Wrapper) -> mlua::Result<Table> {
        let t = lua.create_table()?;
        t.set("pack", w.func(lua, pack)?)?;
        t.set("unpack", w.func(lua, unpack)?)?;
        t.set("size", w.func(lua, size)?)?;
        Ok(t)
    }

    /// Argument `n` of `pack`, where the C code pushed a nil marker right after the arguments.
    fn pack_number(lua: &Lua, a: &[Value], n: usize) -> Res<f64> {
        if n == a.len() + 1 {
            return arg_error(n, "pack", "number expected, got nil");
        }
        check_number(lua, a, n, "pack")
    }

    fn pack(lua: &Lua, a: &[Value]) -> Res<Vec<Value>> {
        let fmt = format_bytes(lua, a, "pack")?;
        let mut h = Header::default();
        let mut arg = 2;
        let mut total: usize = 0;
        let mut out = Vec::new();
        let mut i = 0;
        while i < fmt.len() {
            let opt = fmt[i];
            i += 1;
            let mut size = optsize(opt, &fmt, &mut i)?;
            let toalign = gettoalign(total, &h, opt, size);
            total = total.wrapping_add(toalign);
            out.resize(out.len() + toalign, 0);
            match opt {
                b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                    let n = pack_number(lua, a, arg)?;
                    arg += 1;
                    let mut value = if n < 0.0 {
                        c_double_to_i64(n) as u64
                    } else {
                        c_double_to_u64(n)
                    };
                    let mut buf = vec![0u8; size];
                    let mut fill = |slot: &mut u8| {
                        *slot = value as u8;
                        value = value.checked_shr(8).unwrap_or(0);
                    };
                    match h.endian {
                        Endian::Little => buf.iter_mut().for_each(&mut fill),
                        Endian::Big => buf.iter_mut().rev().for_each(&mut fill),
                    }
                    out.extend_from_slice(&buf);
                }
                b'x' => out.push(0),
                b'f' => {
                    let f = pack_number(lua, a, arg)? as f32;
                    arg += 1;
                    match h.endian {
                        Endian::Little => out.extend_from_slice(&f.to_le_bytes()),
                        Endian::Big => out.extend_from_slice(&f.to_be_bytes()),
                    }
                }
                b'd' => {
                    let d = pack_number(lua, a, arg)?;
                    arg += 1;
                    match h.endian {
                        Endian::Little => out.extend_from_slice(&d.to_le_bytes()),
                        Endian::Big => out.extend_from_slice(&d.to_be_bytes()),
                    }
                }
                b'c' | b's' => {
                    let s = if arg == a.len() + 1 {
                        return arg_error(arg, "pack", "string expected, got nil");
                    } else {
                        check_bytes(lua, a, arg, "pack")?
                    };
                    arg += 1;
                    if size == 0 {
                        size = s.len();
                    }
                    if s.len() < size {
                        return arg_error(arg, "pack", "string too short");
                    }
                    out.extend_from_slice(&s[..size]);
                    if opt == b's' {
                        out.push(0);
                        size += 1;
                    }
                }
                _ => controloptions(opt, &fmt, &mut i, &mut h, "pack")?,
            }
            total = total.wrapping_add(size);
        }
        Ok(vec![bytes_value(lua, &out)?])
    }

    fn get_integer(bytes: &[u8], endian: Endian, signed: bool) -> f64 {
        let size = bytes.len();
        let mut l: u64 = 0;
        let mut push = |b: &u8| l = (l << 8) | u64::from(*b);
        match endian {
            Endian::Big => bytes.iter().for_each(&mut push),
            Endian::Little => bytes.iter().rev().for_each(&mut push),
        }
        if !signed {
            return l as f64;
        }
        // x86 masks the shift count to 6 bits, as `wrapping_shl` does.
        let mask = u64::MAX.wrapping_shl((size * 8).wrapping_sub(1) as u32);
        if l & mask != 0 {
            l |= mask;
        }
        l as i64 as f64
    }

    fn unpack(lua: &Lua, a: &[Value]) -> Res<Vec<Value>> {
        let fmt = format_bytes(lua, a, "unpack")?;
        let data = check_bytes(lua, a, 2, "unpack")?;
        let pos = opt_integer(lua, a, 3, "unpack", 1)?;
        if pos <= 0 {
            return arg_error(3, "unpack", "offset must be 1 or greater");
        }
        let mut pos = (pos - 1) as usize;
        let ld = data.len();
        let too_short = || arg_error(2, "unpack", "data string too short");
        let mut h = Header::default();
        let mut out: Vec<Value> = Vec::new();
        let mut i = 0;
        while i < fmt.len() {
            let opt = fmt[i];
            i += 1;
            let mut size = optsize(opt, &fmt, &mut i)?;
            pos = pos.wrapping_add(gettoalign(pos, &h, opt, size));
            if !(size <= ld && pos <= ld - size) {
                return too_short();
            }
            if a.len().max(3) + out.len() + 2 > LUA_MAX_CSTACK {
                return raise("stack overflow (too many results)");
            }
            match opt {
                b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                    let signed = opt.is_ascii_lowercase();
                    out.push(num(get_integer(&data[pos..pos + size], h.endian, signed)));
                }
                b'x' => {}
                b'f' => {
                    let b: [u8; 4] = data[pos..pos + 4].try_into().unwrap_or_default();
                    let f = match h.endian {
                        Endian::Little => f32::from_le_bytes(b),
                        Endian::Big => f32::from_be_bytes(b),
                    };
                    out.push(num(f64::from(f)));
                }
                b'd' => {
                    let b: [u8; 8] = data[pos..pos + 8].try_into().unwrap_or_default();
                    let d = match h.endian {
                        Endian::Little => f64::from_le_bytes(b),
                        Endian::Big => f64::from_be_bytes(b),
                    };
                    out.push(num(d));
                }
                b'c' => {
                    if size == 0 {
                        let prev = match out.last() {
                            Some(v) => to_number(lua, Some(v))?,
                            None => None,
                        };
                        let Some(n) = prev else {
                            return raise("format 'c0' needs a previous size");
                        };
                        size = c_double_to_u64(n) as usize;
                        out.pop();
                        if !(size <= ld && pos <= ld - size) {
                            return too_short();
                        }
                    }
                    out.push(bytes_value(lua, &data[pos..pos + size])?);
                }
                b's' => {
                    let Some(len) = data[pos..].iter().position(|&b| b == 0) else {
                        return raise("unfinished string in data");
                    };
                    size = len + 1;
                    out.push(bytes_value(lua, &data[pos..pos + len])?);
                }
                _ => controloptions(opt, &fmt, &mut i, &mut h, "unpack")?,
            }
            pos = pos.wrapping_add(size);
        }
        out.push(Value::Integer(pos as i64 + 1));
        Ok(out)
    }

    fn size(lua: &Lua, a: &[Value]) -> Res<Vec<Value>> {
        let fmt = format_bytes(lua, a, "size")?;
        let mut h = Header::default();
        let mut pos: usize = 0;
        let mut i = 0;
        while i < fmt.len() {
            let opt = fmt[i];
            i += 1;
            let size = optsize(opt, &fmt, &mut i)?;
            pos = pos.wrapping_add(gettoalign(pos, &h, opt, size));
            if opt == b's' {
                return arg_error(1, "size", "option 's' has no fixed size");
            } else if opt == b'c' && size == 0 {
                return arg_error(1, "size", "option 'c0' has no fixed size");
            }
            if !opt.is_ascii_alphanumeric() {
                controloptions(opt, &fmt, &mut i, &mut h, "size")?;
            }
            pos = pos.wrapping_add(size);
        }
        Ok(vec![Value::Integer(pos as i64)])
    }
}

#[cfg(test)]
mod tests {
    //! Expected values were observed on redis-server 7.0.15 with `EVAL "..." 0`.

    use super::*;

    const PRELUDE: &str = r#"
        local function hex(s)
            return (s:gsub('.', function(c) return string.format('%02x', c:byte()) end))
        end
        local function list(...)
            local t = {}
            for i = 1, select('#', ...) do t[i] = tostring((select(i, ...))) end
            return table.concat(t, '|')
        end
    "#;

    fn new_lua() -> Lua {
        let lua = Lua::new();
        register(&lua).unwrap();
        lua
    }

    /// Runs `code` (which returns one value) and renders the result with `tostring`.
    fn run(lua: &Lua, code: &str) -> String {
        let chunk = format!("{PRELUDE}\nreturn tostring((function() {code} end)())");
        let e = lua
            .load(&chunk)
            .set_name("=t")
            .eval::<String>()
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        // Raised from a Lua function, the message carries its position, as
        // luaL_error's does (`t:<line>: `); the tests compare the rest.
        match e.strip_prefix("t:").and_then(|r| r.split_once(": ")) {
            Some((line, rest)) if line.bytes().all(|b| b.is_ascii_digit()) => rest.to_string(),
            _ => e,
        }
    }

    /// Runs `code`, which must raise, and returns the error value (which must be a string).
    fn err(lua: &Lua, code: &str) -> String {
        let chunk = format!(
            "{PRELUDE}\nlocal ok, e = pcall(function() {code} end)\n\
             assert(not ok, 'no error')\nassert(type(e) == 'string', type(e))\nreturn e"
        );
        let e = lua
            .load(&chunk)
            .set_name("=t")
            .eval::<String>()
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        // Raised from a Lua function, the message carries its position, as
        // luaL_error's does (`t:<line>: `); the tests compare the rest.
        match e.strip_prefix("t:").and_then(|r| r.split_once(": ")) {
            Some((line, rest)) if line.bytes().all(|b| b.is_ascii_digit()) => rest.to_string(),
            _ => e,
        }
    }

    fn check(cases: &[(&str, &str)]) {
        let lua = new_lua();
        for (code, want) in cases {
            assert_eq!(run(&lua, code), *want, "{code}");
        }
    }

    fn check_err(cases: &[(&str, &str)]) {
        let lua = new_lua();
        for (code, want) in cases {
            assert_eq!(err(&lua, code), *want, "{code}");
        }
    }

    #[test]
    fn bit_ops() {
        check(&[
            ("return bit.tobit(0xffffffff)", "-1"),
            ("return bit.tobit(2^32+5)", "5"),
            ("return bit.tobit(1.5)", "2"),
            ("return bit.tobit(2.5)", "2"),
            ("return bit.tobit(-1.5)", "-2"),
            ("return bit.tobit('12')", "12"),
            ("return bit.tobit(2^53)", "0"),
            ("return bit.tobit(2^52+3)", "2"),
            ("return bit.tobit(1e300)", "-2013235812"),
            ("return bit.tobit(0/0)", "0"),
            ("return bit.tobit(1/0)", "0"),
            ("return bit.tohex(65535, -2147483648)", "0000FFFF"),
            ("return bit.tohex(-1)", "ffffffff"),
            ("return bit.tohex(255, 2)", "ff"),
            ("return bit.tohex(255, -3)", "0FF"),
            ("return bit.tohex(255, 0)", ""),
            ("return bit.tohex(255, 20)", "000000ff"),
            ("return bit.tohex(1, 2.7)", "001"),
            ("return bit.bor(1)", "1"),
            ("return bit.bxor(1, 3, 7)", "5"),
            ("return bit.band(0xff, 0x1f0)", "240"),
            ("return bit.lshift(1, 33)", "2"),
            ("return bit.rshift(-1, 28)", "15"),
            ("return bit.arshift(-256, 4)", "-16"),
            ("return bit.rol(0x12345678, 12)", "1164411171"),
            ("return bit.ror(0x12345678, 12)", "1736516421"),
            ("return bit.bswap(0x12345678)", "2018915346"),
            ("return bit.bnot(0)", "-1"),
        ]);
        check_err(&[
            (
                "bit.tobit('x')",
                "bad argument #1 to 'tobit' (number expected, got string)",
            ),
            (
                "bit.tobit()",
                "bad argument #1 to 'tobit' (number expected, got no value)",
            ),
            (
                "bit.tobit(true)",
                "bad argument #1 to 'tobit' (number expected, got boolean)",
            ),
            (
                "bit.band()",
                "bad argument #1 to 'band' (number expected, got no value)",
            ),
            (
                "bit.band(0xff, 0x1f0, 'a')",
                "bad argument #3 to 'band' (number expected, got string)",
            ),
            (
                "bit.band(1, {})",
                "bad argument #2 to 'band' (number expected, got table)",
            ),
            (
                "bit.lshift(1, 'a')",
                "bad argument #2 to 'lshift' (number expected, got string)",
            ),
            (
                "bit.lshift(1)",
                "bad argument #2 to 'lshift' (number expected, got no value)",
            ),
            (
                "bit.tohex(1, nil)",
                "bad argument #2 to 'tohex' (number expected, got nil)",
            ),
        ]);
    }

    #[test]
    fn cjson_encode() {
        check(&[
            (
                "return cjson.encode({1,2,'a/b',{x=1}})",
                r#"[1,2,"a\/b",{"x":1}]"#,
            ),
            ("return cjson.encode({})", "{}"),
            ("return cjson.encode({a=1})", r#"{"a":1}"#),
            ("return cjson.encode({[1]=1,[3]=3})", "[1,null,3]"),
            (
                "return cjson.encode({[10]=3})",
                "[null,null,null,null,null,null,null,null,null,3]",
            ),
            ("return cjson.encode({1,2,a=3})", r#"{"1":1,"2":2,"a":3}"#),
            ("return cjson.encode({[1.5]=1})", r#"{"1.5":1}"#),
            ("return cjson.encode({[0]=1})", r#"{"0":1}"#),
            ("return cjson.encode({[-1]=1})", r#"{"-1":1}"#),
            ("return cjson.encode({[2^31]=1})", r#"{"2147483648":1}"#),
            ("return cjson.encode({[1e20]=1})", r#"{"1e+20":1}"#),
            ("return cjson.encode({[-0.0]=1})", r#"{"-0":1}"#),
            ("return cjson.encode({1,2,nil,4})", "[1,2,null,4]"),
            (
                "return cjson.encode({[1]=1,[2]=2,[3]=3,[4]=4,[5]=5,[6]=6,[14]=1})",
                "[1,2,3,4,5,6,null,null,null,null,null,null,null,1]",
            ),
            ("return cjson.encode({x={y={}}})", r#"{"x":{"y":{}}}"#),
            ("return cjson.encode(nil)", "null"),
            ("return cjson.encode(cjson.null)", "null"),
            ("return cjson.encode(true)", "true"),
            ("return cjson.encode(0.1)", "0.1"),
            ("return cjson.encode(1/3)", "0.33333333333333"),
            ("return cjson.encode(-0.0)", "-0"),
            ("return cjson.encode(1e20)", "1e+20"),
            ("return cjson.encode(2^53)", "9.007199254741e+15"),
            (
                "return cjson.encode(123456789012345678)",
                "1.2345678901235e+17",
            ),
            ("return cjson.encode(12345678901234)", "12345678901234"),
            (
                "return cjson.encode(123456789012345)",
                "1.2345678901234e+14",
            ),
            ("return cjson.encode(1e-7)", "1e-07"),
            ("return cjson.encode(-1e-5)", "-1e-05"),
            ("return cjson.encode(1e-4)", "0.0001"),
            ("return cjson.encode(99999999999999.5)", "1e+14"),
            ("return cjson.encode(5e-324)", "4.9406564584125e-324"),
            ("return cjson.encode(100)", "100"),
            (
                "return cjson.encode('a\"b\\\\c/d\\n\\r\\t\\b\\f\\0\\1\\31\\127 \\195\\169')",
                "\"a\\\"b\\\\c\\/d\\n\\r\\t\\b\\f\\u0000\\u0001\\u001f\\u007f \u{e9}\"",
            ),
        ]);
        // Bytes >= 0x80 pass through untouched.
        check(&[("return hex(cjson.encode('\\128\\255'))", "2280ff22")]);
        // Every byte that lua-cjson escapes.
        check(&[(
            "local t={} for i=0,255 do local e=cjson.encode(string.char(i)) \
             if #e ~= 3 then t[#t+1]=i..'='..e end end return table.concat(t,' ')",
            r#"0="\u0000" 1="\u0001" 2="\u0002" 3="\u0003" 4="\u0004" 5="\u0005" 6="\u0006" 7="\u0007" 8="\b" 9="\t" 10="\n" 11="\u000b" 12="\f" 13="\r" 14="\u000e" 15="\u000f" 16="\u0010" 17="\u0011" 18="\u0012" 19="\u0013" 20="\u0014" 21="\u0015" 22="\u0016" 23="\u0017" 24="\u0018" 25="\u0019" 26="\u001a" 27="\u001b" 28="\u001c" 29="\u001d" 30="\u001e" 31="\u001f" 34="\"" 47="\/" 92="\\" 127="\u007f""#,
        )]);
        check_err(&[
            (
                "cjson.encode({[1]=1,[20]=3})",
                "Cannot serialise table: excessively sparse array",
            ),
            (
                "cjson.encode({[11]=3})",
                "Cannot serialise table: excessively sparse array",
            ),
            (
                "cjson.encode({[true]=1})",
                "Cannot serialise boolean: table key must be a number or string",
            ),
            (
                "cjson.encode({[{}]=1})",
                "Cannot serialise table: table key must be a number or string",
            ),
            (
                "cjson.encode(function() end)",
                "Cannot serialise function: type not supported",
            ),
            (
                "cjson.encode(coroutine.create(function() end))",
                "Cannot serialise thread: type not supported",
            ),
            (
                "cjson.encode()",
                "bad argument #1 to 'encode' (expected 1 argument)",
            ),
            (
                "cjson.encode(1, 2)",
                "bad argument #1 to 'encode' (expected 1 argument)",
            ),
            (
                "cjson.encode(0/0)",
                "Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "cjson.encode(1/0)",
                "Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "local a = {} a[1] = a cjson.encode(a)",
                "Cannot serialise, excessive nesting (1001)",
            ),
            (
                "local a = {} a.x = a cjson.encode(a)",
                "Cannot serialise, excessive nesting (1001)",
            ),
        ]);
    }

    #[test]
    fn cjson_config() {
        // Each case gets a fresh interpreter: settings persist like in Redis.
        let cases: &[(&str, &str)] = &[
            ("return list(cjson.encode_sparse_array())", "false|2|10"),
            ("return list(cjson.encode_sparse_array(true))", "true|2|10"),
            (
                "cjson.encode_sparse_array(true) return cjson.encode({[1]=1,[20]=3})",
                r#"{"1":1,"20":3}"#,
            ),
            (
                "return list(cjson.encode_sparse_array('on', 3, 5))",
                "true|3|5",
            ),
            (
                "return list(cjson.encode_sparse_array(true, 1.5))",
                "true|1|10",
            ),
            (
                "return list(cjson.encode_sparse_array(true, 0, 0))",
                "true|0|0",
            ),
            (
                "return list(cjson.encode_sparse_array(nil, 3))",
                "false|3|10",
            ),
            (
                "cjson.encode_sparse_array(false, 0) return #cjson.encode({[1000]=1})",
                "4998",
            ),
            ("return list(cjson.encode_max_depth())", "1000"),
            ("return list(cjson.encode_max_depth(5))", "5"),
            ("return list(cjson.encode_max_depth(nil))", "1000"),
            ("return list(cjson.decode_max_depth())", "1000"),
            ("return list(cjson.encode_number_precision())", "14"),
            ("return list(cjson.encode_number_precision(2.9))", "2"),
            ("return list(cjson.encode_number_precision('5'))", "5"),
            (
                "cjson.encode_number_precision(3) return cjson.encode(1/3)",
                "0.333",
            ),
            (
                "cjson.encode_number_precision(2) return cjson.encode({0.125, 0.375, 2.5, 0.5})",
                "[0.12,0.38,2.5,0.5]",
            ),
            (
                "cjson.encode_number_precision(1) \
                 return cjson.encode({0.5, 1.5, 2.5, 25, 35, 0.00001, 123456})",
                "[0.5,2,2,2e+01,4e+01,1e-05,1e+05]",
            ),
            ("return list(cjson.encode_keep_buffer())", "true"),
            ("return list(cjson.encode_keep_buffer('off'))", "false"),
            ("return list(cjson.encode_keep_buffer(true))", "true"),
            ("return list(cjson.encode_invalid_numbers())", "false"),
            ("return list(cjson.encode_invalid_numbers('null'))", "null"),
            ("return list(cjson.encode_invalid_numbers('on'))", "true"),
            (
                "cjson.encode_invalid_numbers('null') return cjson.encode({0/0, 1/0, -1/0})",
                "[null,null,null]",
            ),
            (
                "cjson.encode_invalid_numbers(true) return cjson.encode({0/0, -(0/0), 1/0, -1/0})",
                "[nan,nan,inf,-inf]",
            ),
            ("return list(cjson.decode_invalid_numbers())", "true"),
            ("return list(cjson.decode_invalid_numbers(false))", "false"),
            (
                "cjson.encode_max_depth(2) return cjson.encode({{1}})",
                "[[1]]",
            ),
            (
                "local c = cjson.new() c.encode_number_precision(2) \
                 return list(c.encode(1/3), cjson.encode(1/3))",
                "0.33|0.33333333333333",
            ),
            ("return cjson.new().null == cjson.null", "true"),
            (
                "return cjson.new() ~= cjson and type(cjson.new().new)",
                "function",
            ),
            ("return cjson._NAME .. ' ' .. cjson._VERSION", "cjson 2.1.0"),
            ("return tostring(cjson.null)", "userdata: (nil)"),
        ];
        for (code, want) in cases {
            check(&[(code, want)]);
        }
        let errors: &[(&str, &str)] = &[
            (
                "cjson.encode_sparse_array('x')",
                "bad argument #1 to 'encode_sparse_array' (invalid option 'x')",
            ),
            (
                "cjson.encode_sparse_array(1)",
                "bad argument #1 to 'encode_sparse_array' (invalid option '1')",
            ),
            (
                "cjson.encode_sparse_array(true, -1)",
                "bad argument #1 to 'encode_sparse_array' (expected integer between 0 and 2147483647)",
            ),
            (
                "cjson.encode_sparse_array(true, 2, -1)",
                "bad argument #1 to 'encode_sparse_array' (expected integer between 0 and 2147483647)",
            ),
            (
                "cjson.encode_max_depth(0)",
                "bad argument #1 to 'encode_max_depth' (expected integer between 1 and 2147483647)",
            ),
            (
                "cjson.encode_number_precision(15)",
                "bad argument #1 to 'encode_number_precision' (expected integer between 1 and 14)",
            ),
            (
                "cjson.encode_number_precision('x')",
                "bad argument #1 to 'encode_number_precision' (number expected, got string)",
            ),
            (
                "cjson.encode_keep_buffer(1)",
                "bad argument #1 to 'encode_keep_buffer' (invalid option '1')",
            ),
            (
                "cjson.encode_invalid_numbers({})",
                "bad argument #1 to 'encode_invalid_numbers' (string expected, got table)",
            ),
            (
                "cjson.encode_invalid_numbers('null', 2)",
                "bad argument #2 to 'encode_invalid_numbers' (found too many arguments)",
            ),
            (
                "cjson.decode_invalid_numbers('null')",
                "bad argument #1 to 'decode_invalid_numbers' (invalid option 'null')",
            ),
            (
                "cjson.encode_max_depth(2) cjson.encode({{{1}}})",
                "Cannot serialise, excessive nesting (3)",
            ),
            (
                "cjson.decode_max_depth(2) cjson.decode('[[[1]]]')",
                "Found too many nested data structures (3) at character 3",
            ),
            (
                "cjson.decode_max_depth(2) cjson.decode('[{\"a\":[1]}]')",
                "Found too many nested data structures (3) at character 7",
            ),
            (
                "cjson.decode_invalid_numbers(false) cjson.decode('0x10')",
                "Expected value but found invalid number at character 1",
            ),
            (
                "cjson.decode_invalid_numbers(false) cjson.decode('[+1]')",
                "Expected value but found invalid token at character 2",
            ),
            (
                "cjson.decode_invalid_numbers(false) cjson.decode('nan')",
                "Expected value but found invalid token at character 1",
            ),
            (
                "cjson.decode_invalid_numbers(false) cjson.decode('-01')",
                "Expected value but found invalid number at character 1",
            ),
        ];
        for (code, want) in errors {
            check_err(&[(code, want)]);
        }
    }

    #[test]
    fn cjson_decode() {
        check(&[
            ("return cjson.decode('01')", "1"),
            ("return cjson.decode('1.')", "1"),
            ("return cjson.decode('0x10')", "16"),
            ("return cjson.decode('0x1p4')", "16"),
            ("return cjson.decode('-0x10')", "-16"),
            ("return cjson.decode('1e5')", "100000"),
            ("return cjson.decode('-0')", "-0"),
            ("return cjson.decode('nan')", "nan"),
            ("return cjson.decode('-inf')", "-inf"),
            ("return cjson.decode('Infinity')", "inf"),
            ("return cjson.decode('1e400')", "inf"),
            ("return cjson.decode('+1')", "1"),
            ("return cjson.decode('1 ')", "1"),
            ("return cjson.decode(12)", "12"),
            ("return cjson.decode('\"\\\\ud83d\\\\ude00\"')", "\u{1F600}"),
            (
                "return hex(cjson.decode('\"\\\\u00e9\\\\u0041\\\\u0000x\"'))",
                "c3a9410078",
            ),
            (
                "return cjson.decode('\"\\\\/\\\\b\\\\f\\\\n\\\\r\\\\t\\\\\\\\\\\\\"\"')",
                "/\u{8}\u{c}\n\r\t\\\"",
            ),
            ("return hex(cjson.decode('\"a\\1\\10b\"'))", "61010a62"),
            (
                "return list(cjson.decode('\"\\\\u0080\\\\u07ff\\\\u0800\\\\uffff\"'):byte(1, -1))",
                "194|128|223|191|224|160|128|239|191|191",
            ),
            (
                "return cjson.decode('{\"a\":null}').a == cjson.null",
                "true",
            ),
            (
                "local t = cjson.decode('[null,true,false,1.5,\"s\"]') \
                 return list(t[1] == cjson.null, t[2], t[3], t[4], t[5], #t)",
                "true|true|false|1.5|s|5",
            ),
            ("return cjson.decode('  { \"a\" : [ 1 , 2 ] }  ').a[2]", "2"),
            ("return type(cjson.decode('{\"a\":1}\\0'))", "table"),
            (
                "return next(cjson.decode('{}')) == nil and next(cjson.decode('[]')) == nil",
                "true",
            ),
            (
                "return #cjson.decode(string.rep('[', 1000) .. string.rep(']', 1000))",
                "1",
            ),
        ]);
        check_err(&[
            (
                "cjson.decode('x')",
                "Expected value but found invalid token at character 1",
            ),
            (
                "cjson.decode('')",
                "Expected value but found T_END at character 1",
            ),
            (
                "cjson.decode(' ')",
                "Expected value but found T_END at character 2",
            ),
            (
                "cjson.decode('[1,2')",
                "Expected comma or array end but found T_END at character 5",
            ),
            (
                "cjson.decode('[1,2,]')",
                "Expected value but found T_ARR_END at character 6",
            ),
            (
                "cjson.decode('{\"a\":1,}')",
                "Expected object key string but found T_OBJ_END at character 8",
            ),
            (
                "cjson.decode('{\"a\" 1}')",
                "Expected colon but found T_NUMBER at character 6",
            ),
            (
                "cjson.decode('{1:1}')",
                "Expected object key string but found T_NUMBER at character 2",
            ),
            (
                "cjson.decode('[1] x')",
                "Expected the end but found invalid token at character 5",
            ),
            (
                "cjson.decode('[1] [')",
                "Expected the end but found T_ARR_BEGIN at character 5",
            ),
            (
                "cjson.decode('[1 2]')",
                "Expected comma or array end but found T_NUMBER at character 4",
            ),
            (
                "cjson.decode('\"abc')",
                "Expected value but found unexpected end of string at character 5",
            ),
            (
                "cjson.decode('\"a\\\\qb\"')",
                "Expected value but found invalid escape code at character 3",
            ),
            (
                "cjson.decode('\"a\\\\')",
                "Expected value but found invalid escape code at character 3",
            ),
            (
                "cjson.decode('\"a\\\\u12\"')",
                "Expected value but found invalid unicode escape code at character 3",
            ),
            (
                "cjson.decode('\"\\\\uDFFF\"')",
                "Expected value but found invalid unicode escape code at character 2",
            ),
            (
                "cjson.decode('\"\\\\ud800\\\\u0041\"')",
                "Expected value but found invalid unicode escape code at character 2",
            ),
            (
                "cjson.decode('[tru]')",
                "Expected value but found invalid token at character 2",
            ),
            (
                "cjson.decode('nul')",
                "Expected value but found invalid token at character 1",
            ),
            (
                "cjson.decode('-')",
                "Expected value but found invalid number at character 1",
            ),
            (
                "cjson.decode('-x')",
                "Expected value but found invalid number at character 1",
            ),
            (
                "cjson.decode('.5')",
                "Expected value but found invalid token at character 1",
            ),
            (
                "cjson.decode('[1e]')",
                "Expected comma or array end but found invalid token at character 3",
            ),
            (
                "cjson.decode('NaN(123)x')",
                "Expected the end but found invalid token at character 9",
            ),
            (
                "cjson.decode('Nanx')",
                "Expected the end but found invalid token at character 4",
            ),
            (
                "cjson.decode('1\\0x')",
                "JSON parser does not support UTF-16 or UTF-32",
            ),
            (
                "cjson.decode('\\0')",
                "Expected value but found T_END at character 1",
            ),
            (
                "cjson.decode()",
                "bad argument #1 to 'decode' (expected 1 argument)",
            ),
            (
                "cjson.decode('[1]', 2)",
                "bad argument #1 to 'decode' (expected 1 argument)",
            ),
            (
                "cjson.decode({})",
                "bad argument #1 to 'decode' (string expected, got table)",
            ),
            (
                "cjson.decode(nil)",
                "bad argument #1 to 'decode' (string expected, got nil)",
            ),
            (
                "cjson.decode(string.rep('[', 1001))",
                "Found too many nested data structures (1001) at character 1001",
            ),
        ]);
    }

    #[test]
    fn cjson_round_trip() {
        check(&[
            (
                "local s = cjson.encode(cjson.decode('{\"a\":[1,2,{\"b\":null}],\"c\":\"x\\\\/y\"}')) \
                 local t = cjson.decode(s) return list(t.a[1], t.a[3].b == cjson.null, t.c)",
                "1|true|x/y",
            ),
            ("local s = string.char(0, 1, 200, 255) return cjson.decode(cjson.encode(s)) == s", "true"),
            ("return cjson.decode(cjson.encode(0.1)) == 0.1", "true"),
        ]);
    }

    #[test]
    fn cmsgpack_pack() {
        check(&[
            (
                "return hex(cmsgpack.pack(nil, true, false, 0, 1, 127, 128, 255, 256, 65535, 65536, \
                 2^32-1, 2^32, -1, -32, -33, -128, -129, -32768, -32769, -2^31, -2^31-1))",
                "c0c3c200017fcc80ccffcd0100cdffffce00010000ceffffffffcf0000000100000000ffe0d0dfd080d1ff7fd18000d2ffff7fffd280000000d3ffffffff7fffffff",
            ),
            ("return hex(cmsgpack.pack(1.5, 0.1))", "ca3fc00000cb3fb999999999999a"),
            ("return hex(cmsgpack.pack(1/0))", "ca7f800000"),
            ("return hex(cmsgpack.pack(-1/0))", "caff800000"),
            ("return hex(cmsgpack.pack(-0.0))", "00"),
            ("return hex(cmsgpack.pack(0/0))", "cbfff8000000000000"),
            (
                "local t={} for _,v in ipairs({2^63, 2^63+2048, 1.5*2^63, 2^64-2048, 2^64, 2^65, \
                 1e19, 1e20, 1e30, -2^63-4096, -2^64, -1e20, 2^62, 2^53+2, 3e9, -3e9, 1e15+0.5, -2^63}) \
                 do t[#t+1]=hex(cmsgpack.pack(v)) end return table.concat(t, '|')",
                "ca5f000000|cb43e0000000000001|ca5f400000|cb43efffffffffffff|ca5f800000|ca60000000|\
                 cb43e158e460913d00|cb4415af1d78b58c40|cb46293e5939a08cea|cbc3e0000000000002|cadf800000|\
                 cbc415af1d78b58c40|cf4000000000000000|cf0020000000000002|ceb2d05e00|d3ffffffff4d2fa200|\
                 cb430c6bf526340004|d38000000000000000",
            ),
            (
                "return hex(cmsgpack.pack('', 'abc', string.rep('x',31), string.rep('x',32)):sub(1,20))",
                "a0a3616263bf7878787878787878787878787878",
            ),
            (
                "return hex(cmsgpack.pack(string.rep('x',255)):sub(1,8)) .. ' ' .. \
                 hex(cmsgpack.pack(string.rep('x',256)):sub(1,8)) .. ' ' .. \
                 hex(cmsgpack.pack(string.rep('x',65536)):sub(1,12))",
                "d9ff787878787878 da01007878787878 db0001000078787878787878",
            ),
            (
                "return hex(cmsgpack.pack({}, {1,2}, {a=1}, {1,nil,3}, {[2]=1}, {1,2,x=1}))",
                "9092010281a1610182010103038102018301010202a17801",
            ),
            (
                "local t={} for i=1,16 do t[i]=i end local m={} for i=1,16 do m['k'..i]=i end \
                 return hex(cmsgpack.pack(t)):sub(1,8) .. ' ' .. hex(cmsgpack.pack(m)):sub(1,8)",
                "dc001001 de0010a3",
            ),
            ("local a={} a[1]=a return hex(cmsgpack.pack(a))", "91919191919191919191919191919191c0"),
            ("return hex(cmsgpack.pack({[1.5]=1}))", "81ca3fc0000001"),
            ("return hex(cmsgpack.pack({[0]=1}))", "810001"),
            ("return hex(cmsgpack.pack({[true]=1}))", "81c301"),
            ("return hex(cmsgpack.pack(print, cjson.null))", "c0c0"),
            ("return #cmsgpack.pack(string.rep('x', 70000))", "70005"),
            (
                "return list(cmsgpack._COPYRIGHT, cmsgpack._DESCRIPTION, cmsgpack._NAME, cmsgpack._VERSION)",
                "Copyright (C) 2012, Salvatore Sanfilippo|MessagePack C implementation for Lua|cmsgpack|lua-cmsgpack 0.4.0",
            ),
        ]);
        check_err(&[(
            "cmsgpack.pack()",
            "bad argument #0 to 'pack' (MessagePack pack needs input.)",
        )]);
    }

    #[test]
    fn cmsgpack_unpack() {
        check(&[
            (
                "local a, b, c, d = cmsgpack.unpack(cmsgpack.pack(1, 'a', {1, 2}, {a = 'b'})) \
                 return list(a, b, c[2], d.a)",
                "1|a|2|b",
            ),
            ("return cmsgpack.unpack(cmsgpack.pack({a={b={1,2,3}}})).a.b[3]", "3"),
            ("return select('#', cmsgpack.unpack(''))", "0"),
            ("return list(cmsgpack.unpack_one(cmsgpack.pack(1,2,3)))", "1|1"),
            ("return list(cmsgpack.unpack_one(cmsgpack.pack(1,2,3), 1))", "2|2"),
            ("return list(cmsgpack.unpack_one(cmsgpack.pack(1,2,3), 2))", "-1|3"),
            ("return list(cmsgpack.unpack_one(cmsgpack.pack(1,2,3), 3))", "-1"),
            ("return list(cmsgpack.unpack_one(cmsgpack.pack(1), 0.5))", "-1|1"),
            ("return list(cmsgpack.unpack_one(''))", "-1"),
            ("return list(cmsgpack.unpack_limit(cmsgpack.pack(1,2,3), 2))", "2|1|2"),
            ("return list(cmsgpack.unpack_limit(cmsgpack.pack(1,2,3), 2, 1))", "-1|2|3"),
            ("return list(cmsgpack.unpack_limit(cmsgpack.pack(1,2,3), 0))", "1|2|3"),
            ("return list(cmsgpack.unpack_limit(cmsgpack.pack(1,2,3), 5, 0))", "-1|1|2|3"),
            ("return list(cmsgpack.unpack(12))", "49|50"),
            ("return list(cmsgpack.unpack(cmsgpack.pack(1), 5))", "1"),
            ("local t = cmsgpack.unpack(string.char(0x93, 1, 0xc0, 3)) return list(t[1], t[2], t[3])", "1|nil|3"),
            ("return cmsgpack.unpack(string.char(0xcf,0xff,0xff,0xff,0xff,0xff,0xff,0xff,0xff))", "-1"),
            ("return cmsgpack.unpack(string.char(0xd3,0x80,0,0,0,0,0,0,0))", "-9.2233720368548e+18"),
            ("return cmsgpack.unpack(string.char(0xcf,0x80,0,0,0,0,0,0,1))", "-9.2233720368548e+18"),
            ("return cmsgpack.unpack(string.char(0xca,0x3f,0xc0,0,0))", "1.5"),
            ("return next(cmsgpack.unpack(string.char(0x81, 0x91, 1, 2)))[1]", "1"),
            ("return select('#', cmsgpack.unpack(string.rep(string.char(0), 7990)))", "7990"),
            (
                "local a = {} a[1] = a local t = cmsgpack.unpack(cmsgpack.pack(a)) \
                 local n = 0 while type(t) == 'table' do n = n + 1 t = t[1] end return n",
                "16",
            ),
            (
                "local s = cmsgpack.pack(-1.5, 'x\\0y', {k = {true, false}}) \
                 return cmsgpack.pack(cmsgpack.unpack(s)) == s",
                "true",
            ),
        ]);
        check_err(&[
            ("cmsgpack.unpack()", "bad argument #1 to 'unpack' (string expected, got no value)"),
            ("cmsgpack.unpack({})", "bad argument #1 to 'unpack' (string expected, got table)"),
            ("cmsgpack.unpack(string.char(0xc1))", "Bad data format in input."),
            ("cmsgpack.unpack(string.char(0xc4, 1, 65))", "Bad data format in input."),
            ("cmsgpack.unpack(string.char(0xd4, 1, 65))", "Bad data format in input."),
            ("cmsgpack.unpack(string.char(1, 0xc1))", "Bad data format in input."),
            ("cmsgpack.unpack(string.char(0xcd, 1))", "Missing bytes in input."),
            ("cmsgpack.unpack(string.char(0x92, 1))", "Missing bytes in input."),
            ("cmsgpack.unpack(string.char(0xdd, 0xff, 0xff, 0xff, 0xff))", "Missing bytes in input."),
            ("cmsgpack.unpack(string.char(0xda, 0, 2, 65))", "Missing bytes in input."),
            ("cmsgpack.unpack(string.char(0xd9))", "Missing bytes in input."),
            ("cmsgpack.unpack(string.char(0x81, 0xc0, 1))", "table index is nil"),
            ("cmsgpack.unpack(string.char(0x81, 0xcb, 0xff, 0xf8, 0, 0, 0, 0, 0, 0, 1))", "table index is NaN"),
            ("cmsgpack.unpack_one(cmsgpack.pack(1,2,3), 4)", "Start offset 4 greater than input length 3."),
            (
                "cmsgpack.unpack_one(cmsgpack.pack(1,2,3), -1)",
                "Invalid request to unpack with offset of -1 and limit of 3.",
            ),
            (
                "cmsgpack.unpack_limit(cmsgpack.pack(1,2,3), -1)",
                "Invalid request to unpack with offset of 0 and limit of 3.",
            ),
            ("cmsgpack.unpack_one(cmsgpack.pack(1), 'x')", "bad argument #2 to 'unpack_one' (number expected, got string)"),
            ("cmsgpack.unpack_one()", "bad argument #1 to 'unpack_one' (string expected, got no value)"),
            (
                "cmsgpack.unpack_limit(cmsgpack.pack(1,2,3))",
                "bad argument #2 to 'unpack_limit' (number expected, got no value)",
            ),
            (
                "cmsgpack.unpack(string.rep(string.char(0), 10000))",
                "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)",
            ),
            (
                "cmsgpack.unpack(string.rep(string.char(0x91), 7000) .. string.char(0xc0))",
                "stack overflow (in function mp_decode_to_lua_array)",
            ),
        ]);
    }

    #[test]
    fn struct_pack_and_size() {
        check(&[
            (
                "return hex(struct.pack('>i2<i2bBhHlLTfd', 1, 2, -1, 255, -2, 65535, -3, 4, 5, 1.5, 2.5))",
                "00010200fffffefffffffdffffffffffffff040000000000000005000000000000000000c03f0000000000000440",
            ),
            ("return hex(struct.pack('i', -1))", "ffffffff"),
            ("return hex(struct.pack('I3', 0x123456))", "563412"),
            ("return hex(struct.pack('>I3', 0x123456))", "123456"),
            ("return hex(struct.pack('>i16', -2))", "0000000000000000fffffffffffffffe"),
            ("return hex(struct.pack('i17', 1))", "0100000000000000000000000000000000"),
            ("return hex(struct.pack('i0', 1))", ""),
            ("return hex(struct.pack('s', 'ab'))", "616200"),
            ("return hex(struct.pack('c', 'ab'))", "61"),
            ("return hex(struct.pack('c0', 'abc'))", "616263"),
            ("return hex(struct.pack('c2', 'abc'))", "6162"),
            ("return hex(struct.pack('xbx', 1))", "000100"),
            ("return hex(struct.pack('!4bi', 1, 2))", "0100000002000000"),
            ("return hex(struct.pack('!bd', 1, 2))", "01000000000000000000000000000040"),
            ("return hex(struct.pack('!2bd', 1, 2))", "01000000000000000040"),
            ("return hex(struct.pack(' b  b ', 1, 2))", "0102"),
            ("return hex(struct.pack('b', 1.7))", "01"),
            ("return hex(struct.pack('b', 300))", "2c"),
            ("return hex(struct.pack('B', -1))", "ff"),
            ("return hex(struct.pack('s', 'a\\0b'))", "61006200"),
            ("return hex(struct.pack('>I8', -1))", "ffffffffffffffff"),
            ("return hex(struct.pack('>I8', 2^63))", "8000000000000000"),
            ("return hex(struct.pack('>i8', 2^64))", "0000000000000000"),
            ("return hex(struct.pack('>i', 2^31))", "80000000"),
            ("return hex(struct.pack('>i', 3e9))", "b2d05e00"),
            ("return hex(struct.pack('>i', -1.5))", "ffffffff"),
            ("return hex(struct.pack('>i', 1e30))", "00000000"),
            ("return hex(struct.pack('>i12', -1))", "00000000ffffffffffffffff"),
            ("return hex(struct.pack('>I12', 1))", "000000000000000000000001"),
            ("return hex(struct.pack('s', 12))", "313200"),
            ("return hex(struct.pack('>f', 0.1))", "3dcccccd"),
            ("return struct.pack('')", ""),
            ("return struct.size('bhilTfdx')", "36"),
            ("return struct.size('!bhilTfdx')", "41"),
            ("return struct.size('c10')", "10"),
            ("return struct.size('q')", "0"),
            ("return struct.size('')", "0"),
            ("return struct.size('!c3i')", "8"),
            ("return struct.size('bi')", "5"),
            ("return struct.size('!16d')", "8"),
        ]);
        check_err(&[
            (
                "struct.pack('q', 1)",
                "bad argument #1 to 'pack' (invalid format option 'q')",
            ),
            (
                "struct.pack('z', 'ab')",
                "bad argument #1 to 'pack' (invalid format option 'z')",
            ),
            (
                "struct.pack('=b', 1)",
                "bad argument #1 to 'pack' (invalid format option '=')",
            ),
            (
                "struct.pack(1)",
                "bad argument #1 to 'pack' (invalid format option '1')",
            ),
            (
                "struct.pack()",
                "bad argument #1 to 'pack' (string expected, got no value)",
            ),
            (
                "struct.pack('c5', 'abc')",
                "bad argument #3 to 'pack' (string too short)",
            ),
            (
                "struct.pack('!3bi', 1, 2)",
                "alignment 3 is not a power of 2",
            ),
            (
                "struct.pack('b', 'x')",
                "bad argument #2 to 'pack' (number expected, got string)",
            ),
            (
                "struct.pack('b')",
                "bad argument #2 to 'pack' (number expected, got nil)",
            ),
            (
                "struct.pack('bb', 1)",
                "bad argument #3 to 'pack' (number expected, got nil)",
            ),
            (
                "struct.pack('i' .. string.rep('9', 12), 1)",
                "integral size overflow",
            ),
            (
                "struct.size('s')",
                "bad argument #1 to 'size' (option 's' has no fixed size)",
            ),
            (
                "struct.size('c0')",
                "bad argument #1 to 'size' (option 'c0' has no fixed size)",
            ),
            (
                "struct.size('i40')",
                "integral size 40 is larger than limit of 32",
            ),
            ("struct.size('i99999999999')", "integral size overflow"),
            ("struct.size('!3')", "alignment 3 is not a power of 2"),
            ("struct.size('!0b')", "alignment 0 is not a power of 2"),
        ]);
    }

    #[test]
    fn struct_unpack() {
        check(&[
            (
                "return list(struct.unpack('>i2<i2bBhHlLT', \
                 struct.pack('>i2<i2bBhHlLT', 1, 2, -1, 255, -2, 65535, -3, 4, 5)))",
                "1|2|-1|255|-2|65535|-3|4|5|35",
            ),
            (
                "return list(struct.unpack('fd', struct.pack('fd', 1.5, 2.5)))",
                "1.5|2.5|13",
            ),
            ("return list(struct.unpack('b', 'ab', 2))", "98|3"),
            ("return list(struct.unpack('s', 'ab\\0cd\\0'))", "ab|4"),
            ("return list(struct.unpack('ss', 'ab\\0cd\\0'))", "ab|cd|7"),
            ("return list(struct.unpack('bc0', '\\2hello'))", "he|4"),
            ("return list(struct.unpack('bc0', '\\0'))", "|2"),
            ("return list(struct.unpack('c3', 'hello'))", "hel|4"),
            ("return list(struct.unpack('x b', '\\1\\2'))", "2|3"),
            (
                "return list(struct.unpack('!4 b i', struct.pack('!4 b i', 1, 2)))",
                "1|2|9",
            ),
            (
                "return list(struct.unpack('>i16', struct.pack('>i16', -2)))",
                "-2|17",
            ),
            (
                "return list(struct.unpack('>I16', struct.pack('>i16', -2)))",
                "1.844674407371e+19|17",
            ),
            (
                "return list(struct.unpack('>i3', '\\255\\255\\254'))",
                "-2|4",
            ),
            (
                "return list(struct.unpack('>I8', string.rep('\\255', 8)))",
                "1.844674407371e+19|9",
            ),
            (
                "return list(struct.unpack('>i8', '\\127\\255\\255\\255\\255\\255\\255\\255'))",
                "9.2233720368548e+18|9",
            ),
            ("return list(struct.unpack('', 'abc'))", "1"),
            ("return list(struct.unpack('', 'abc', 10))", "10"),
            ("return list(struct.unpack('i0', 'a'))", "0|1"),
            (
                "return list(struct.unpack('>!8bd', struct.pack('>!8bd', 1, 2.25)))",
                "1|2.25|17",
            ),
            ("return list(struct.unpack(' ', ''))", "1"),
            ("return list(struct.unpack('!', 'a'))", "1"),
            ("return list(struct.unpack('!2bh', 'a\\0bc'))", "97|25442|5"),
            ("return list(struct.unpack('b', 12))", "49|2"),
            ("return list(struct.unpack('b', 'a', 1.9))", "97|2"),
        ]);
        check_err(&[
            (
                "struct.unpack('b', 'ab', 3)",
                "bad argument #2 to 'unpack' (data string too short)",
            ),
            (
                "struct.unpack('b', 'ab', 0)",
                "bad argument #3 to 'unpack' (offset must be 1 or greater)",
            ),
            ("struct.unpack('s', 'ab')", "unfinished string in data"),
            (
                "struct.unpack('c0', 'hello')",
                "format 'c0' needs a previous size",
            ),
            (
                "struct.unpack('sc0', 'a\\0')",
                "format 'c0' needs a previous size",
            ),
            (
                "struct.unpack('c0', '')",
                "format 'c0' needs a previous size",
            ),
            (
                "struct.unpack('bc0', '\\5ab')",
                "bad argument #2 to 'unpack' (data string too short)",
            ),
            (
                "struct.unpack('c9', 'hello')",
                "bad argument #2 to 'unpack' (data string too short)",
            ),
            (
                "struct.unpack('x', '')",
                "bad argument #2 to 'unpack' (data string too short)",
            ),
            (
                "struct.unpack('q', 'a')",
                "bad argument #1 to 'unpack' (invalid format option 'q')",
            ),
            (
                "struct.unpack('b')",
                "bad argument #2 to 'unpack' (string expected, got no value)",
            ),
            (
                "struct.unpack('i33', string.rep('a', 40))",
                "integral size 33 is larger than limit of 32",
            ),
            (
                "struct.unpack('b', 'a', '2')",
                "bad argument #2 to 'unpack' (data string too short)",
            ),
            (
                "struct.unpack(string.rep('b', 10000), string.rep('a', 10000))",
                "stack overflow (too many results)",
            ),
        ]);
    }

    #[test]
    fn registered_names() {
        check(&[
            (
                "local t = {} for _, lib in ipairs({'bit', 'cjson', 'cmsgpack', 'struct'}) do \
                 local names = {} for k in pairs(_G[lib]) do names[#names + 1] = k end \
                 table.sort(names) t[#t + 1] = lib .. ':' .. table.concat(names, ',') end \
                 return table.concat(t, ' ')",
                "bit:arshift,band,bnot,bor,bswap,bxor,lshift,rol,ror,rshift,tobit,tohex \
                 cjson:_NAME,_VERSION,decode,decode_invalid_numbers,decode_max_depth,encode,\
                 encode_invalid_numbers,encode_keep_buffer,encode_max_depth,encode_number_precision,\
                 encode_sparse_array,new,null \
                 cmsgpack:_COPYRIGHT,_DESCRIPTION,_NAME,_VERSION,pack,unpack,unpack_limit,unpack_one \
                 struct:pack,size,unpack",
            ),
            ("return select('#', bit.tobit(1))", "1"),
        ]);
    }

    #[test]
    fn format_g_matches_printf() {
        assert_eq!(format_g(0.0, 14), "0");
        assert_eq!(format_g(1e15, 14), "1e+15");
        assert_eq!(format_g(1e14, 14), "1e+14");
        assert_eq!(format_g(123.456, 14), "123.456");
        assert_eq!(format_g(-1.5e-300, 14), "-1.5e-300");
        assert_eq!(format_g(f64::INFINITY, 14), "inf");
    }
}
