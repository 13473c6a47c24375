//! Geospatial indexes (Redis `geo.c`, `geohash.c`, `geohash_helper.c`):
//! GEOADD, GEODIST, GEOHASH, GEOPOS, the GEORADIUS family and GEOSEARCH.
//!
//! A point is a member of an ordinary sorted set whose score is its 52-bit
//! geohash: longitude (-180..180) and latitude (-85.05112878..85.05112878,
//! the Web Mercator limits) each cut into 2^26 steps, the longitude bits in
//! the odd positions and the latitude bits in the even ones. So a geo key
//! *is* a sorted set: GEOADD is ZADD with computed scores (through the
//! zset write path, with ZADD's events), and every read goes through the
//! sorted set's index (`zindex.rs`).
//!
//! The one idea a reader needs: a search never scans the set. It picks a
//! geohash precision from the radius (or the box's half-diagonal), takes
//! the cell holding the centre and its 8 neighbours, asks the index for the
//! score range of each cell (a cell is a contiguous score range), and keeps
//! the points whose distance passes the shape test. Which points a search
//! sees, and in which order they come out, follows Redis step for step (the
//! same cells in the same order, the same floating-point expressions, the
//! same partial sort for COUNT), so results match redis-server 7.0 also at
//! the edges: points on a cell border, centres near the poles or the
//! antimeridian, ties in distance.

use basalt_resp::{Args, Protocol};

use super::flags::*;
use super::zset::{parse_score, read, stored_events, zadd_scored, ZDb};
use super::{def, int_arg, is, CommandDef, Ctx, Error, Group, Result};
use crate::zindex::{ScoreRange, ZIndex};

const G: Group = Group::Geo;

/// The geo family's table (arity, flags and key positions as Redis 7.0's
/// COMMAND INFO shows them: the GEORADIUS forms that may STORE are write
/// commands with movable keys).
#[rustfmt::skip]
pub const COMMANDS: &[CommandDef] = &[
    def("geoadd", -5, WRITE | DENYOOM, (1, 1, 1), G, "3.2.0", "Add one or more geospatial items in the geospatial index represented using a sorted set", geoadd),
    def("geodist", -4, READONLY, (1, 1, 1), G, "3.2.0", "Returns the distance between two members of a geospatial index", geodist),
    def("geohash", -2, READONLY, (1, 1, 1), G, "3.2.0", "Returns members of a geospatial index as standard geohash strings", geohash),
    def("geopos", -2, READONLY, (1, 1, 1), G, "3.2.0", "Returns longitude and latitude of members of a geospatial index", geopos),
    def("georadius", -6, WRITE | DENYOOM | MOVABLE_KEYS, (1, 1, 1), G, "3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a point", georadius),
    def("georadiusbymember", -5, WRITE | DENYOOM | MOVABLE_KEYS, (1, 1, 1), G, "3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a member", georadiusbymember),
    def("georadius_ro", -6, READONLY, (1, 1, 1), G, "3.2.10", "A read-only variant for GEORADIUS", georadius_ro),
    def("georadiusbymember_ro", -5, READONLY, (1, 1, 1), G, "3.2.10", "A read-only variant for GEORADIUSBYMEMBER", georadiusbymember_ro),
    def("geosearch", -7, READONLY, (1, 1, 1), G, "6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.", geosearch),
    def("geosearchstore", -8, WRITE | DENYOOM, (1, 2, 1), G, "6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, and store the result in another key.", geosearchstore),
];

// ---------------------------------------------------------------------------
// Geohash arithmetic. Every expression keeps Redis's operand order: the
// scores, the cells a search visits and the distances must be the same
// doubles, not merely close ones.

const LON_MIN: f64 = -180.0;
const LON_MAX: f64 = 180.0;
const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
/// Bits per coordinate of a stored point.
const STEP_MAX: u8 = 26;
/// The earth's quadratic mean radius (WGS-84), as Redis uses it.
const EARTH_RADIUS_M: f64 = 6372797.560856;
/// Half the earth's circumference in Web Mercator metres.
const MERCATOR_MAX: f64 = 20037726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;
const EVEN: u64 = 0x5555_5555_5555_5555;
const ODD: u64 = 0xaaaa_aaaa_aaaa_aaaa;

fn deg_rad(deg: f64) -> f64 {
    deg * D_R
}

fn rad_deg(rad: f64) -> f64 {
    rad / D_R
}

/// A geohash cell: `2 * step` interleaved bits. The all-zero value (step 0)
/// marks a neighbour the search leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cell {
    bits: u64,
    step: u8,
}

impl Cell {
    const NONE: Cell = Cell { bits: 0, step: 0 };

    fn is_none(self) -> bool {
        self == Cell::NONE
    }

    /// The 52-bit score of the cell's first point.
    fn align52(self) -> u64 {
        self.bits << (52 - u32::from(self.step) * 2)
    }

    /// The scores of the cell's points: `[min, max)`.
    fn score_range(self) -> ScoreRange {
        let next = Cell {
            bits: self.bits.wrapping_add(1),
            step: self.step,
        };
        ScoreRange {
            min: self.align52() as f64,
            min_ex: false,
            max: next.align52() as f64,
            max_ex: true,
        }
    }
}

/// The bits of `v` spread to the even positions of a u64.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & EVEN
}

