//! The line format: one operation per line, so a recorder in any language
//! can write a history with `printf`. The grammar is in the crate docs.

use crate::models::{Counter, CounterInput, Register, RegisterInput, RegisterOutput};
use crate::{Error, History, Model, Operation};

/// One whitespace-separated word of a line, after unquoting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The word, with quotes removed and escapes resolved.
    pub text: String,
    /// Whether it was written in double quotes. A bare `nil`, `?` or `->`
    /// has its special meaning; a quoted one is just text.
    pub quoted: bool,
}

impl Token {
    /// The word as a register value: `None` for a bare `nil`.
    pub fn value(&self) -> Option<&str> {
        if self.is_bare("nil") {
            None
        } else {
            Some(&self.text)
        }
    }

    /// Whether this is the unquoted word `word`.
    pub fn is_bare(&self, word: &str) -> bool {
        !self.quoted && self.text == word
    }
}

/// A [`Model`] whose operations can be read from the line format.
pub trait LineModel: Model {
    /// Reads an operation's name and arguments, e.g. `write` and `["v1"]`.
    fn parse_input(&self, op: &str, args: &[Token]) -> Result<Self::Input, String>;

    /// Reads the word after `->` as `input`'s reply. Never sees `?`.
    fn parse_output(&self, input: &Self::Input, output: &Token) -> Result<Self::Output, String>;
}

/// Reads a history written in the line format described in the crate docs.
/// Errors name the line (counting from 1) and what was wrong with it.
pub fn parse_history<M: LineModel>(model: &M, text: &str) -> Result<History<M>, Error> {
    let mut history = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let op = parse_line(model, trimmed).map_err(|reason| Error::Parse {
            line: index + 1,
            reason,
        })?;
        history.push(op);
    }
    Ok(history)
}

fn parse_line<M: LineModel>(
    model: &M,
    line: &str,
) -> Result<Operation<M::Input, M::Output>, String> {
    let tokens = tokenize(line)?;
    if tokens.len() < 5 {
        return Err(format!(
            "expected `client key invoked returned op [args...] [-> output]`, found {} words",
            tokens.len()
        ));
    }
    let client = parse_u64(&tokens[0], "client id")?;
    let key = tokens[1].text.clone();
    let call = parse_u64(&tokens[2], "invocation time")?;
    let ret = if tokens[3].is_bare("-") {
        None
    } else {
        Some(parse_u64(&tokens[3], "response time (or `-`)")?)
    };
    if tokens[4].quoted {
        return Err(format!(
            "operation name {:?} must not be quoted",
            tokens[4].text
        ));
    }
    let op = tokens[4].text.as_str();
    let rest = &tokens[5..];
    let (args, output) = match rest.iter().position(|t| t.is_bare("->")) {
        None => (rest, None),
        Some(arrow) => match &rest[arrow + 1..] {
            [output] => (&rest[..arrow], Some(output)),
            [] => return Err("nothing after `->`".to_string()),
            more => {
                return Err(format!(
                    "one output expected after `->`, found {}",
                    more.len()
                ))
            }
        },
    };
    let input = model.parse_input(op, args)?;
    let output = match output {
        Some(token) if !token.is_bare("?") => {
            if ret.is_none() {
                return Err("an operation without a response (`-`) cannot have an output; write `-> ?` or nothing".to_string());
            }
            Some(model.parse_output(&input, token)?)
        }
        _ => None,
    };
    Ok(Operation {
        client,
        key,
        call,
        ret,
        input,
        output,
    })
}

fn parse_u64(token: &Token, what: &str) -> Result<u64, String> {
    token
        .text
        .parse()
        .map_err(|_| format!("{what} must be an unsigned integer, found {:?}", token.text))
}

fn parse_i64(token: &Token, what: &str) -> Result<i64, String> {
    token
        .text
        .parse()
        .map_err(|_| format!("{what} must be an integer, found {:?}", token.text))
}

