//! AUTH, HELLO AUTH, `requirepass`, protected mode and `maxclients`, with
//! Redis 7.0.15's exact replies (each checked against a real redis-server).

use crate::common;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

use basalt_resp::Frame;
use basalt_server::Config;
use common::{bulk, err, ok, Raw, TestServer};

const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const HELLO_NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time";
const DENIED_START: &str = "DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user.";

fn start(config: impl FnOnce(&mut Config)) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::ephemeral(dir.path());
    config(&mut c);
    TestServer::start_with(c, dir)
}

fn with_password() -> TestServer {
    start(|c| c.requirepass = Some("secret".into()))
}

fn pong() -> Frame {
    Frame::Simple(b"PONG".to_vec())
}

#[test]
fn auth_with_the_password_or_the_default_user_logs_in_and_other_users_get_wrongpass() {
    let s = with_password();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["AUTH", "wrong"]), err(WRONGPASS));
    assert_eq!(r.cmd(&["AUTH", "bob", "secret"]), err(WRONGPASS));
    // Three arguments are user + password: "secret" is not a user.
    assert_eq!(r.cmd(&["AUTH", "secret", "extra"]), err(WRONGPASS));
    assert_eq!(r.cmd(&["AUTH", "a", "b", "c"]), err("ERR syntax error"));
    assert_eq!(r.cmd(&["GET", "k"]), err(NOAUTH));
    assert_eq!(r.cmd(&["AUTH", "secret"]), ok());
    assert_eq!(r.cmd(&["SET", "k", "v"]), ok());

    let mut r2 = s.raw();
    assert_eq!(r2.cmd(&["AUTH", "default", "secret"]), ok());
    assert_eq!(r2.cmd(&["GET", "k"]), bulk("v"));
    let line = match r2.cmd(&["CLIENT", "INFO"]) {
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(line.contains(" user=default "), "{line}");
}

#[test]
fn commands_before_auth_get_noauth_except_auth_hello_quit_and_reset() {
    let s = with_password();
    let mut r = s.raw();
    for cmd in [
        &["PING"][..],
        &["GET", "k"],
        &["ECHO", "hi"],
        &["MULTI"],
        &["CLIENT", "SETNAME", "x"],
        &["SELECT", "1"],
    ] {
        assert_eq!(r.cmd(cmd), err(NOAUTH), "{cmd:?}");
    }
    // Unknown commands and wrong arities are reported before the NOAUTH.
    assert_eq!(
        r.cmd(&["FOO"]),
        err("ERR unknown command 'FOO', with args beginning with: ")
    );
    assert_eq!(
        r.cmd(&["GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    // EXEC reports the NOAUTH as the reason it discards.
    assert_eq!(
        r.cmd(&["EXEC"]),
        err("EXECABORT Transaction discarded because of: NOAUTH Authentication required.")
    );
    assert_eq!(r.cmd(&["RESET"]), Frame::Simple(b"RESET".to_vec()));
    assert_eq!(r.cmd(&["QUIT"]), ok());
    assert!(r.closed());
}

#[test]
fn auth_without_a_configured_password_is_refused_but_auth_default_is_accepted() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["AUTH", "x"]),
        err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
    );
    assert_eq!(r.cmd(&["AUTH", "default", "anything"]), ok());
    assert_eq!(r.cmd(&["AUTH", "bob", "anything"]), err(WRONGPASS));
    assert_eq!(r.cmd(&["PING"]), pong());
}

#[test]
fn hello_needs_auth_first_or_its_auth_option() {
    let s = with_password();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["HELLO"]), err(HELLO_NOAUTH));
    assert_eq!(r.cmd(&["HELLO", "3"]), err(HELLO_NOAUTH));
    // As in Redis 7.0, SETNAME takes effect before the NOAUTH check.
    assert_eq!(r.cmd(&["HELLO", "3", "SETNAME", "x"]), err(HELLO_NOAUTH));
    assert_eq!(
        r.cmd(&["HELLO", "4"]),
        err("NOPROTO unsupported protocol version")
    );
    assert_eq!(
        r.cmd(&["HELLO", "3", "AUTH"]),
        err("ERR Syntax error in HELLO option 'AUTH'")
    );
    assert_eq!(
        r.cmd(&["HELLO", "3", "AUTH", "default", "wrong"]),
        err(WRONGPASS)
    );
    assert_eq!(
        r.cmd(&["HELLO", "2", "AUTH", "bob", "secret"]),
        err(WRONGPASS)
    );
    assert_eq!(r.cmd(&["GET", "k"]), err(NOAUTH));
    assert_eq!(r.cmd(&["AUTH", "secret"]), ok());
    assert_eq!(r.cmd(&["CLIENT", "GETNAME"]), bulk("x"));
    assert_eq!(r.cmd(&["RESET"]), Frame::Simple(b"RESET".to_vec()));
    match r.cmd(&["HELLO", "3", "AUTH", "default", "secret", "SETNAME", "foo"]) {
        Frame::Map(pairs) => {
            assert!(
                pairs.contains(&(bulk("proto"), Frame::Integer(3))),
                "{pairs:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.cmd(&["CLIENT", "GETNAME"]), bulk("foo"));
    assert_eq!(r.cmd(&["GET", "k"]), Frame::Null);
}

#[test]
fn reset_logs_the_client_out_while_a_password_is_set() {
    let s = with_password();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["AUTH", "secret"]), ok());
    assert_eq!(r.cmd(&["GET", "k"]), Frame::NullBulk);
    assert_eq!(r.cmd(&["RESET"]), Frame::Simple(b"RESET".to_vec()));
    assert_eq!(r.cmd(&["GET", "k"]), err(NOAUTH));
}