/// The even bits of `x` packed together: the inverse of [`spread`].
fn squash(x: u64) -> u32 {
    let mut x = x & EVEN;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x >> 4)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x >> 8)) & 0x0000_ffff_0000_ffff;
    ((x | (x >> 16)) & 0xffff_ffff) as u32
}

/// The cell of `step` bits per coordinate holding (lon, lat), latitudes
/// scaled over `lat_lo..lat_hi`; `None` outside the indexable area.
fn encode(lon: f64, lat: f64, step: u8, lat_lo: f64, lat_hi: f64) -> Option<Cell> {
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    let lat_off = (lat - lat_lo) / (lat_hi - lat_lo) * (1u64 << step) as f64;
    let lon_off = (lon - LON_MIN) / (LON_MAX - LON_MIN) * (1u64 << step) as f64;
    // C's double -> uint32_t: truncation (the offsets are in 0..=2^step).
    Some(Cell {
        bits: spread(lat_off as u32) | (spread(lon_off as u32) << 1),
        step,
    })
}

/// A cell's extent in degrees.
#[derive(Debug, Clone, Copy)]
struct Area {
    lon_min: f64,
    lon_max: f64,
    lat_min: f64,
    lat_max: f64,
}

fn decode(cell: Cell, lat_lo: f64, lat_hi: f64) -> Area {
    let ilat = squash(cell.bits);
    let ilon = squash(cell.bits >> 1);
    let div = (1u64 << cell.step) as f64;
    let (lat_scale, lon_scale) = (lat_hi - lat_lo, LON_MAX - LON_MIN);
    // `+ 1` in 32 bits, as Redis's uint32_t arithmetic.
    Area {
        lat_min: lat_lo + (f64::from(ilat) / div) * lat_scale,
        lat_max: lat_lo + (f64::from(ilat.wrapping_add(1)) / div) * lat_scale,
        lon_min: LON_MIN + (f64::from(ilon) / div) * lon_scale,
        lon_max: LON_MIN + (f64::from(ilon.wrapping_add(1)) / div) * lon_scale,
    }
}

/// x86-64's `cvttsd2si`: truncation, or `i64::MIN` for NaN and values out
/// of range.
fn cvtt(x: f64) -> i64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if x.is_nan() || !(-TWO63..TWO63).contains(&x) {
        i64::MIN
    } else {
        x as i64
    }
}

/// A score's geohash bits as Redis's `(uint64_t)score` gives them on
/// x86-64 (gcc): a geo command reads any sorted set, and a score that ZADD
/// put there may be negative, fractional or huge.
fn score_bits(score: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if score < TWO63 {
        cvtt(score) as u64
    } else {
        (cvtt(score - TWO63) as u64) ^ (1 << 63)
    }
}

