//! Geo commands through real clients: GEOADD's geohash scores and its
//! NX / XX / CH, distances in every unit, GEOHASH and GEOPOS, radius and
//! box searches with every option, STORE / STOREDIST / GEOSEARCHSTORE,
//! errors in Redis's order leaving data unchanged, the keyspace events, and
//! persistence across restart. Every expected reply was read from
//! redis-server 7.0.15 with the same commands.

use crate::common;

use std::io::{BufReader, Read, Write};

use basalt_resp::Frame;
use common::{bulk, err, ok, read_reply, resp, Raw, TestServer};

fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn bulks(items: &[&str]) -> Frame {
    arr(items.iter().map(|s| bulk(s)).collect())
}

fn empty() -> Frame {
    arr(vec![])
}

/// `[member, field, ...]` rows of a WITH* reply, every field a bulk.
fn rows(items: &[&[&str]]) -> Frame {
    arr(items.iter().map(|r| bulks(r)).collect())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Palermo and Catania (Redis's documentation example) and two points of
/// the documentation's box search.
fn sicily(r: &mut Raw) {
    assert_eq!(
        r.cmd(&[
            "GEOADD",
            "Sicily",
            "13.361389",
            "38.115556",
            "Palermo",
            "15.087269",
            "37.502669",
            "Catania",
            "12.758489",
            "38.788135",
            "edge1",
            "17.241510",
            "38.788135",
            "edge2",
        ]),
        int(4)
    );
}

/// Sends `args` on a fresh connection and checks the reply byte for byte
/// (RESP3 doubles included, which `Frame` would parse into an f64).
fn exact(s: &TestServer, hello3: bool, args: &[&str], expected: &str) {
    let c = std::net::TcpStream::connect(s.addr()).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut w = c.try_clone().unwrap();
    let mut r = BufReader::new(c);
    if hello3 {
        w.write_all(&resp(&["HELLO", "3"])).unwrap();
        assert!(read_reply(&mut r).starts_with('%'));
    }
    w.write_all(&resp(args)).unwrap();
    let mut got = vec![0u8; expected.len()];
    r.read_exact(&mut got).unwrap();
    assert_eq!(String::from_utf8_lossy(&got), expected, "{args:?}");
}

#[test]
fn geoadd_stores_the_geohash_as_the_score() {
    let s = TestServer::start();
    let mut c = s.client();
    let added: i64 = redis::cmd("GEOADD")
        .arg("Sicily")
        .arg(13.361389)
        .arg(38.115556)
        .arg("Palermo")
        .arg(15.087269)
        .arg(37.502669)
        .arg("Catania")
        .query(&mut c)
        .unwrap();
    assert_eq!(added, 2);
    let all: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg("Sicily")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        all,
        vec![
            ("Palermo".into(), 3479099956230698),
            ("Catania".into(), 3479447370796909)
        ]
    );
    let mut r = s.raw();
    assert_eq!(r.cmd(&["TYPE", "Sicily"]), Frame::Simple(b"zset".to_vec()));
    // The corners: the far one overflows past 52 bits, as in Redis.
    r.cmd(&[
        "GEOADD",
        "w",
        "0",
        "0",
        "null",
        "180",
        "85.05112878",
        "corner",
    ]);
    r.cmd(&["GEOADD", "w", "-180", "-85.05112878", "south"]);
    assert_eq!(
        r.cmd(&["ZRANGE", "w", "0", "-1", "WITHSCORES"]),
        bulks(&[
            "south",
            "0",
            "null",
            "3377699720527872",
            "corner",
            "13510798882111488"
        ])
    );
}

#[test]
fn geoadd_nx_xx_and_ch_follow_zadd() {
    let s = TestServer::start();
    let mut r = s.raw();
    assert_eq!(r.cmd(&["GEOADD", "g", "XX", "1", "1", "a"]), int(0));
    assert_eq!(r.cmd(&["EXISTS", "g"]), int(0));
    assert_eq!(
        r.cmd(&["GEOADD", "g", "1", "1", "a", "2", "2", "b"]),
        int(2)
    );
    // Moving a member is not an addition, unless CH counts changes.
    assert_eq!(r.cmd(&["GEOADD", "g", "1", "2", "a"]), int(0));
    assert_eq!(
        r.cmd(&["GEOADD", "g", "CH", "1", "3", "a", "2", "2", "b", "3", "3", "c"]),
        int(2)
    );
    assert_eq!(
        r.cmd(&["GEOADD", "g", "NX", "ch", "9", "9", "a", "4", "4", "d"]),
        int(1)
    );
    assert_eq!(
        r.cmd(&["GEOADD", "g", "xx", "5", "5", "d", "6", "6", "e"]),
        int(0)
    );
    assert_eq!(r.cmd(&["ZCARD", "g"]), int(4));
    assert_eq!(
        r.cmd(&["GEOHASH", "g", "a", "d", "e"]),
        arr(vec![
            bulk("s089nf0hm80"),
            bulk("s0gs3y0zh70"),
            Frame::NullBulk
        ])
    );
    // NX with XX, options without elements, a stray option: syntax errors.
    for bad in [
        &["GEOADD", "g", "NX", "XX", "1", "1", "x"][..],
        &["GEOADD", "g", "CH", "CH", "CH"],
        &["GEOADD", "g", "GT", "1", "1", "x"],
        &["GEOADD", "g", "1", "1", "x", "2"],
    ] {
        assert_eq!(r.cmd(bad), err("ERR syntax error"), "{bad:?}");
    }
    assert_eq!(
        r.cmd(&["GEOADD", "g", "1", "1"]),
        err("ERR wrong number of arguments for 'geoadd' command")
    );
}

#[test]
fn out_of_range_coordinates_are_refused_and_nothing_is_added() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    assert_eq!(
        r.cmd(&["GEOADD", "Sicily", "10", "10", "ok", "200", "10", "bad"]),
        err("ERR invalid longitude,latitude pair 200.000000,10.000000")
    );
    assert_eq!(
        r.cmd(&["GEOADD", "Sicily", "1", "inf", "x"]),
        err("ERR invalid longitude,latitude pair 1.000000,inf")
    );
    assert_eq!(
        r.cmd(&["GEOADD", "Sicily", "-0", "85.06", "x"]),
        err("ERR invalid longitude,latitude pair -0.000000,85.060000")
    );
    assert_eq!(
        r.cmd(&["GEOADD", "Sicily", "abc", "10", "x"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        r.cmd(&["GEOADD", "Sicily", "1", "nan", "x"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(r.cmd(&["ZCARD", "Sicily"]), int(4));
    assert_eq!(r.cmd(&["ZSCORE", "Sicily", "ok"]), Frame::NullBulk);
}

#[test]
fn geodist_in_every_unit() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    for (unit, d) in [
        (None, "166274.1516"),
        (Some("m"), "166274.1516"),
        (Some("km"), "166.2742"),
        (Some("KM"), "166.2742"),
        (Some("ft"), "545518.8700"),
        (Some("mi"), "103.3182"),
    ] {
        let mut args = vec!["GEODIST", "Sicily", "Palermo", "Catania"];
        args.extend(unit);
        assert_eq!(r.cmd(&args), bulk(d), "{unit:?}");
    }
    assert_eq!(
        r.cmd(&["GEODIST", "Sicily", "Palermo", "Palermo"]),
        bulk("0.0000")
    );
    assert_eq!(
        r.cmd(&["GEODIST", "Sicily", "Palermo", "nope"]),
        Frame::NullBulk
    );
    assert_eq!(r.cmd(&["GEODIST", "nokey", "a", "b"]), Frame::NullBulk);
    assert_eq!(
        r.cmd(&["GEODIST", "Sicily", "Palermo", "Catania", "yards"]),
        err("ERR unsupported unit provided. please use M, KM, FT, MI")
    );
    assert_eq!(
        r.cmd(&["GEODIST", "Sicily", "a", "b", "c", "d"]),
        err("ERR syntax error")
    );
}

#[test]
fn geopos_and_geohash_print_like_redis_in_both_protocols() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    assert_eq!(
        r.cmd(&["GEOPOS", "Sicily", "Palermo", "nope"]),
        arr(vec![
            bulks(&["13.36138933897018433", "38.11555639549629859"]),
            Frame::NullArray
        ])
    );
    assert_eq!(
        r.cmd(&["GEOHASH", "Sicily", "Palermo", "Catania", "nope"]),
        arr(vec![
            bulk("sqc8b49rny0"),
            bulk("sqdtr74hyu0"),
            Frame::NullBulk
        ])
    );
    assert_eq!(r.cmd(&["GEOPOS", "Sicily"]), empty());
    assert_eq!(
        r.cmd(&["GEOPOS", "nokey", "a"]),
        arr(vec![Frame::NullArray])
    );
    assert_eq!(
        r.cmd(&["GEOHASH", "nokey", "a", "b"]),
        arr(vec![Frame::NullBulk, Frame::NullBulk])
    );
    // RESP3: coordinates are doubles with 17 decimals, distances stay
    // strings, hashes are integers, a missing member is a null.
    exact(
        &s,
        true,
        &["GEOPOS", "Sicily", "Palermo", "nope"],
        "*2\r\n*2\r\n,13.36138933897018433\r\n,38.11555639549629859\r\n_\r\n",
    );
    exact(
        &s,
        true,
        &[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "100",
            "km",
            "WITHDIST",
            "WITHHASH",
            "WITHCOORD",
        ],
        "*1\r\n*4\r\n$7\r\nCatania\r\n$7\r\n56.4413\r\n:3479447370796909\r\n\
         *2\r\n,15.08726745843887329\r\n,37.50266842333162032\r\n",
    );
    exact(&s, true, &["GEODIST", "Sicily", "Palermo", "x"], "_\r\n");
    exact(&s, false, &["GEOPOS", "Sicily", "x"], "*1\r\n*-1\r\n");
}

#[test]
fn georadius_with_every_option() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    let base = ["GEORADIUS", "Sicily", "15", "37", "200", "km"];
    let q = |r: &mut Raw, extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        r.cmd(&args)
    };
    // Unsorted: in the order of the cells searched, then of the scores.
    assert_eq!(q(&mut r, &[]), bulks(&["Palermo", "Catania"]));
    assert_eq!(q(&mut r, &["DESC"]), bulks(&["Palermo", "Catania"]));
    assert_eq!(q(&mut r, &["asc"]), bulks(&["Catania", "Palermo"]));
    assert_eq!(
        q(&mut r, &["WITHCOORD", "WITHDIST", "ASC"]),
        arr(vec![
            arr(vec![
                bulk("Catania"),
                bulk("56.4413"),
                bulks(&["15.08726745843887329", "37.50266842333162032"])
            ]),
            arr(vec![
                bulk("Palermo"),
                bulk("190.4424"),
                bulks(&["13.36138933897018433", "38.11555639549629859"])
            ]),
        ])
    );
    // COUNT alone means the nearest; with DESC the farthest.
    assert_eq!(q(&mut r, &["COUNT", "1"]), bulks(&["Catania"]));
    assert_eq!(
        q(&mut r, &["COUNT", "1", "DESC", "WITHDIST"]),
        rows(&[&["Palermo", "190.4424"]])
    );
    // ANY stops at the first COUNT found, unsorted.
    assert_eq!(
        q(&mut r, &["WITHHASH", "COUNT", "1", "ANY"]),
        arr(vec![arr(vec![bulk("Palermo"), int(3479099956230698)])])
    );
    assert_eq!(q(&mut r, &["COUNT", "10"]), bulks(&["Catania", "Palermo"]));
    for (extra, e) in [
        (&["COUNT", "0"][..], "ERR COUNT must be > 0"),
        (
            &["COUNT", "x"],
            "ERR value is not an integer or out of range",
        ),
        (&["ANY"], "ERR the ANY argument requires COUNT argument"),
        (&["COUNT"], "ERR syntax error"),
        (&["BOGUS"], "ERR syntax error"),
    ] {
        assert_eq!(q(&mut r, extra), err(e), "{extra:?}");
    }
    for (args, e) in [
        (
            &["GEORADIUS", "Sicily", "15", "37", "-1", "km"][..],
            "ERR radius cannot be negative",
        ),
        (
            &["GEORADIUS", "Sicily", "15", "37", "x", "km"],
            "ERR need numeric radius",
        ),
        (
            &["GEORADIUS", "Sicily", "15", "37", "1", "yards"],
            "ERR unsupported unit provided. please use M, KM, FT, MI",
        ),
        (
            &["GEORADIUS", "Sicily", "181", "37", "1", "km"],
            "ERR invalid longitude,latitude pair 181.000000,37.000000",
        ),
    ] {
        assert_eq!(r.cmd(args), err(e), "{args:?}");
    }
    assert_eq!(
        r.cmd(&["GEORADIUS", "Sicily", "15", "37", "200"]),
        err("ERR wrong number of arguments for 'georadius' command")
    );
}

#[test]
fn georadiusbymember_and_the_read_only_forms() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    assert_eq!(
        r.cmd(&[
            "GEORADIUSBYMEMBER",
            "Sicily",
            "Palermo",
            "200",
            "km",
            "WITHDIST",
            "ASC"
        ]),
        rows(&[
            &["Palermo", "0.0000"],
            &["edge1", "91.4007"],
            &["Catania", "166.2742"]
        ])
    );
    assert_eq!(
        r.cmd(&["GEORADIUSBYMEMBER_RO", "Sicily", "Palermo", "100", "km"]),
        bulks(&["Palermo", "edge1"])
    );
    assert_eq!(
        r.cmd(&["GEORADIUS_RO", "Sicily", "15", "37", "200", "km", "ASC"]),
        bulks(&["Catania", "Palermo"])
    );
    assert_eq!(
        r.cmd(&["GEORADIUSBYMEMBER", "Sicily", "nope", "200", "km"]),
        err("ERR could not decode requested zset member")
    );
    // The read-only forms know no STORE.
    assert_eq!(
        r.cmd(&[
            "GEORADIUS_RO",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "STORE",
            "d"
        ]),
        err("ERR syntax error")
    );
    assert_eq!(
        r.cmd(&[
            "GEORADIUSBYMEMBER_RO",
            "Sicily",
            "Palermo",
            "1",
            "km",
            "STOREDIST",
            "d"
        ]),
        err("ERR syntax error")
    );
    assert_eq!(r.cmd(&["EXISTS", "d"]), int(0));
}

