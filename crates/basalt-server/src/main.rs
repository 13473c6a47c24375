//! The `basalt` binary: a bare `basalt [flags]` runs the server;
//! `basalt check` checks a data directory offline.

use clap::Parser;

use basalt_server::config::{Cli, Command, Config};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Check(args)) = &cli.command {
        return basalt_server::check::run(args);
    }
    let config = match Config::from_args(cli.server) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("basalt: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    // Redis's level names are accepted too.
    let level = match config.loglevel.as_str() {
        "verbose" => "debug",
        "notice" => "info",
        "warning" => "warn",
        other => other,
    };
    // openraft reports every vote and election at info; Basalt's own log
    // says what matters (leader changes at warn come through).
    let level = if level.contains("openraft") || level.contains('=') {
        level.to_string()
    } else {
        format!("{level},openraft=warn")
    };
    let filter = match tracing_subscriber::EnvFilter::try_new(&level) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("basalt: invalid --loglevel {:?}: {e}", config.loglevel);
            return std::process::ExitCode::from(2);
        }
    };
    // Colours only on a terminal: a log redirected to a file or a journal
    // gets plain text, not escape codes.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .init();
    let result = basalt_server::start_with_signals(config).and_then(|h| h.wait());
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("basalt: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