/// The position a score stands for: the centre of its step-26 cell,
/// clamped to the indexable area.
fn position(score: f64) -> (f64, f64) {
    let a = decode(
        Cell {
            bits: score_bits(score),
            step: STEP_MAX,
        },
        LAT_MIN,
        LAT_MAX,
    );
    let lon = ((a.lon_min + a.lon_max) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((a.lat_min + a.lat_max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// The score GEOADD stores for a (valid) position.
fn score_of(lon: f64, lat: f64) -> u64 {
    encode(lon, lat, STEP_MAX, LAT_MIN, LAT_MAX).map_or(0, Cell::align52)
}

/// GEOHASH's string: the position re-encoded over the standard latitude
/// range (-90..90), ten base-32 characters of its 52 bits and a final `0`.
fn geohash_string(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = position(score);
    let bits = encode(lon, lat, STEP_MAX, -90.0, 90.0).map_or(0, |c| c.bits);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().take(10).enumerate() {
        *c = ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    out
}

/// Moves a cell by `dx` (longitude) and `dy` (latitude) in {-1, 0, 1},
/// wrapping around at the edges.
fn shift(cell: Cell, dx: i8, dy: i8) -> Cell {
    let unused = 64 - u32::from(cell.step) * 2;
    let step_one = |part: u64, mask: u64, d: i8| -> u64 {
        // `fill` sets the other coordinate's bits so a carry runs through.
        let fill = !mask >> unused;
        let part = match d {
            0 => return part,
            1.. => part.wrapping_add(fill + 1),
            _ => (part | fill).wrapping_sub(fill + 1),
        };
        part & (mask >> unused)
    };
    let x = step_one(cell.bits & ODD, ODD, dx);
    let y = step_one(cell.bits & EVEN, EVEN, dy);
    Cell {
        bits: x | y,
        step: cell.step,
    }
}

/// Latitude difference in metres along a meridian.
fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// Great-circle distance in metres (haversine), with Redis's shortcut when
/// the longitudes are the same.
fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (deg_rad(lon1), deg_rad(lon2));
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (deg_rad(lat1), deg_rad(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// A search area: a circle or an axis-aligned box, in the unit `unit`
/// metres long.
#[derive(Debug, Clone, Copy)]
enum Form {
    Radius(f64),
    Box { width: f64, height: f64 },
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    lon: f64,
    lat: f64,
    form: Form,
    /// Metres per unit.
    unit: f64,
}

impl Shape {
    /// `[min lon, min lat, max lon, max lat]` of the area. A box's sides
    /// bend (a degree of longitude shrinks towards the poles), so the
    /// longitudes are taken on the side nearer the pole.
    fn bounds(&self) -> [f64; 4] {
        let (height, width) = match self.form {
            Form::Radius(r) => (self.unit * r, self.unit * r),
            Form::Box { width, height } => (self.unit * (height / 2.0), self.unit * (width / 2.0)),
        };
        let lat_delta = rad_deg(height / EARTH_RADIUS_M);
        let top = rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat + lat_delta).cos());
        let bottom = rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat - lat_delta).cos());
        let lon_delta = if self.lat < 0.0 { bottom } else { top };
        [
            self.lon - lon_delta,
            self.lat - lat_delta,
            self.lon + lon_delta,
            self.lat + lat_delta,
        ]
    }

    /// Whether the point of `score` is inside; its position and distance
    /// from the centre (metres) if so.
    fn take(&self, score: f64) -> Option<(f64, f64, f64)> {
        let (lon, lat) = position(score);
        let dist = match self.form {
            Form::Radius(r) => {
                let d = distance(self.lon, self.lat, lon, lat);
                // A NaN distance is kept, as in Redis.
                if d > r * self.unit {
                    return None;
                }
                d
            }
            Form::Box { width, height } => {
                if lat_distance(lat, self.lat) > height * self.unit / 2.0 {
                    return None;
                }
                if distance(lon, lat, self.lon, lat) > width * self.unit / 2.0 {
                    return None;
                }
                distance(self.lon, self.lat, lon, lat)
            }
        };
        Some((lon, lat, dist))
    }

    /// The cells to search, in Redis's order: the centre's, then north,
    /// south, east, west, north-east, north-west, south-east, south-west;
    /// [`Cell::NONE`] for a neighbour the area cannot reach.
    fn cells(&self) -> [Cell; 9] {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounds();
        let reach = match self.form {
            Form::Radius(r) => r,
            Form::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        } * self.unit;
        let mut step = estimate_step(reach, self.lat);
        let at = |step: u8| {
            encode(self.lon, self.lat, step, LAT_MIN, LAT_MAX).unwrap_or(Cell { bits: 0, step })
        };
        let mut centre = at(step);
        // One step coarser when a side neighbour does not reach the
        // bounding box.
        let area = |c: Cell| decode(c, LAT_MIN, LAT_MAX);
        if step > 1
            && (area(shift(centre, 0, 1)).lat_max < max_lat
                || area(shift(centre, 0, -1)).lat_min > min_lat
                || area(shift(centre, 1, 0)).lon_max < max_lon
                || area(shift(centre, -1, 0)).lon_min > min_lon)
        {
            step -= 1;
            centre = at(step);
        }
        let mut out = [
            centre,
            shift(centre, 0, 1),
            shift(centre, 0, -1),
            shift(centre, 1, 0),
            shift(centre, -1, 0),
            shift(centre, 1, 1),
            shift(centre, -1, 1),
            shift(centre, 1, -1),
            shift(centre, -1, -1),
        ];
        // Leave out the neighbours beyond a side the bounding box does not
        // cross.
        if step >= 2 {
            let c = area(centre);
            let mut drop = |which: [usize; 3]| which.iter().for_each(|&i| out[i] = Cell::NONE);
            if c.lat_min < min_lat {
                drop([2, 8, 7]);
            }
            if c.lat_max > max_lat {
                drop([1, 5, 6]);
            }
            if c.lon_min < min_lon {
                drop([4, 8, 6]);
            }
            if c.lon_max > max_lon {
                drop([3, 7, 5]);
            }
        }
        out
    }
}

/// The geohash precision whose cells are about as big as `range_m`.
fn estimate_step(mut range_m: f64, lat: f64) -> u8 {
    if range_m == 0.0 {
        return STEP_MAX;
    }
    let mut step: i32 = 1;
    while range_m < MERCATOR_MAX {
        range_m *= 2.0;
        step += 1;
    }
    step -= 2;
    // Cells narrow towards the poles.
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, i32::from(STEP_MAX)) as u8
}

/// A point a search found.
#[derive(Debug, Clone)]
struct Hit {
    member: Vec<u8>,
    score: f64,
    lon: f64,
    lat: f64,
    dist: f64,
}

/// The points inside `shape`, cell by cell and in score order within a
/// cell; with a `limit` (COUNT ... ANY) it stops once it has that many. A
/// neighbour equal to the one searched just before it is skipped (huge
/// radii make neighbours coincide), and only that one, as in Redis.
fn collect(ix: &ZIndex, shape: &Shape, limit: usize) -> Vec<Hit> {
    let cells = shape.cells();
    let full = |hits: &Vec<Hit>| limit > 0 && hits.len() >= limit;
    let mut hits = Vec::new();
    let mut last = 0;
    for (i, &cell) in cells.iter().enumerate() {
        if cell.is_none() || (last != 0 && cell == cells[last]) {
            continue;
        }
        if full(&hits) {
            break;
        }
        let range = cell.score_range();
        let mut cur = ix.first_in_score(&range);
        while let Some(id) = cur {
            let (member, score) = ix.entry(id);
            if !range.lte_max(score) {
                break;
            }
            if let Some((lon, lat, dist)) = shape.take(score) {
                hits.push(Hit {
                    member: member.to_vec(),
                    score,
                    lon,
                    lat,
                    dist,
                });
            }
            if full(&hits) {
                break;
            }
            cur = ix.next(id);
        }
        last = i;
    }
    hits
}

// ---------------------------------------------------------------------------
// Sorting by distance. Redis sorts with glibc's qsort (a stable merge sort)
// when it returns every hit, and with its own partial quicksort (`pqsort`,
// Bentley & McIlroy's) when COUNT cuts the list: equal distances come out
// in the order those algorithms leave them, so both are followed exactly.

/// Redis's comparator: -1, 0 or 1; a NaN compares as smaller.
fn cmp_dist(a: &Hit, b: &Hit, desc: bool) -> i32 {
    let c = if a.dist > b.dist {
        1
    } else if a.dist == b.dist {
        0
    } else {
        -1
    };
    if desc {
        -c
    } else {
        c
    }
}

/// Sorts `hits` so that the first `keep` are in order.
fn sort_hits(hits: &mut Vec<Hit>, desc: bool, keep: usize) {
    let cmp = |a: &Hit, b: &Hit| cmp_dist(a, b, desc);
    if keep == hits.len() {
        // Through a permutation: a merge step moves indices, not members.
        let mut order: Vec<usize> = (0..hits.len()).collect();
        merge_sort(&mut order, &|&a: &usize, &b: &usize| {
            cmp(&hits[a], &hits[b])
        });
        let mut slots: Vec<Option<Hit>> = hits.drain(..).map(Some).collect();
        hits.extend(order.into_iter().filter_map(|i| slots[i].take()));
    } else if keep > 0 {
        let n = hits.len();
        partial_sort(hits, 0, n, &cmp, keep - 1);
    }
}

/// glibc's qsort: a top-down merge sort (halves of `n / 2` and the rest;
/// ties keep the left element first). Unlike `slice::sort_by` it accepts
/// the inconsistent answers a NaN distance gives, and orders them as
/// glibc does.
fn merge_sort<T: Copy>(v: &mut [T], cmp: &impl Fn(&T, &T) -> i32) {
    let n = v.len();
    if n <= 1 {
        return;
    }
    let half = n / 2;
    merge_sort(&mut v[..half], cmp);
    merge_sort(&mut v[half..], cmp);
    let mut merged = Vec::with_capacity(n);
    let (mut i, mut j) = (0, half);
    while i < half && j < n {
        if cmp(&v[i], &v[j]) <= 0 {
            merged.push(v[i]);
            i += 1;
        } else {
            merged.push(v[j]);
            j += 1;
        }
    }
    merged.extend_from_slice(&v[i..half]);
    // What is left of the right half is already in place.
    v[..merged.len()].copy_from_slice(&merged);
}

fn insertion_sort<T>(v: &mut [T], a: usize, n: usize, cmp: &impl Fn(&T, &T) -> i32) {
    for m in a + 1..a + n {
        let mut l = m;
        while l > a && cmp(&v[l - 1], &v[l]) > 0 {
            v.swap(l, l - 1);
            l -= 1;
        }
    }
}

fn med3<T>(v: &[T], a: usize, b: usize, c: usize, cmp: &impl Fn(&T, &T) -> i32) -> usize {
    if cmp(&v[a], &v[b]) < 0 {
        if cmp(&v[b], &v[c]) < 0 {
            b
        } else if cmp(&v[a], &v[c]) < 0 {
            c
        } else {
            a
        }
    } else if cmp(&v[b], &v[c]) > 0 {
        b
    } else if cmp(&v[a], &v[c]) < 0 {
        a
    } else {
        c
    }
}

/// Redis 7.0's `pqsort` of `v[a..a + n]`: a quicksort with three-way
/// partitioning that only recurses into the parts holding positions
/// `0..=last`, leaving those sorted and the rest in partition order. (7.0
/// dropped the BSD switch to insertion sort after a pass without swaps, so
/// ties come out differently from older versions.)
fn partial_sort<T>(
    v: &mut [T],
    mut a: usize,
    mut n: usize,
    cmp: &impl Fn(&T, &T) -> i32,
    last: usize,
) {
    loop {
        if n < 7 {
            insertion_sort(v, a, n, cmp);
            return;
        }
        let mut pm = a + n / 2;
        if n > 7 {
            let mut pl = a;
            let mut pn = a + n - 1;
            if n > 40 {
                let d = n / 8;
                pl = med3(v, pl, pl + d, pl + 2 * d, cmp);
                pm = med3(v, pm - d, pm, pm + d, cmp);
                pn = med3(v, pn - 2 * d, pn - d, pn, cmp);
            }
            pm = med3(v, pl, pm, pn, cmp);
        }
        v.swap(a, pm);
        let (mut pa, mut pb) = (a + 1, a + 1);
        let (mut pc, mut pd) = (a + n - 1, a + n - 1);
        loop {
            while pb <= pc {
                let r = cmp(&v[pb], &v[a]);
                if r > 0 {
                    break;
                }
                if r == 0 {
                    v.swap(pa, pb);
                    pa += 1;
                }
                pb += 1;
            }
            while pb <= pc {
                let r = cmp(&v[pc], &v[a]);
                if r < 0 {
                    break;
                }
                if r == 0 {
                    v.swap(pc, pd);
                    pd -= 1;
                }
                pc -= 1;
            }
            if pb > pc {
                break;
            }
            v.swap(pb, pc);
            pb += 1;
            pc -= 1;
        }
        let end = a + n;
        let r = (pa - a).min(pb - pa);
        for k in 0..r {
            v.swap(a + k, pb - r + k);
        }
        let r = (pd - pc).min(end - pd - 1);
        for k in 0..r {
            v.swap(pb + k, end - r + k);
        }
        let r = pb - pa;
        if r > 1 && a <= last {
            partial_sort(v, a, r, cmp, last);
        }
        let r = pd - pc;
        if r > 1 && end - r <= last {
            a = end - r;
            n = r;
            continue;
        }
        return;
    }
}

// ---------------------------------------------------------------------------
// Number formats.

/// A distance as Redis 7.0 prints it (`fixedpoint_d2string`, 4 digits):
/// the value times 10^4 rounded half to even, then placed around a dot.
fn distance_text(d: f64) -> String {
    if d == 0.0 {
        return "0.0000".into();
    }
    // llrint: NaN and values out of range give i64::MIN.
    let scaled = (d * 10000.0).round_ties_even();
    let v = if scaled.is_nan()
        || !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&scaled)
    {
        i64::MIN
    } else {
        scaled as i64
    };
    let sign = if v < 0 { "-" } else { "" };
    let u = v.unsigned_abs();
    format!("{sign}{}.{:04}", u / 10000, u % 10000)
}

/// A coordinate as Redis prints it (`%.17Lf` with trailing zeros cut).
fn coord_text(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let mut s = format!("{v:.17}");
    if s.contains('.') {
        let keep = s.trim_end_matches('0').trim_end_matches('.').len();
        s.truncate(keep);
    }
    if s == "-0" {
        s = "0".into();
    }
    s
}

/// C's `%f`.
fn printf_f(v: f64) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    format!("{v:.6}")
}