#[test]
fn geosearch_by_radius_and_by_box() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    assert_eq!(
        r.cmd(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "400",
            "400",
            "km",
            "ASC",
            "WITHDIST"
        ]),
        rows(&[
            &["Catania", "56.4413"],
            &["Palermo", "190.4424"],
            &["edge2", "279.7403"],
            &["edge1", "279.7405"]
        ])
    );
    // A circle of the same size leaves out the box's corners.
    assert_eq!(
        r.cmd(&[
            "GEOSEARCH",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "200",
            "km",
            "ASC"
        ]),
        bulks(&["Catania", "Palermo"])
    );
    assert_eq!(
        r.cmd(&[
            "GEOSEARCH",
            "Sicily",
            "FROMMEMBER",
            "Palermo",
            "BYRADIUS",
            "250",
            "km",
            "DESC",
            "WITHDIST"
        ]),
        rows(&[
            &["Catania", "166.2742"],
            &["edge1", "91.4007"],
            &["Palermo", "0.0000"]
        ])
    );
    // Options in any order, the box given in miles.
    assert_eq!(
        r.cmd(&[
            "GEOSEARCH",
            "Sicily",
            "COUNT",
            "2",
            "BYBOX",
            "250",
            "250",
            "mi",
            "FROMMEMBER",
            "Catania"
        ]),
        bulks(&["Catania", "Palermo"])
    );
}

