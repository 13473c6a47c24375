//! Redis's glob-style pattern matching (`stringmatchlen` in util.c), as used
//! by KEYS, SCAN MATCH and CONFIG GET: `*`, `?`, `[abc]`, `[^a-z]`, `\x`.
//!
//! Unlike Redis's recursive matcher this one cannot blow up exponentially on
//! patterns like `*a*a*a*a*b`: every token other than `*` consumes exactly
//! one byte, so on a mismatch it is enough to go back to the most recent `*`
//! and let it swallow one more byte. Time is O(pattern × subject).

/// Whether `subject` matches `pattern`; `nocase` folds ASCII case.
pub fn matches(pattern: &[u8], subject: &[u8], nocase: bool) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    // (pattern index just after the last `*`, subject index it resumes at)
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() && pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, i));
            continue;
        }
        if i == subject.len() {
            return pattern[p..].iter().all(|&b| b == b'*');
        }
        if p < pattern.len() {
            let (ok, next) = one(pattern, p, subject[i], nocase);
            if ok {
                p = next;
                i += 1;
                continue;
            }
        }
        match star {
            Some((sp, si)) => {
                star = Some((sp, si + 1));
                p = sp;
                i = si + 1;
            }
            None => return false,
        }
    }
}

fn fold(b: u8, nocase: bool) -> u8 {
    if nocase {
        b.to_ascii_lowercase()
    } else {
        b
    }
}

/// Matches the token at `pattern[p]` (not `*`) against one byte. Returns
/// whether it matched and where the next token starts.
fn one(pattern: &[u8], p: usize, c: u8, nocase: bool) -> (bool, usize) {
    let c = fold(c, nocase);
    match pattern[p] {
        b'?' => (true, p + 1),
        b'\\' if p + 1 < pattern.len() => (fold(pattern[p + 1], nocase) == c, p + 2),
        b'[' => {
            let mut j = p + 1;
            let negate = j < pattern.len() && pattern[j] == b'^';
            if negate {
                j += 1;
            }
            let mut matched = false;
            while j < pattern.len() {
                let b = pattern[j];
                if b == b'\\' && j + 1 < pattern.len() {
                    j += 1;
                    if fold(pattern[j], nocase) == c {
                        matched = true;
                    }
                } else if b == b']' {
                    break;
                } else if j + 2 < pattern.len() && pattern[j + 1] == b'-' {
                    let (mut lo, mut hi) = (fold(b, nocase), fold(pattern[j + 2], nocase));
                    if lo > hi {
                        std::mem::swap(&mut lo, &mut hi);
                    }
                    if (lo..=hi).contains(&c) {
                        matched = true;
                    }
                    j += 2;
                } else if fold(b, nocase) == c {
                    matched = true;
                }
                j += 1;
            }
            // An unterminated class ends with the pattern, as in Redis.
            (matched != negate, (j + 1).min(pattern.len()))
        }
        b => (fold(b, nocase) == c, p + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_cases() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", "abc"),
            ("a*", "abc"),
            ("*c", "abc"),
            ("a?c", "abc"),
            ("h[ae]llo", "hello"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("\\*", "*"),
            ("a\\?b", "a?b"),
            ("[\\]]", "]"),
            ("*a*b*c*", "xxaxxbxxcxx"),
            ("user:*:name", "user:42:name"),
            ("[abc", "b"),
        ];
        for (p, s) in yes {
            assert!(matches(p.as_bytes(), s.as_bytes(), false), "{p} vs {s}");
        }
        let no: &[(&str, &str)] = &[
            ("a*", "b"),
            ("a?c", "ac"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("\\*", "a"),
            ("*a*b", "ba"),
            ("[]", "a"),
        ];
        for (p, s) in no {
            assert!(!matches(p.as_bytes(), s.as_bytes(), false), "{p} vs {s}");
        }
        assert!(matches(b"MAXMEM*", b"maxmemory", true));
    }

    #[test]
    fn pathological_pattern_is_fast() {
        let subject = vec![b'a'; 10_000];
        let mut pattern = Vec::new();
        for _ in 0..30 {
            pattern.extend_from_slice(b"*a");
        }
        pattern.extend_from_slice(b"*b");
        let t = std::time::Instant::now();
        assert!(!matches(&pattern, &subject, false));
        assert!(t.elapsed().as_secs() < 2);
    }
}