fn coord_reply(ctx: &mut Ctx<'_>, v: f64) {
    let text = coord_text(v);
    match ctx.conn.protocol {
        Protocol::Resp2 => ctx.bulk(text.as_bytes()),
        Protocol::Resp3 => {
            ctx.out.push(b',');
            ctx.out.extend_from_slice(text.as_bytes());
            ctx.out.extend_from_slice(b"\r\n");
        }
    }
}

// ---------------------------------------------------------------------------
// Arguments.

/// A longitude and a latitude inside the indexable area.
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64)> {
    let lon = parse_score(lon).ok_or(Error::NotFloat)?;
    let lat = parse_score(lat).ok_or(Error::NotFloat)?;
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return Err(Error::err(format!(
            "invalid longitude,latitude pair {},{}",
            printf_f(lon),
            printf_f(lat)
        )));
    }
    Ok((lon, lat))
}

/// Metres per `unit`.
fn unit(unit: &[u8]) -> Result<f64> {
    [("m", 1.0), ("km", 1000.0), ("ft", 0.3048), ("mi", 1609.34)]
        .into_iter()
        .find(|(name, _)| is(unit, name))
        .map(|(_, m)| m)
        .ok_or_else(|| Error::err("unsupported unit provided. please use M, KM, FT, MI"))
}