#[test]
fn geosearch_argument_errors_come_in_redis_order() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    for (args, e) in [
        (
            &[
                "GEOSEARCH",
                "Sicily",
                "FROMLONLAT",
                "15",
                "37",
                "BYRADIUS",
                "200",
                "km",
                "BYBOX",
                "1",
                "1",
                "km",
            ][..],
            "ERR syntax error",
        ),
        (
            &[
                "GEOSEARCH",
                "Sicily",
                "FROMLONLAT",
                "1",
                "1",
                "FROMMEMBER",
                "Palermo",
                "BYRADIUS",
                "1",
                "km",
            ],
            "ERR syntax error",
        ),
        (
            &["GEOSEARCH", "Sicily", "COUNT", "1", "BYRADIUS", "200", "km"],
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for GEOSEARCH",
        ),
        // The command's name as the client spelled it.
        (
            &[
                "geosearch",
                "Sicily",
                "FROMLONLAT",
                "15",
                "37",
                "COUNT",
                "1",
            ],
            "ERR exactly one of BYRADIUS and BYBOX can be specified for geosearch",
        ),
        (
            &[
                "GEOSEARCH",
                "Sicily",
                "FROMLONLAT",
                "15",
                "37",
                "BYRADIUS",
                "200",
                "km",
                "ANY",
            ],
            "ERR the ANY argument requires COUNT argument",
        ),
        (
            &[
                "GEOSEARCH",
                "Sicily",
                "FROMMEMBER",
                "nobody",
                "BYRADIUS",
                "200",
                "km",
            ],
            "ERR could not decode requested zset member",
        ),
        (
            &[
                "GEOSEARCH",
                "Sicily",
                "FROMLONLAT",
                "1",
                "1",
                "BYBOX",
                "-1",
                "1",
                "km",
            ],
            "ERR height or width cannot be negative",
        ),
        (
            &[
                "GEOSEARCH",
                "Sicily",
                "FROMLONLAT",
                "1",
                "1",
                "BYBOX",
                "x",
                "1",
                "km",
            ],
            "ERR need numeric width",
        ),
        (
            &[
                "GEOSEARCH",
                "Sicily",
                "FROMLONLAT",
                "1",
                "1",
                "BYBOX",
                "1",
                "x",
                "km",
            ],
            "ERR need numeric height",
        ),
        (
            &[
                "GEOSEARCH",
                "Sicily",
                "FROMLONLAT",
                "1",
                "1",
                "BYRADIUS",
                "1",
                "km",
                "STOREDIST",
            ],
            "ERR syntax error",
        ),
    ] {
        assert_eq!(r.cmd(args), err(e), "{args:?}");
    }
}