/// Splits a line into words: bare runs of non-whitespace, or double-quoted
/// strings with `\"`, `\\`, `\n`, `\r` and `\t` escapes.
fn tokenize(line: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            return Ok(tokens);
        };
        if first == '"' {
            chars.next();
            let mut text = String::new();
            loop {
                match chars.next() {
                    None => return Err("unterminated quoted string".to_string()),
                    Some('"') => break,
                    Some('\\') => text.push(match chars.next() {
                        Some('"') => '"',
                        Some('\\') => '\\',
                        Some('n') => '\n',
                        Some('r') => '\r',
                        Some('t') => '\t',
                        other => {
                            return Err(format!(
                                "unknown escape `\\{}` in quoted string",
                                other.unwrap_or(' ')
                            ))
                        }
                    }),
                    Some(c) => text.push(c),
                }
            }
            if chars.peek().is_some_and(|c| !c.is_whitespace()) {
                return Err("a quoted string must be followed by whitespace".to_string());
            }
            tokens.push(Token { text, quoted: true });
        } else {
            let mut text = String::new();
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                text.push(c);
            }
            tokens.push(Token {
                text,
                quoted: false,
            });
        }
    }
}

fn expect_args<'a, const N: usize>(op: &str, args: &'a [Token]) -> Result<&'a [Token; N], String> {
    args.try_into()
        .map_err(|_| format!("`{op}` takes {N} argument(s), found {}", args.len()))
}

fn parse_bool(token: &Token, what: &str) -> Result<bool, String> {
    match token.text.as_str() {
        "1" | "true" if !token.quoted => Ok(true),
        "0" | "false" if !token.quoted => Ok(false),
        _ => Err(format!(
            "{what} answers 1/true or 0/false, found {:?}",
            token.text
        )),
    }
}

impl LineModel for Register {
    fn parse_input(&self, op: &str, args: &[Token]) -> Result<RegisterInput, String> {
        let value = |token: &Token| {
            token
                .value()
                .map(str::to_string)
                .ok_or_else(|| format!("`{op}` cannot write nil"))
        };
        match op {
            "read" => expect_args::<0>(op, args).map(|_| RegisterInput::Read),
            "write" => {
                let [v] = expect_args(op, args)?;
                Ok(RegisterInput::Write(value(v)?))
            }
            "del" => expect_args::<0>(op, args).map(|_| RegisterInput::Delete),
            "cas" => {
                let [expected, new] = expect_args(op, args)?;
                Ok(RegisterInput::CompareAndSet {
                    expected: expected.value().map(str::to_string),
                    new: value(new)?,
                })
            }
            other => Err(format!(
                "unknown register operation {other:?} (read, write, del, cas)"
            )),
        }
    }

    fn parse_output(
        &self,
        input: &RegisterInput,
        output: &Token,
    ) -> Result<RegisterOutput, String> {
        match input {
            RegisterInput::Read => Ok(RegisterOutput::Value(output.value().map(str::to_string))),
            RegisterInput::Write(_) if output.is_bare("ok") || output.is_bare("OK") => {
                Ok(RegisterOutput::Ok)
            }
            RegisterInput::Write(_) => Err(format!("`write` answers ok, found {:?}", output.text)),
            RegisterInput::Delete => parse_bool(output, "`del`").map(RegisterOutput::Deleted),
            RegisterInput::CompareAndSet { .. } => {
                parse_bool(output, "`cas`").map(RegisterOutput::Swapped)
            }
        }
    }
}

impl LineModel for Counter {
    fn parse_input(&self, op: &str, args: &[Token]) -> Result<CounterInput, String> {
        match op {
            "incr" => {
                let [by] = expect_args(op, args)?;
                Ok(CounterInput::Incr(parse_i64(by, "`incr`'s amount")?))
            }
            "read" => expect_args::<0>(op, args).map(|_| CounterInput::Read),
            other => Err(format!("unknown counter operation {other:?} (incr, read)")),
        }
    }

    fn parse_output(&self, _input: &CounterInput, output: &Token) -> Result<i64, String> {
        if output.is_bare("nil") {
            return Ok(0);
        }
        parse_i64(output, "a counter's reply")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bare(text: &str) -> Token {
        Token {
            text: text.to_string(),
            quoted: false,
        }
    }

    #[test]
    fn tokenize_splits_bare_and_quoted_words() {
        let tokens = tokenize(r#"1  k "a b\"c" nil "nil"  "#).unwrap();
        assert_eq!(
            tokens,
            [
                bare("1"),
                bare("k"),
                Token {
                    text: "a b\"c".to_string(),
                    quoted: true
                },
                bare("nil"),
                Token {
                    text: "nil".to_string(),
                    quoted: true
                },
            ]
        );
    }

    #[test]
    fn tokenize_rejects_an_unterminated_quote() {
        assert!(tokenize(r#"1 k "abc"#).is_err());
        assert!(tokenize(r#"1 k "a"b"#).is_err());
    }
}
