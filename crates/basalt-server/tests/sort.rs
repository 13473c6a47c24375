//! SORT and SORT_RO through real clients: numeric and ALPHA orders, LIMIT,
//! BY and GET patterns (string keys and hash fields), "BY nosort", STORE
//! into a list (replacing, deleting, waking a blocked client), and Redis's
//! errors. Replies were compared with redis-server 7.0.15.

use crate::common;

use basalt_resp::Frame;
use common::{bulk, err, ok, Raw, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

fn cmd(r: &mut Raw, line: &str) -> Frame {
    let args: Vec<&str> = line.split(' ').collect();
    r.cmd(&args)
}

#[test]
fn numeric_and_alpha_orders_with_limit_and_desc() {
    let s = TestServer::start();
    let mut r = s.raw();
    cmd(&mut r, "RPUSH l 10 2 -3.5 0x10 1e1 7");
    assert_eq!(
        cmd(&mut r, "SORT l"),
        arr(&["-3.5", "2", "7", "10", "1e1", "0x10"])
    );
    assert_eq!(cmd(&mut r, "SORT l DESC LIMIT 0 2"), arr(&["0x10", "1e1"]));
    assert_eq!(cmd(&mut r, "SORT l LIMIT 4 10"), arr(&["1e1", "0x10"]));
    assert_eq!(cmd(&mut r, "SORT l LIMIT -5 2"), arr(&["-3.5", "2"]));
    assert_eq!(cmd(&mut r, "SORT l LIMIT 9 1"), arr(&[]));
    assert_eq!(cmd(&mut r, "SORT l LIMIT 1 0"), arr(&[]));
    assert_eq!(
        cmd(&mut r, "SORT l ALPHA"),
        arr(&["-3.5", "0x10", "10", "1e1", "2", "7"])
    );
    // Sets and sorted sets too; SORT_RO is the same without STORE.
    cmd(&mut r, "SADD s 3 1 2");
    assert_eq!(cmd(&mut r, "SORT_RO s DESC"), arr(&["3", "2", "1"]));
    cmd(&mut r, "ZADD z 1 c 2 b 3 a");
    assert_eq!(cmd(&mut r, "SORT z ALPHA"), arr(&["a", "b", "c"]));
    // A missing key sorts as empty.
    assert_eq!(cmd(&mut r, "SORT nothing"), arr(&[]));
}

#[test]
fn errors_come_in_redis_order() {
    let s = TestServer::start();
    let mut r = s.raw();
    cmd(&mut r, "RPUSH words b a");
    cmd(&mut r, "SET str v");
    assert_eq!(
        cmd(&mut r, "SORT words"),
        err("ERR One or more scores can't be converted into double")
    );
    assert_eq!(
        cmd(&mut r, "SORT str"),
        err("WRONGTYPE Operation against a key holding the wrong kind of value")
    );
    // Options are checked before the key's type.
    assert_eq!(cmd(&mut r, "SORT str BOGUS"), err("ERR syntax error"));
    assert_eq!(cmd(&mut r, "SORT words LIMIT 1"), err("ERR syntax error"));
    assert_eq!(
        cmd(&mut r, "SORT words LIMIT x 1"),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        cmd(&mut r, "SORT_RO words ALPHA STORE d"),
        err("ERR syntax error")
    );
    assert_eq!(
        cmd(&mut r, "SORT"),
        err("ERR wrong number of arguments for 'sort' command")
    );
    // Nothing was stored by the failed commands.
    assert_eq!(cmd(&mut r, "EXISTS d"), int(0));
}

#[test]
fn by_and_get_patterns_read_other_keys_and_hash_fields() {
    let s = TestServer::start();
    let mut r = s.raw();
    cmd(&mut r, "RPUSH ids 1 2 3");
    cmd(&mut r, "MSET w_1 30 w_2 10 w_3 20 name_1 ann name_3 cy");
    cmd(&mut r, "HSET user_1 age 40");
    cmd(&mut r, "HSET user_2 age 25");
    cmd(&mut r, "HSET user_3 age 33");
    assert_eq!(cmd(&mut r, "SORT ids BY w_*"), arr(&["2", "3", "1"]));
    assert_eq!(
        cmd(&mut r, "SORT ids BY user_*->age DESC"),
        arr(&["1", "3", "2"])
    );
    // GET: `#` is the element, a missing key or field is a nil.
    assert_eq!(
        cmd(&mut r, "SORT ids BY w_* GET # GET name_* GET user_*->age"),
        Frame::Array(vec![
            bulk("2"),
            Frame::NullBulk,
            bulk("25"),
            bulk("3"),
            bulk("cy"),
            bulk("33"),
            bulk("1"),
            bulk("ann"),
            bulk("40"),
        ])
    );
    // A missing BY key sorts as 0 (ties broken by the element); a BY
    // value that is not a number fails.
    cmd(&mut r, "DEL w_2");
    assert_eq!(cmd(&mut r, "SORT ids BY w_*"), arr(&["2", "3", "1"]));
    cmd(&mut r, "SET w_2 heavy");
    assert_eq!(
        cmd(&mut r, "SORT ids BY w_*"),
        err("ERR One or more scores can't be converted into double")
    );
    // With ALPHA the BY values compare as strings: no number needed.
    assert_eq!(cmd(&mut r, "SORT ids BY w_* ALPHA"), arr(&["3", "1", "2"]));
    // A BY pattern without `*` does not sort: the list's own order,
    // reversed by DESC, and a sorted set's score order.
    assert_eq!(
        cmd(&mut r, "SORT ids BY nosort DESC"),
        arr(&["3", "2", "1"])
    );
    cmd(&mut r, "ZADD z 3 a 1 b 2 c");
    assert_eq!(
        cmd(&mut r, "SORT z BY nosort GET # LIMIT 1 5"),
        arr(&["c", "a"])
    );
}

#[test]
fn store_replaces_the_destination_with_a_list() {
    let s = TestServer::start();
    let mut r = s.raw();
    cmd(&mut r, "RPUSH l 3 1 2");
    cmd(&mut r, "SET dst old EX 100");
    assert_eq!(cmd(&mut r, "SORT l STORE dst"), int(3));
    assert_eq!(cmd(&mut r, "TYPE dst"), Frame::Simple(b"list".to_vec()));
    assert_eq!(cmd(&mut r, "LRANGE dst 0 -1"), arr(&["1", "2", "3"]));
    assert_eq!(cmd(&mut r, "TTL dst"), int(-1));
    // Missing GET values are stored as empty strings.
    assert_eq!(cmd(&mut r, "SORT l GET # GET none_* STORE dst"), int(6));
    assert_eq!(
        cmd(&mut r, "LRANGE dst 0 -1"),
        arr(&["1", "", "2", "", "3", ""])
    );
    // An empty result deletes the destination.
    assert_eq!(cmd(&mut r, "SORT missing STORE dst"), int(0));
    assert_eq!(cmd(&mut r, "EXISTS dst"), int(0));
    // A set stored without sorting is sorted as strings all the same.
    cmd(&mut r, "SADD s b c a");
    assert_eq!(cmd(&mut r, "SORT s BY nosort STORE dst"), int(3));
    assert_eq!(cmd(&mut r, "LRANGE dst 0 -1"), arr(&["a", "b", "c"]));
    // It survives a restart like any list.
    drop(r);
    let s = s.restart();
    let mut r = s.raw();
    assert_eq!(cmd(&mut r, "LRANGE dst 0 -1"), arr(&["a", "b", "c"]));
    assert_eq!(cmd(&mut r, "MULTI"), ok());
    cmd(&mut r, "SORT s ALPHA DESC STORE dst");
    assert_eq!(cmd(&mut r, "EXEC"), Frame::Array(vec![int(3)]));
    assert_eq!(cmd(&mut r, "LRANGE dst 0 -1"), arr(&["c", "b", "a"]));
}

#[test]
fn store_wakes_a_client_blocked_on_the_destination() {
    let s = TestServer::start();
    let mut waiter = s.raw();
    let mut r = s.raw();
    waiter.send_cmd(&[b"BLPOP", b"dst", b"5"]);
    s.wait_blocked(1);
    cmd(&mut r, "RPUSH l 2 1");
    assert_eq!(cmd(&mut r, "SORT l STORE dst"), int(2));
    assert_eq!(waiter.read(), arr(&["dst", "1"]));
    assert_eq!(cmd(&mut r, "LRANGE dst 0 -1"), arr(&["2"]));
}