#[test]
fn store_and_storedist_write_sorted_sets() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    assert_eq!(
        r.cmd(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "STORE",
            "dst"
        ]),
        int(2)
    );
    assert_eq!(
        r.cmd(&["ZRANGE", "dst", "0", "-1", "WITHSCORES"]),
        bulks(&["Palermo", "3479099956230698", "Catania", "3479447370796909"])
    );
    // STOREDIST stores the distance, in the query's unit.
    assert_eq!(
        r.cmd(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "STOREDIST",
            "dst",
            "ASC",
            "COUNT",
            "1"
        ]),
        int(1)
    );
    assert_eq!(
        r.cmd(&["ZRANGE", "dst", "0", "-1", "WITHSCORES"]),
        bulks(&["Catania", "56.441257870158204"])
    );
    assert_eq!(
        r.cmd(&[
            "GEORADIUSBYMEMBER",
            "Sicily",
            "Palermo",
            "200",
            "km",
            "STOREDIST",
            "dst"
        ]),
        int(3)
    );
    assert_eq!(
        r.cmd(&["ZRANGE", "dst", "0", "-1", "WITHSCORES"]),
        bulks(&[
            "Palermo",
            "0",
            "edge1",
            "91.400658605814272",
            "Catania",
            "166.27415156960032"
        ])
    );
    assert_eq!(
        r.cmd(&[
            "GEOSEARCHSTORE",
            "dst2",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "400",
            "400",
            "km"
        ]),
        int(4)
    );
    assert_eq!(r.cmd(&["ZCARD", "dst2"]), int(4));
    assert_eq!(
        r.cmd(&[
            "GEOSEARCHSTORE",
            "dst2",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYBOX",
            "400",
            "400",
            "km",
            "STOREDIST",
            "DESC",
            "COUNT",
            "2"
        ]),
        int(2)
    );
    assert_eq!(
        r.cmd(&["ZRANGE", "dst2", "0", "-1", "WITHSCORES"]),
        bulks(&["edge2", "279.7403417843143", "edge1", "279.74045213563431"])
    );
    // A stored result is a geo set of its own.
    r.cmd(&[
        "GEORADIUS",
        "Sicily",
        "15",
        "37",
        "200",
        "km",
        "STORE",
        "near",
    ]);
    assert_eq!(
        r.cmd(&["GEODIST", "near", "Palermo", "Catania", "km"]),
        bulk("166.2742")
    );
    // The source may be the destination.
    assert_eq!(
        r.cmd(&[
            "GEORADIUS",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "STORE",
            "Sicily"
        ]),
        int(2)
    );
    assert_eq!(
        r.cmd(&["ZRANGE", "Sicily", "0", "-1"]),
        bulks(&["Palermo", "Catania"])
    );
    // STORE takes no WITH* options, and stores nothing then.
    assert_eq!(
        r.cmd(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "x", "WITHDIST"]),
        err("ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
    );
    assert_eq!(
        r.cmd(&[
            "GEOSEARCHSTORE",
            "x",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "1",
            "km",
            "WITHCOORD"
        ]),
        err("ERR GEOSEARCHSTORE is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
    );
    assert_eq!(
        r.cmd(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE"]),
        err("ERR syntax error")
    );
    assert_eq!(r.cmd(&["EXISTS", "x"]), int(0));
}

#[test]
fn an_empty_result_or_a_missing_source_deletes_the_destination() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    r.cmd(&["SET", "d1", "string"]);
    assert_eq!(
        r.cmd(&["GEORADIUS", "Sicily", "100", "0", "1", "km", "STORE", "d1"]),
        int(0)
    );
    assert_eq!(r.cmd(&["EXISTS", "d1"]), int(0));
    r.cmd(&["SET", "d2", "string"]);
    assert_eq!(
        r.cmd(&[
            "GEOSEARCHSTORE",
            "d2",
            "nosuch",
            "FROMMEMBER",
            "x",
            "BYRADIUS",
            "1",
            "m"
        ]),
        int(0)
    );
    assert_eq!(r.cmd(&["EXISTS", "d2"]), int(0));
    // Without a source, GEORADIUSBYMEMBER reads neither radius nor unit.
    assert_eq!(
        r.cmd(&["GEORADIUSBYMEMBER", "nokey", "m", "abc", "xx"]),
        empty()
    );
    assert_eq!(
        r.cmd(&["GEORADIUS", "nokey", "15", "37", "200", "km"]),
        empty()
    );
    assert_eq!(
        r.cmd(&[
            "GEOSEARCH",
            "nokey",
            "FROMMEMBER",
            "m",
            "BYBOX",
            "1",
            "1",
            "km"
        ]),
        empty()
    );
}