fn radius(r: &[u8], u: &[u8]) -> Result<(Form, f64)> {
    let r = parse_score(r).ok_or_else(|| Error::err("need numeric radius"))?;
    if r < 0.0 {
        return Err(Error::err("radius cannot be negative"));
    }
    Ok((Form::Radius(r), unit(u)?))
}

fn box_dims(w: &[u8], h: &[u8], u: &[u8]) -> Result<(Form, f64)> {
    let width = parse_score(w).ok_or_else(|| Error::err("need numeric width"))?;
    let height = parse_score(h).ok_or_else(|| Error::err("need numeric height"))?;
    if height < 0.0 || width < 0.0 {
        return Err(Error::err("height or width cannot be negative"));
    }
    Ok((Form::Box { width, height }, unit(u)?))
}

/// The position of `member` of the searched set.
fn member_position(ix: &ZIndex, member: &[u8]) -> Result<(f64, f64)> {
    ix.score(member)
        .map(position)
        .ok_or_else(|| Error::err("could not decode requested zset member"))
}

// ---------------------------------------------------------------------------
// GEOADD, GEODIST, GEOHASH, GEOPOS.

fn geoadd(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let (mut nx, mut xx, mut ch) = (false, false, false);
    let mut j = 2;
    while j < args.len() {
        let a = &args[j];
        if is(a, "nx") {
            nx = true;
        } else if is(a, "xx") {
            xx = true;
        } else if is(a, "ch") {
            ch = true;
        } else {
            break;
        }
        j += 1;
    }
    if !(args.len() - j).is_multiple_of(3) || (nx && xx) {
        return Err(Error::Syntax);
    }
    let mut pairs = Vec::with_capacity((args.len() - j) / 3);
    for k in (j..args.len()).step_by(3) {
        let (lon, lat) = lon_lat(&args[k], &args[k + 1])?;
        pairs.push((score_of(lon, lat) as f64, &args[k + 2]));
    }
    if pairs.is_empty() {
        // ZADD's own complaint: options and no elements.
        return Err(Error::Syntax);
    }
    zadd_scored(ctx, &args[1], &pairs, nx, xx, ch)
}

