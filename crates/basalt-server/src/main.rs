//! The `basalt` binary: a bare `basalt [flags]` runs the server;
//! `basalt check` checks a data directory offline; `basalt cluster`
//! changes or lists the members of a replicated group.

use clap::Parser;

use basalt_server::config::{Cli, ClusterAction, ClusterArgs, Command, Config};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Some(Command::Check(args)) => return basalt_server::check::run(args),
        Some(Command::Cluster(args)) => return cluster(args),
        None => {}
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

/// `basalt cluster add|remove|members --via host:raftport`: one request to
/// that member's Raft port (passed on to the leader); prints the members
/// afterwards. Exit 0 done, 1 refused or failed, 2 bad arguments.
fn cluster(args: &ClusterArgs) -> std::process::ExitCode {
    use basalt_raft::network::{admin_request, AdminRequest};
    let req = match &args.action {
        ClusterAction::Add { node } => match basalt_server::config::parse_peers(node) {
            Ok(list) if list.len() == 1 => {
                let (id, raft) = list.into_iter().next().expect("one");
                AdminRequest::Add { id, raft }
            }
            _ => {
                eprintln!("basalt cluster add: expected id@host:raftport, got {node:?}");
                return std::process::ExitCode::from(2);
            }
        },
        ClusterAction::Remove { id } => AdminRequest::Remove { id: *id },
        ClusterAction::Members => AdminRequest::Members,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("basalt cluster: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(admin_request(&args.via, req)) {
        Ok(report) => {
            print!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("basalt cluster: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