#[test]
fn points_at_the_limits_and_across_the_antimeridian_match_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&[
        "GEOADD",
        "w",
        "179.99",
        "0",
        "east",
        "-179.99",
        "0",
        "west",
        "0",
        "0",
        "null",
        "180",
        "85.05112878",
        "corner",
        "-180",
        "-85.05112878",
        "south",
    ]);
    // A circle across the antimeridian finds both sides.
    assert_eq!(
        r.cmd(&[
            "GEORADIUS",
            "w",
            "-179.999",
            "0",
            "5",
            "km",
            "ASC",
            "WITHDIST"
        ]),
        rows(&[&["west", "1.0013"], &["east", "1.2237"]])
    );
    // A box centred on it does not (Redis's cells do not reach across).
    assert_eq!(
        r.cmd(&[
            "GEOSEARCH",
            "w",
            "FROMLONLAT",
            "180",
            "0",
            "BYBOX",
            "10",
            "10",
            "km",
            "ASC"
        ]),
        bulks(&["east"])
    );
    assert_eq!(
        r.cmd(&["GEOPOS", "w", "corner", "south"]),
        arr(vec![
            bulks(&["180", "85.0511287799999991"]),
            bulks(&["-179.99999731779098511", "-85.05112751263942528"])
        ])
    );
    assert_eq!(
        r.cmd(&["GEOHASH", "w", "corner", "south", "null"]),
        bulks(&["bp05b5048p0", "00bh0hbj200", "s0000000000"])
    );
    assert_eq!(
        r.cmd(&["GEODIST", "w", "east", "west", "km"]),
        bulk("2.2250")
    );
    assert_eq!(
        r.cmd(&[
            "GEORADIUS",
            "w",
            "0",
            "0",
            "30000",
            "km",
            "COUNT",
            "3",
            "DESC"
        ]),
        bulks(&["east", "west", "south"])
    );
    // A point is the centre of its cell, so not at distance 0 of itself.
    assert_eq!(
        r.cmd(&["GEORADIUS", "w", "0", "0", "0", "m", "WITHDIST"]),
        empty()
    );
}