fn geodist(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let to_m = match args.len() {
        5 => unit(&args[4])?,
        4 => 1.0,
        _ => return Err(Error::Syntax),
    };
    let d = read(ctx, &args[1], |ix| {
        let ix = ix?;
        let (lon1, lat1) = position(ix.score(&args[2])?);
        let (lon2, lat2) = position(ix.score(&args[3])?);
        Some(distance(lon1, lat1, lon2, lat2) / to_m)
    })?;
    match d {
        Some(d) => ctx.bulk(distance_text(d).as_bytes()),
        None => ctx.null(),
    }
    Ok(())
}

fn member_scores(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<Vec<Option<f64>>> {
    read(ctx, &args[1], |ix| {
        args.iter()
            .skip(2)
            .map(|m| ix.and_then(|ix| ix.score(m)))
            .collect()
    })
}

fn geohash(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let scores = member_scores(ctx, &args)?;
    ctx.array(scores.len());
    for s in scores {
        match s {
            Some(s) => ctx.bulk(&geohash_string(s)),
            None => ctx.null(),
        }
    }
    Ok(())
}

fn geopos(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let scores = member_scores(ctx, &args)?;
    ctx.array(scores.len());
    for s in scores {
        match s {
            Some(s) => {
                let (lon, lat) = position(s);
                ctx.array(2);
                coord_reply(ctx, lon);
                coord_reply(ctx, lat);
            }
            None => ctx.enc().null_array(),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// GEORADIUS, GEORADIUSBYMEMBER (and their _RO forms), GEOSEARCH,
// GEOSEARCHSTORE: one engine, Redis's `georadiusGeneric`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Centre {
    /// GEORADIUS: `key lon lat radius unit`.
    Coords,
    /// GEORADIUSBYMEMBER: `key member radius unit`.
    Member,
    /// GEOSEARCH: FROMMEMBER / FROMLONLAT and BYRADIUS / BYBOX options.
    Options,
}

#[derive(Debug, Clone, Copy)]
struct Variant {
    centre: Centre,
    /// The _RO forms: no STORE / STOREDIST.
    read_only: bool,
    /// GEOSEARCHSTORE: the destination is the first key.
    search_store: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct With {
    dist: bool,
    hash: bool,
    coord: bool,
}

/// What a search was asked for, once its arguments are read.
#[derive(Debug)]
struct Plan<'a> {
    store: Option<&'a [u8]>,
    store_dist: bool,
    with: With,
    /// The hits to return or store, in order; `None` if the source key is
    /// absent.
    hits: Option<Vec<Hit>>,
    unit: f64,
}

/// Reads the arguments (errors in Redis's order) and runs the search on
/// `ix`, the source's index (`None` if it does not exist).
fn plan<'a>(args: &Args<'a>, v: Variant, ix: Option<&ZIndex>) -> Result<Plan<'a>> {
    let mut centre = None;
    let mut form = None;
    let mut unit_m = 1.0;
    let mut store: Option<&'a [u8]> = None;
    let base = match v.centre {
        Centre::Coords => {
            centre = Some(lon_lat(&args[2], &args[3])?);
            let (f, u) = radius(&args[4], &args[5])?;
            (form, unit_m) = (Some(f), u);
            6
        }
        Centre::Member => {
            // Without a source the rest is still read, for the errors
            // and the reply's type.
            if let Some(ix) = ix {
                centre = Some(member_position(ix, &args[2])?);
                let (f, u) = radius(&args[3], &args[4])?;
                (form, unit_m) = (Some(f), u);
            }
            5
        }
        Centre::Options if v.search_store => {
            store = args.get(1);
            3
        }
        Centre::Options => 2,
    };
    let search = v.centre == Centre::Options;
    let mut with = With::default();
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) =
        (false, false, false, false);
    let (mut store_dist, mut any, mut desc, mut sorted) = (false, false, false, false);
    let mut count: i64 = 0;
    let mut i = base;
    while i < args.len() {
        let a = &args[i];
        let left = args.len() - i - 1;
        if is(a, "withdist") {
            with.dist = true;
        } else if is(a, "withhash") {
            with.hash = true;
        } else if is(a, "withcoord") {
            with.coord = true;
        } else if is(a, "any") {
            any = true;
        } else if is(a, "asc") {
            (sorted, desc) = (true, false);
        } else if is(a, "desc") {
            (sorted, desc) = (true, true);
        } else if is(a, "count") && left >= 1 {
            count = int_arg(&args[i + 1])?;
            if count <= 0 {
                return Err(Error::err("COUNT must be > 0"));
            }
            i += 1;
        } else if (is(a, "store") || is(a, "storedist")) && left >= 1 && !v.read_only && !search {
            store = args.get(i + 1);
            store_dist = is(a, "storedist");
            i += 1;
        } else if is(a, "storedist") && v.search_store {
            store_dist = true;
        } else if is(a, "frommember") && left >= 1 && search && !from_lonlat {
            if let Some(ix) = ix {
                centre = Some(member_position(ix, &args[i + 1])?);
            }
            from_member = true;
            i += 1;
        } else if is(a, "fromlonlat") && left >= 2 && search && !from_member {
            centre = Some(lon_lat(&args[i + 1], &args[i + 2])?);
            from_lonlat = true;
            i += 2;
        } else if is(a, "byradius") && left >= 2 && search && !by_box {
            let (f, u) = radius(&args[i + 1], &args[i + 2])?;
            (form, unit_m) = (Some(f), u);
            by_radius = true;
            i += 2;
        } else if is(a, "bybox") && left >= 3 && search && !by_radius {
            let (f, u) = box_dims(&args[i + 1], &args[i + 2], &args[i + 3])?;
            (form, unit_m) = (Some(f), u);
            by_box = true;
            i += 3;
        } else {
            return Err(Error::Syntax);
        }
        i += 1;
    }
    if store.is_some() && (with.dist || with.hash || with.coord) {
        let what = if v.search_store {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Err(Error::err(format!(
            "{what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    // Redis names the command as the client spelled it.
    let name = || String::from_utf8_lossy(&args[0]).into_owned();
    if search && !(from_member || from_lonlat) {
        return Err(Error::err(format!(
            "exactly one of FROMMEMBER or FROMLONLAT can be specified for {}",
            name()
        )));
    }
    if search && !(by_radius || by_box) {
        return Err(Error::err(format!(
            "exactly one of BYRADIUS and BYBOX can be specified for {}",
            name()
        )));
    }
    if any && count == 0 {
        return Err(Error::err("the ANY argument requires COUNT argument"));
    }
    let mut plan = Plan {
        store,
        store_dist,
        with,
        hits: None,
        unit: unit_m,
    };
    let (Some(ix), Some((lon, lat)), Some(form)) = (ix, centre, form) else {
        return Ok(plan);
    };
    // COUNT without an order means the nearest ones (unless ANY).
    if count != 0 && !sorted && !any {
        sorted = true;
    }
    let shape = Shape {
        lon,
        lat,
        form,
        unit: unit_m,
    };
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let mut hits = collect(ix, &shape, if any { count } else { 0 });
    let keep = if count == 0 {
        hits.len()
    } else {
        hits.len().min(count)
    };
    if sorted {
        sort_hits(&mut hits, desc, keep);
    }
    hits.truncate(keep);
    plan.hits = Some(hits);
    Ok(plan)
}

fn search(ctx: &mut Ctx<'_>, args: Args<'_>, v: Variant) -> Result {
    let src = &args[if v.search_store { 2 } else { 1 }];
    // Every key a STORE may name is locked with the source, before the
    // arguments are read: reading them needs the source's index.
    let mut keys: Vec<&[u8]> = vec![src];
    if v.search_store {
        keys.push(&args[1]);
    } else if !v.read_only && v.centre != Centre::Options {
        for i in 1..args.len().saturating_sub(1) {
            if is(&args[i], "store") || is(&args[i], "storedist") {
                keys.push(&args[i + 1]);
            }
        }
    }
    let n = ctx.conn.db;
    let slot = ctx.slot();
    let z = ZDb::of(&slot);
    let _g = ctx.shared.keyspace.lock_many(keys.iter().map(|k| (n, *k)));
    let ix = match &z {
        Some(z) => z.load(src)?,
        None => None,
    };
    ctx.looked_up(src, ix.is_some());
    let planned = plan(&args, v, ix.as_ref());
    // The source's index goes back before anything is stored: the
    // destination may be the source.
    if let (Some(z), Some(ix)) = (&z, ix) {
        z.put_back(src, ix);
    }
    let plan = planned?;
    if let Some(dst) = plan.store {
        let items: Vec<(Vec<u8>, f64)> = plan
            .hits
            .unwrap_or_default()
            .into_iter()
            .map(|h| {
                let score = if plan.store_dist {
                    h.dist / plan.unit
                } else {
                    h.score
                };
                (h.member, score)
            })
            .collect();
        let stored = match &z {
            Some(z) => {
                let existed = z.db.exists(dst);
                z.store(dst, &items)?;
                let event = if v.search_store {
                    "geosearchstore"
                } else {
                    "georadiusstore"
                };
                stored_events(ctx, dst, event, items.len(), existed);
                if !items.is_empty() {
                    ctx.shared.blocking.signal(n, dst);
                }
                items.len()
            }
            // No engine: nothing exists, nothing to delete.
            None => 0,
        };
        drop(_g);
        drop(slot);
        ctx.int(stored as i64);
        return Ok(());
    }
    drop(_g);
    drop(slot);
    let hits = plan.hits.unwrap_or_default();
    let with = plan.with;
    let fields = usize::from(with.dist) + usize::from(with.hash) + usize::from(with.coord);
    ctx.array(hits.len());
    for h in &hits {
        if fields > 0 {
            ctx.array(fields + 1);
        }
        ctx.bulk(&h.member);
        if with.dist {
            ctx.bulk(distance_text(h.dist / plan.unit).as_bytes());
        }
        if with.hash {
            ctx.int(cvtt(h.score));
        }
        if with.coord {
            ctx.array(2);
            coord_reply(ctx, h.lon);
            coord_reply(ctx, h.lat);
        }
    }
    Ok(())
}

fn georadius(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let v = Variant {
        centre: Centre::Coords,
        read_only: false,
        search_store: false,
    };
    search(ctx, args, v)
}

fn georadiusbymember(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let v = Variant {
        centre: Centre::Member,
        read_only: false,
        search_store: false,
    };
    search(ctx, args, v)
}

fn georadius_ro(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let v = Variant {
        centre: Centre::Coords,
        read_only: true,
        search_store: false,
    };
    search(ctx, args, v)
}

fn georadiusbymember_ro(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let v = Variant {
        centre: Centre::Member,
        read_only: true,
        search_store: false,
    };
    search(ctx, args, v)
}

fn geosearch(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let v = Variant {
        centre: Centre::Options,
        read_only: true,
        search_store: false,
    };
    search(ctx, args, v)
}

fn geosearchstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result {
    let v = Variant {
        centre: Centre::Options,
        read_only: false,
        search_store: true,
    };
    search(ctx, args, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_match_redis_for_known_points() {
        // Values read from redis-server 7.0.15.
        assert_eq!(score_of(13.361389, 38.115556), 3479099956230698);
        assert_eq!(score_of(15.087269, 37.502669), 3479447370796909);
        assert_eq!(score_of(0.0, 0.0), 3377699720527872);
        // The far corner overflows past 52 bits, as in Redis.
        assert_eq!(score_of(180.0, LAT_MAX), 13510798882111488);
        assert_eq!(score_of(-180.0, LAT_MIN), 0);
    }

    #[test]
    fn positions_print_like_redis() {
        let (lon, lat) = position(3479099956230698.0);
        assert_eq!(coord_text(lon), "13.36138933897018433");
        assert_eq!(coord_text(lat), "38.11555639549629859");
        let (lon, lat) = position(0.0);
        assert_eq!(coord_text(lon), "-179.99999731779098511");
        assert_eq!(coord_text(lat), "-85.05112751263942528");
        // Clamped to the indexable area.
        let (lon, lat) = position(13510798882111488.0);
        assert_eq!(
            (coord_text(lon).as_str(), coord_text(lat).as_str()),
            ("180", "85.0511287799999991")
        );
    }

    #[test]
    fn scores_zadd_put_there_decode_as_on_x86() {
        assert_eq!(score_bits(-1.0), u64::MAX);
        assert_eq!(score_bits(f64::INFINITY), 0);
        assert_eq!(score_bits(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(score_bits(1e300), 0);
        assert_eq!(score_bits(1.5), 1);
        assert_eq!(position(-1.0), (180.0, LAT_MAX));
        assert_eq!(position(f64::INFINITY), position(0.0));
    }

    #[test]
    fn geohash_strings_match_redis() {
        assert_eq!(&geohash_string(3479099956230698.0), b"sqc8b49rny0");
        assert_eq!(&geohash_string(3479447370796909.0), b"sqdtr74hyu0");
        assert_eq!(&geohash_string(13510798882111488.0), b"bp05b5048p0");
        assert_eq!(&geohash_string(0.0), b"00bh0hbj200");
    }

    #[test]
    fn distances_print_in_fixed_point() {
        let (a, b) = (position(3479099956230698.0), position(3479447370796909.0));
        assert_eq!(distance_text(distance(a.0, a.1, b.0, b.1)), "166274.1516");
        assert_eq!(distance_text(0.0), "0.0000");
        assert_eq!(distance_text(0.00012), "0.0001");
        assert_eq!(distance_text(-0.00012), "-0.0001");
        assert_eq!(distance_text(1.5), "1.5000");
    }

    #[test]
    fn errors_print_coordinates_like_printf() {
        assert_eq!(printf_f(200.0), "200.000000");
        assert_eq!(printf_f(f64::INFINITY), "inf");
        assert_eq!(printf_f(-0.0), "-0.000000");
    }

    #[test]
    fn neighbours_wrap_around() {
        let c = Cell { bits: 0, step: 1 };
        assert_eq!(shift(c, 1, 0), shift(c, -1, 0));
        assert_eq!(shift(c, 0, 1), Cell { bits: 1, step: 1 });
        assert_eq!(shift(c, 1, 0), Cell { bits: 2, step: 1 });
        assert_eq!(shift(Cell { bits: 3, step: 1 }, 1, 1), c);
        let (lat, lon) = (squash(0b10_0111), squash(0b10_0111 >> 1));
        assert_eq!(spread(lat) | (spread(lon) << 1), 0b10_0111);
    }

    #[test]
    fn partial_sort_sorts_the_kept_prefix() {
        let mut rng = super::super::Rng::new(7);
        for n in [1usize, 5, 7, 8, 30, 41, 100, 300] {
            for keep in [1usize, 2, n / 2 + 1, n] {
                let mut v: Vec<i64> = (0..n).map(|_| (rng.next_u64() % 20) as i64).collect();
                let mut sorted = v.clone();
                sorted.sort();
                let cmp = |a: &i64, b: &i64| (a > b) as i32 - (a < b) as i32;
                partial_sort(&mut v, 0, n, &cmp, keep.min(n) - 1);
                assert_eq!(
                    &v[..keep.min(n)],
                    &sorted[..keep.min(n)],
                    "n {n} keep {keep}"
                );
            }
        }
    }
}