#[test]
fn a_failed_auth_inside_multi_is_one_error_in_the_exec_reply() {
    let s = with_password();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["AUTH", "secret"]), ok());
    assert_eq!(r.cmd(&["MULTI"]), ok());
    assert_eq!(r.cmd(&["AUTH", "bad"]), Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(r.cmd(&["GET", "k"]), Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(
        r.cmd(&["EXEC"]),
        Frame::Array(vec![err(WRONGPASS), Frame::NullBulk])
    );
    // Still logged in.
    assert_eq!(r.cmd(&["PING"]), pong());
}

#[test]
fn config_set_requirepass_applies_to_new_auths_and_keeps_clients_already_in() {
    let s = TestServer::start();
    let mut before = s.raw();
    // A connection's login state is decided when the server takes it in,
    // which can be after `connect` returns: one round trip makes sure.
    assert_eq!(before.cmd(&["PING"]), pong());
    let mut admin = s.raw();
    assert_eq!(
        admin.cmd(&["CONFIG", "GET", "requirepass"]),
        Frame::Array(vec![bulk("requirepass"), bulk("")])
    );
    assert_eq!(admin.cmd(&["CONFIG", "SET", "requirepass", "pw"]), ok());
    assert_eq!(
        admin.cmd(&["CONFIG", "GET", "requirepass"]),
        Frame::Array(vec![bulk("requirepass"), bulk("pw")])
    );
    // Connected while there was no password: still in.
    assert_eq!(before.cmd(&["PING"]), pong());
    let mut after = s.raw();
    assert_eq!(after.cmd(&["PING"]), err(NOAUTH));
    assert_eq!(after.cmd(&["AUTH", "pw"]), ok());
    assert_eq!(admin.cmd(&["CONFIG", "SET", "requirepass", "other"]), ok());
    assert_eq!(after.cmd(&["PING"]), pong());
    let mut late = s.raw();
    assert_eq!(late.cmd(&["AUTH", "pw"]), err(WRONGPASS));
    assert_eq!(late.cmd(&["AUTH", "other"]), ok());
    // An empty password removes it.
    assert_eq!(admin.cmd(&["CONFIG", "SET", "requirepass", ""]), ok());
    assert_eq!(s.raw().cmd(&["PING"]), pong());
}

#[test]
fn redis_crate_clients_log_in_with_the_password_in_the_url() {
    let s = with_password();
    let url = format!("redis://:secret@{}/", s.addr());
    let client = redis::Client::open(url).unwrap();
    let mut c = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(v, "v");
    let bad = format!("redis://:nope@{}/", s.addr());
    let e = redis::Client::open(bad)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .err()
        .expect("a wrong password fails");
    assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e}");
}

/// A non-loopback address of this machine, if it has one: the source
/// address the kernel picks for an outside destination (no packet is sent).
fn outside_address() -> Option<IpAddr> {
    let sock = UdpSocket::bind("0.0.0.0:0").ok()?;
    for probe in ["192.0.2.1:9", "10.255.255.1:9", "8.8.8.8:53"] {
        if sock.connect(probe).is_ok() {
            if let Ok(addr) = sock.local_addr() {
                if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
                    return Some(addr.ip());
                }
            }
        }
    }
    None
}

fn bound_to_all(config: impl FnOnce(&mut Config)) -> TestServer {
    start(|c| {
        c.bind = IpAddr::from([0, 0, 0, 0]);
        config(c);
    })
}