#[test]
fn plain_sorted_set_scores_decode_as_redis_does() {
    let s = TestServer::start();
    let mut r = s.raw();
    r.cmd(&[
        "GEOADD",
        "w",
        "0",
        "0",
        "null",
        "-180",
        "-85.05112878",
        "south",
    ]);
    r.cmd(&["ZADD", "w", "-1", "neg", "inf", "pinf", "1.5", "f"]);
    assert_eq!(
        r.cmd(&["GEOPOS", "w", "neg", "pinf", "f"]),
        arr(vec![
            bulks(&["180", "85.0511287799999991"]),
            bulks(&["-179.99999731779098511", "-85.05112751263942528"]),
            bulks(&["-179.99999731779098511", "-85.05112497791824921"])
        ])
    );
    assert_eq!(
        r.cmd(&[
            "GEORADIUS",
            "w",
            "0",
            "0",
            "30000",
            "km",
            "WITHHASH",
            "ASC",
            "COUNT",
            "2"
        ]),
        arr(vec![
            arr(vec![bulk("null"), int(3377699720527872)]),
            arr(vec![bulk("south"), int(0)])
        ])
    );
}

#[test]
fn ties_under_count_come_out_in_redis_order() {
    // Redis sorts a COUNT-limited result with its partial quicksort, which
    // does not keep the order of equal distances: "\0\xff" and "" share a
    // place (found by difftest, seed 57718).
    let s = TestServer::start();
    let mut r = s.raw();
    let adds: [&[&[u8]]; 3] = [
        &[
            b"GEOADD",
            b"k0",
            b"180",
            b"21.262782195",
            b"b",
            b"179.989869",
            b"-0.140375",
            b"a b",
        ],
        &[
            b"GEOADD",
            b"k0",
            b"-122.419400",
            b"37.774900",
            b"\x00\xff",
            b"179.9999999",
            b"42.525564",
            b"a",
            b"-180.000000",
            b"-0.500000",
            b"1",
        ],
        &[
            b"GEOADD",
            b"k0",
            b"-122.419400",
            b"37.774900",
            b"",
            b"179.9999999",
            b"21.262782195",
            b"c",
            b"179.990000",
            b"0.499906",
            b"d",
        ],
    ];
    for a in adds {
        r.send_cmd(a);
        assert!(matches!(r.read(), Frame::Integer(_)));
    }
    let bin = |b: &[u8]| Frame::Bulk(b.to_vec());
    let q = |r: &mut Raw, count: &str| {
        r.cmd(&[
            "GEORADIUS",
            "k0",
            "2.350000",
            "48.843789",
            "120000",
            "km",
            "COUNT",
            count,
        ])
    };
    assert_eq!(
        q(&mut r, "5"),
        arr(vec![
            bin(b"\x00\xff"),
            bin(b""),
            bin(b"a"),
            bin(b"c"),
            bin(b"d")
        ])
    );
    // All of them: a stable sort, the found order kept.
    assert_eq!(
        q(&mut r, "7"),
        arr(vec![
            bin(b""),
            bin(b"\x00\xff"),
            bin(b"a"),
            bin(b"c"),
            bin(b"d"),
            bin(b"a b"),
            bin(b"1")
        ])
    );
}

