//! `basalt-lincheck`: checks a history in the line format (see the library
//! docs) and exits 0 if it is linearizable, 1 if not, 2 if the budget ran
//! out first, and 3 if the input could not be read or parsed.

use std::io::Read as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use basalt_lincheck::{check, parse_history, Counter, LineModel, Options, Register};

const USAGE: &str =
    "usage: basalt-lincheck [--model register|counter] [--max-steps N] [--timeout-secs S] <file|->";

fn main() -> ExitCode {
    match run() {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("basalt-lincheck: {message}");
            ExitCode::from(3)
        }
    }
}

fn run() -> Result<u8, String> {
    let mut model = "register".to_string();
    let mut options = Options::default();
    let mut path = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--model" => model = value("--model")?,
            "--max-steps" => {
                let steps = value("--max-steps")?;
                options = options.max_steps(
                    steps
                        .parse()
                        .map_err(|_| format!("bad --max-steps {steps:?}"))?,
                );
            }
            "--timeout-secs" => {
                let secs = value("--timeout-secs")?;
                let secs: f64 = secs
                    .parse()
                    .map_err(|_| format!("bad --timeout-secs {secs:?}"))?;
                let timeout = Duration::try_from_secs_f64(secs)
                    .map_err(|e| format!("bad --timeout-secs: {e}"))?;
                options = options.timeout(Some(timeout));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(0);
            }
            _ if path.is_none() && (arg == "-" || !arg.starts_with('-')) => path = Some(arg),
            _ => return Err(format!("unexpected argument {arg:?}\n{USAGE}")),
        }
    }
    let path = path.ok_or_else(|| USAGE.to_string())?;
    let text = if path == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("reading stdin: {e}"))?;
        text
    } else {
        std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?
    };
    match model.as_str() {
        "register" => verdict(&Register, &text, &path, &options),
        "counter" => verdict(&Counter, &text, &path, &options),
        other => Err(format!("unknown model {other:?}: register or counter")),
    }
}

fn verdict<M: LineModel>(
    model: &M,
    text: &str,
    path: &str,
    options: &Options,
) -> Result<u8, String> {
    let history = parse_history(model, text).map_err(|e| format!("{path}: {e}"))?;
    let started = Instant::now();
    let verdict = check(model, &history, options).map_err(|e| format!("{path}: {e}"))?;
    println!("{verdict}");
    eprintln!(
        "checked {} operations in {:?}",
        history.len(),
        started.elapsed()
    );
    Ok(verdict.exit_code())
}
