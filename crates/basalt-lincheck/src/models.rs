//! The built-in models: a Redis string key used as a register
//! (GET/SET/DEL/CAS) and as a counter (INCRBY/GET).
//!
//! Each model is a pure function from (state, input, observed output) to the
//! next state, or `None` when the output could not have been produced in that
//! state. An unobserved output (`None`) is accepted in every state; both
//! models are deterministic, so the next state is still unique.

use std::fmt::Write as _;

use crate::Model;

/// The value of a register key: a Redis string, or absent.
pub type Value = String;

/// A single key read and written whole: `GET`, `SET`, `DEL`, and a
/// compare-and-set (`SET key new NX` is a compare-and-set against absent).
/// The state is the key's value, `None` while the key does not exist.
#[derive(Debug, Clone, Copy, Default)]
pub struct Register;

/// A register operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RegisterInput {
    /// `GET key`; answers [`RegisterOutput::Value`].
    Read,
    /// `SET key value`; answers [`RegisterOutput::Ok`].
    Write(Value),
    /// `DEL key`; answers [`RegisterOutput::Deleted`].
    Delete,
    /// Sets the key to `new` if its value is `expected` (`None`: the key is
    /// absent); answers [`RegisterOutput::Swapped`].
    CompareAndSet { expected: Option<Value>, new: Value },
}

/// A register operation's reply.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RegisterOutput {
    /// The value a read saw, `None` for a nil reply.
    Value(Option<Value>),
    /// A write's `OK`.
    Ok,
    /// Whether a delete found the key (`DEL` answered 1) or not (0).
    Deleted(bool),
    /// Whether a compare-and-set succeeded.
    Swapped(bool),
}

impl Model for Register {
    type State = Option<Value>;
    type Input = RegisterInput;
    type Output = RegisterOutput;

    fn init(&self) -> Self::State {
        None
    }

    fn step(
        &self,
        state: &Self::State,
        input: &RegisterInput,
        output: Option<&RegisterOutput>,
    ) -> Option<Self::State> {
        match input {
            RegisterInput::Read => match output {
                None => Some(state.clone()),
                Some(RegisterOutput::Value(seen)) if seen == state => Some(state.clone()),
                Some(_) => None,
            },
            RegisterInput::Write(value) => match output {
                None | Some(RegisterOutput::Ok) => Some(Some(value.clone())),
                Some(_) => None,
            },
            RegisterInput::Delete => match output {
                None => Some(None),
                Some(RegisterOutput::Deleted(existed)) if *existed == state.is_some() => Some(None),
                Some(_) => None,
            },
            RegisterInput::CompareAndSet { expected, new } => {
                let swaps = state == expected;
                match output {
                    None => {}
                    Some(RegisterOutput::Swapped(swapped)) if *swapped == swaps => {}
                    Some(_) => return None,
                }
                Some(if swaps {
                    Some(new.clone())
                } else {
                    state.clone()
                })
            }
        }
    }

    fn is_read_only(&self, input: &RegisterInput, output: Option<&RegisterOutput>) -> bool {
        // An unobserved delete or compare-and-set may change the value.
        matches!(
            (input, output),
            (RegisterInput::Read, _)
                | (RegisterInput::Delete, Some(RegisterOutput::Deleted(false)))
                | (
                    RegisterInput::CompareAndSet { .. },
                    Some(RegisterOutput::Swapped(false))
                )
        )
    }

    fn validate(&self, input: &RegisterInput, output: &RegisterOutput) -> Result<(), String> {
        let fits = matches!(
            (input, output),
            (RegisterInput::Read, RegisterOutput::Value(_))
                | (RegisterInput::Write(_), RegisterOutput::Ok)
                | (RegisterInput::Delete, RegisterOutput::Deleted(_))
                | (
                    RegisterInput::CompareAndSet { .. },
                    RegisterOutput::Swapped(_)
                )
        );
        if fits {
            Ok(())
        } else {
            Err(format!("{input:?} cannot answer {output:?}"))
        }
    }

    fn describe_op(&self, input: &RegisterInput, output: Option<&RegisterOutput>) -> String {
        let mut text = match input {
            RegisterInput::Read => "read".to_string(),
            RegisterInput::Write(value) => format!("write {}", quote(value)),
            RegisterInput::Delete => "del".to_string(),
            RegisterInput::CompareAndSet { expected, new } => {
                format!("cas {} {}", quote_opt(expected.as_deref()), quote(new))
            }
        };
        let _ = match output {
            None => write!(text, " -> ?"),
            Some(RegisterOutput::Value(value)) => {
                write!(text, " -> {}", quote_opt(value.as_deref()))
            }
            Some(RegisterOutput::Ok) => write!(text, " -> ok"),
            Some(RegisterOutput::Deleted(existed)) => write!(text, " -> {}", u8::from(*existed)),
            Some(RegisterOutput::Swapped(swapped)) => write!(text, " -> {swapped}"),
        };
        text
    }

    fn describe_state(&self, state: &Self::State) -> String {
        quote_opt(state.as_deref())
    }
}

/// An integer key changed only by `INCRBY`, which answers the new value.
/// The state is the value; an absent key reads as 0, so a recorder turns a
/// nil `GET` into 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counter;