#[test]
fn wrong_types_are_refused_and_change_nothing() {
    let s = TestServer::start();
    let mut r = s.raw();
    sicily(&mut r);
    r.cmd(&["SET", "str", "x"]);
    for args in [
        &["GEOADD", "str", "1", "1", "a"][..],
        &["GEOPOS", "str", "a"],
        &["GEOHASH", "str", "a"],
        &["GEODIST", "str", "a", "b"],
        &["GEORADIUS", "str", "1", "1", "1", "km"],
        &["GEORADIUS_RO", "str", "1", "1", "1", "km"],
        // The source's type is checked before the arguments are read.
        &["GEORADIUS", "str", "1000", "1", "x", "km"],
        &["GEORADIUSBYMEMBER", "str", "a", "1", "km"],
        &["GEORADIUSBYMEMBER_RO", "str", "a", "1", "km"],
        &[
            "GEOSEARCH",
            "str",
            "FROMLONLAT",
            "1",
            "1",
            "BYRADIUS",
            "1",
            "km",
        ],
        &[
            "GEOSEARCHSTORE",
            "dst",
            "str",
            "FROMLONLAT",
            "1",
            "1",
            "BYRADIUS",
            "1",
            "km",
        ],
    ] {
        assert_eq!(r.cmd(args), err(WRONGTYPE), "{args:?}");
    }
    assert_eq!(r.cmd(&["GET", "str"]), bulk("x"));
    assert_eq!(r.cmd(&["EXISTS", "dst"]), int(0));
    // Coordinates are checked before the key's type.
    assert_eq!(
        r.cmd(&["GEOADD", "str", "200", "1", "a"]),
        err("ERR invalid longitude,latitude pair 200.000000,1.000000")
    );
    // A destination of another type is simply replaced.
    assert_eq!(
        r.cmd(&[
            "GEOSEARCHSTORE",
            "str",
            "Sicily",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "100",
            "km"
        ]),
        int(1)
    );
    assert_eq!(r.cmd(&["TYPE", "str"]), Frame::Simple(b"zset".to_vec()));
    assert_eq!(r.cmd(&["ZCARD", "Sicily"]), int(4));
}

/// A subscriber to every key-event channel.
fn events(s: &TestServer) -> Raw {
    let mut ctl = s.raw();
    assert_eq!(
        ctl.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]),
        ok()
    );
    let mut sub = s.raw();
    sub.send_cmd(&[b"PSUBSCRIBE", b"__keyevent@0__:*"]);
    let _ = sub.read();
    sub
}

/// The next `n` events as `event key`.
fn next_events(sub: &mut Raw, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let Frame::Array(items) = sub.read() else {
                panic!("not a message");
            };
            let text = |f: &Frame| match f {
                Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("not a bulk: {other:?}"),
            };
            let channel = text(&items[2]);
            let event = channel.rsplit(':').next().unwrap().to_string();
            format!("{event} {}", text(&items[3]))
        })
        .collect()
}