#[test]
fn protected_mode_denies_clients_from_other_addresses_with_redis_text() {
    let Some(ip) = outside_address() else {
        eprintln!("no non-loopback address: covered by auth::tests only");
        return;
    };
    let s = bound_to_all(|_| {});
    let outside = SocketAddr::new(ip, s.addr().port());
    let mut r = Raw::connect(outside);
    match r.try_read() {
        Some(Frame::Error(e)) => {
            let text = String::from_utf8(e).unwrap();
            assert!(text.starts_with(DENIED_START), "{text}");
            assert!(text.ends_with("NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside."), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(r.closed());
    // The loopback interface is still served, and can turn protection off.
    let local = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), s.addr().port());
    let mut admin = Raw::connect(local);
    assert_eq!(admin.cmd(&["PING"]), pong());
    assert_eq!(
        admin.cmd(&["CONFIG", "GET", "protected-mode"]),
        Frame::Array(vec![bulk("protected-mode"), bulk("yes")])
    );
    assert_eq!(admin.cmd(&["CONFIG", "SET", "protected-mode", "no"]), ok());
    assert_eq!(Raw::connect(outside).cmd(&["PING"]), pong());
    assert_eq!(admin.cmd(&["CONFIG", "SET", "protected-mode", "yes"]), ok());
    // With a password set, protected mode lets outsiders reach AUTH.
    assert_eq!(admin.cmd(&["CONFIG", "SET", "requirepass", "pw"]), ok());
    let mut r = Raw::connect(outside);
    assert_eq!(r.cmd(&["PING"]), err(NOAUTH));
    assert_eq!(r.cmd(&["AUTH", "pw"]), ok());
    assert_eq!(r.cmd(&["PING"]), pong());
}

#[test]
fn protected_mode_off_from_the_config_serves_other_addresses() {
    let Some(ip) = outside_address() else {
        eprintln!("no non-loopback address: covered by auth::tests only");
        return;
    };
    let s = bound_to_all(|c| c.protected_mode = false);
    let outside = SocketAddr::new(ip, s.addr().port());
    assert_eq!(Raw::connect(outside).cmd(&["PING"]), pong());
}

#[test]
fn connections_past_maxclients_get_redis_error_and_are_closed() {
    let s = start(|c| c.maxclients = 2);
    let mut a = s.raw();
    let mut b = s.raw();
    assert_eq!(a.cmd(&["PING"]), pong());
    assert_eq!(b.cmd(&["PING"]), pong());
    let mut c = s.raw();
    assert_eq!(c.try_read(), Some(err("ERR max number of clients reached")));
    assert!(c.closed());
    // The clients already in are unaffected; a freed slot is reused.
    match a.cmd(&["INFO", "stats"]) {
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => {
            let text = String::from_utf8(b).unwrap();
            assert!(text.contains("rejected_connections:1\r\n"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        a.cmd(&["CONFIG", "GET", "maxclients"]),
        Frame::Array(vec![bulk("maxclients"), bulk("2")])
    );
    drop(b);
    assert!(common::eventually(Duration::from_secs(5), || {
        let mut d = s.raw();
        d.send_cmd(&[b"PING"]);
        d.try_read() == Some(pong())
    }));
    assert_eq!(a.cmd(&["CONFIG", "SET", "maxclients", "10"]), ok());
    let mut more: Vec<Raw> = (0..3).map(|_| s.raw()).collect();
    for r in &mut more {
        assert_eq!(r.cmd(&["PING"]), pong());
    }
}

#[test]
fn config_set_of_security_settings_checks_values_like_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    let cases = [
        ("protected-mode", "maybe", "argument must be 'yes' or 'no'"),
        (
            "maxclients",
            "abc",
            "argument couldn't be parsed into an integer",
        ),
        (
            "maxclients",
            "0",
            "argument must be between 1 and 4294967295 inclusive",
        ),
        (
            "maxclients",
            "-5",
            "argument must be between 1 and 4294967295 inclusive",
        ),
        (
            "proto-max-bulk-len",
            "100",
            "argument must be between 1048576 and 9223372036854775807 inclusive",
        ),
        (
            "client-query-buffer-limit",
            "100",
            "argument must be between 1048576 and 9223372036854775807 inclusive",
        ),
    ];
    for (name, value, why) in cases {
        assert_eq!(
            r.cmd(&["CONFIG", "SET", name, value]),
            err(&format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
            )),
            "{name} {value}"
        );
    }
    assert_eq!(r.cmd(&["CONFIG", "SET", "proto-max-bulk-len", "1mb"]), ok());
    assert_eq!(
        r.cmd(&["CONFIG", "SET", "client-query-buffer-limit", "2mb"]),
        ok()
    );
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "proto-max-bulk-len"]),
        Frame::Array(vec![bulk("proto-max-bulk-len"), bulk("1048576")])
    );
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "client-query-buffer-limit"]),
        Frame::Array(vec![bulk("client-query-buffer-limit"), bulk("2097152")])
    );
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "maxclients"]),
        Frame::Array(vec![bulk("maxclients"), bulk("10000")])
    );
    // Nothing changed by a failed CONFIG SET of several settings.
    assert!(matches!(
        r.cmd(&[
            "CONFIG",
            "SET",
            "requirepass",
            "x",
            "protected-mode",
            "maybe"
        ]),
        Frame::Error(_)
    ));
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "requirepass"]),
        Frame::Array(vec![bulk("requirepass"), bulk("")])
    );
    assert_eq!(s.raw().cmd(&["PING"]), pong());
}