/// A counter operation. Both answer the counter's value as an `i64`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CounterInput {
    /// `INCRBY key by`; answers the value after the increment.
    Incr(i64),
    /// `GET key`; answers the value (0 for nil).
    Read,
}

impl Model for Counter {
    type State = i64;
    type Input = CounterInput;
    type Output = i64;

    fn init(&self) -> i64 {
        0
    }

    fn step(&self, state: &i64, input: &CounterInput, output: Option<&i64>) -> Option<i64> {
        let next = match input {
            // Redis refuses an INCRBY that would overflow and leaves the
            // value alone, so an overflowing increment cannot take effect.
            CounterInput::Incr(by) => state.checked_add(*by)?,
            CounterInput::Read => *state,
        };
        match output {
            Some(seen) if *seen != next => None,
            _ => Some(next),
        }
    }

    fn is_read_only(&self, input: &CounterInput, output: Option<&i64>) -> bool {
        // An increment by 0 with an observed reply: it fixes the state.
        matches!(
            (input, output),
            (CounterInput::Read, _) | (CounterInput::Incr(0), Some(_))
        )
    }

    fn describe_op(&self, input: &CounterInput, output: Option<&i64>) -> String {
        let op = match input {
            CounterInput::Incr(by) => format!("incr {by}"),
            CounterInput::Read => "read".to_string(),
        };
        match output {
            Some(value) => format!("{op} -> {value}"),
            None => format!("{op} -> ?"),
        }
    }

    fn describe_state(&self, state: &i64) -> String {
        state.to_string()
    }
}

/// Writes a value the way the line format reads it back: bare when that is
/// unambiguous, otherwise in double quotes with `\"`, `\\`, `\n`, `\r` and
/// `\t` escaped.
pub fn quote(value: &str) -> String {
    let bare = !value.is_empty()
        && value != "nil"
        && value != "?"
        && value != "->"
        && !value.starts_with('"')
        && !value.starts_with('#')
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\\');
    if bare {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn quote_opt(value: Option<&str>) -> String {
    value.map_or_else(|| "nil".to_string(), quote)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Option<Value> {
        Some(s.to_string())
    }

    #[test]
    fn register_read_must_see_the_current_value() {
        let r = Register;
        let out = RegisterOutput::Value(v("a"));
        assert_eq!(
            r.step(&v("a"), &RegisterInput::Read, Some(&out)),
            Some(v("a"))
        );
        assert_eq!(r.step(&v("b"), &RegisterInput::Read, Some(&out)), None);
        assert_eq!(r.step(&None, &RegisterInput::Read, None), Some(None));
    }

    #[test]
    fn register_delete_reports_whether_the_key_existed() {
        let r = Register;
        let gone = RegisterOutput::Deleted(true);
        assert_eq!(
            r.step(&v("a"), &RegisterInput::Delete, Some(&gone)),
            Some(None)
        );
        assert_eq!(r.step(&None, &RegisterInput::Delete, Some(&gone)), None);
        assert_eq!(
            r.step(
                &None,
                &RegisterInput::Delete,
                Some(&RegisterOutput::Deleted(false))
            ),
            Some(None)
        );
    }

    #[test]
    fn register_cas_swaps_only_on_the_expected_value() {
        let r = Register;
        let cas = RegisterInput::CompareAndSet {
            expected: None,
            new: "n".to_string(),
        };
        let yes = RegisterOutput::Swapped(true);
        let no = RegisterOutput::Swapped(false);
        assert_eq!(r.step(&None, &cas, Some(&yes)), Some(v("n")));
        assert_eq!(r.step(&v("a"), &cas, Some(&yes)), None);
        assert_eq!(r.step(&v("a"), &cas, Some(&no)), Some(v("a")));
        // An unobserved CAS follows the state: it may or may not swap.
        assert_eq!(r.step(&v("a"), &cas, None), Some(v("a")));
        assert_eq!(r.step(&None, &cas, None), Some(v("n")));
    }

    #[test]
    fn register_rejects_an_output_of_the_wrong_kind() {
        assert!(Register
            .validate(&RegisterInput::Read, &RegisterOutput::Ok)
            .is_err());
        assert!(Register
            .validate(&RegisterInput::Delete, &RegisterOutput::Deleted(false))
            .is_ok());
    }

    #[test]
    fn counter_incr_answers_the_new_value_and_refuses_overflow() {
        let c = Counter;
        assert_eq!(c.step(&0, &CounterInput::Incr(3), Some(&3)), Some(3));
        assert_eq!(c.step(&0, &CounterInput::Incr(3), Some(&4)), None);
        assert_eq!(c.step(&i64::MAX, &CounterInput::Incr(1), None), None);
        assert_eq!(c.step(&7, &CounterInput::Read, Some(&7)), Some(7));
    }

    #[test]
    fn quote_leaves_plain_values_bare_and_escapes_the_rest() {
        assert_eq!(quote("abc"), "abc");
        assert_eq!(quote("nil"), "\"nil\"");
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote("a b\"c\\\n"), "\"a b\\\"c\\\\\\n\"");
    }
}