#[test]
fn keyspace_events_are_redis_s() {
    let s = TestServer::start();
    let mut sub = events(&s);
    let mut r = s.raw();
    sicily(&mut r);
    // GEOADD is ZADD to Redis, also in its events.
    assert_eq!(next_events(&mut sub, 1), vec!["zadd Sicily"]);
    r.cmd(&["GEOADD", "Sicily", "CH", "1", "1", "Palermo"]);
    assert_eq!(next_events(&mut sub, 1), vec!["zadd Sicily"]);
    r.cmd(&["GEORADIUS", "Sicily", "15", "37", "200", "km", "STORE", "d"]);
    assert_eq!(next_events(&mut sub, 1), vec!["georadiusstore d"]);
    r.cmd(&[
        "GEOSEARCHSTORE",
        "d2",
        "Sicily",
        "FROMLONLAT",
        "15",
        "37",
        "BYRADIUS",
        "1000",
        "km",
    ]);
    assert_eq!(next_events(&mut sub, 1), vec!["geosearchstore d2"]);
    r.cmd(&[
        "GEORADIUS",
        "Sicily",
        "50",
        "50",
        "1",
        "m",
        "STOREDIST",
        "d",
    ]);
    assert_eq!(next_events(&mut sub, 1), vec!["del d"]);
    // A read, an unchanged GEOADD and a failed one publish nothing.
    r.cmd(&["GEORADIUS", "Sicily", "15", "37", "200", "km"]);
    r.cmd(&["GEOADD", "Sicily", "NX", "1", "1", "Palermo"]);
    r.cmd(&["GEOADD", "Sicily", "1", "100", "x"]);
    r.cmd(&["PUBLISH", "__keyevent@0__:marker", "m"]);
    let Frame::Array(items) = sub.read() else {
        panic!("not a message");
    };
    assert_eq!(items[2], bulk("__keyevent@0__:marker"));
}

#[test]
fn geo_sets_survive_restart() {
    let s = TestServer::start();
    {
        let mut r = s.raw();
        sicily(&mut r);
        r.cmd(&[
            "GEOSEARCHSTORE",
            "near",
            "Sicily",
            "FROMMEMBER",
            "Palermo",
            "BYRADIUS",
            "100",
            "km",
            "STOREDIST",
        ]);
    }
    let s = s.restart();
    let mut r = s.raw();
    assert_eq!(
        r.cmd(&["GEOPOS", "Sicily", "Palermo"]),
        arr(vec![bulks(&[
            "13.36138933897018433",
            "38.11555639549629859"
        ])])
    );
    assert_eq!(
        r.cmd(&[
            "GEORADIUSBYMEMBER",
            "Sicily",
            "Palermo",
            "200",
            "km",
            "WITHDIST",
            "ASC"
        ]),
        rows(&[
            &["Palermo", "0.0000"],
            &["edge1", "91.4007"],
            &["Catania", "166.2742"]
        ])
    );
    assert_eq!(
        r.cmd(&["ZRANGE", "near", "0", "-1", "WITHSCORES"]),
        bulks(&["Palermo", "0", "edge1", "91.400658605814272"])
    );
}

#[test]
fn command_info_matches_redis() {
    let s = TestServer::start();
    let mut r = s.raw();
    let head = |r: &mut Raw, name: &str| -> Vec<Frame> {
        let Frame::Array(mut rows) = r.cmd(&["COMMAND", "INFO", name]) else {
            panic!("not an array");
        };
        let Frame::Array(info) = rows.remove(0) else {
            panic!("{name} unknown");
        };
        info.into_iter().take(6).collect()
    };
    let flags = |names: &[&str]| {
        arr(names
            .iter()
            .map(|n| Frame::Simple(n.as_bytes().to_vec()))
            .collect())
    };
    for (name, arity, f, keys) in [
        ("geoadd", -5, &["write", "denyoom"][..], (1, 1, 1)),
        ("geodist", -4, &["readonly"], (1, 1, 1)),
        ("geohash", -2, &["readonly"], (1, 1, 1)),
        ("geopos", -2, &["readonly"], (1, 1, 1)),
        (
            "georadius",
            -6,
            &["write", "denyoom", "movablekeys"],
            (1, 1, 1),
        ),
        (
            "georadiusbymember",
            -5,
            &["write", "denyoom", "movablekeys"],
            (1, 1, 1),
        ),
        ("georadius_ro", -6, &["readonly"], (1, 1, 1)),
        ("georadiusbymember_ro", -5, &["readonly"], (1, 1, 1)),
        ("geosearch", -7, &["readonly"], (1, 1, 1)),
        ("geosearchstore", -8, &["write", "denyoom"], (1, 2, 1)),
    ] {
        assert_eq!(
            head(&mut r, name),
            vec![
                bulk(name),
                int(arity),
                flags(f),
                int(keys.0),
                int(keys.1),
                int(keys.2)
            ],
            "{name}"
        );
    }
}
