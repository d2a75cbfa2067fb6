//! Version requirements in Cargo's syntax (`>=2.18, <3`, `^2.18`, `~2.18.3`,
//! `2.*`), matched against NCCL versions. The same meaning as the `semver`
//! crate gives them (a test checks the two against each other), without
//! the dependency: every downstream build script compiles this crate.
//!
//! NCCL versions have no pre-release part, so requirements with one
//! (`>=2.18.0-rc1`) are refused. A base module: it imports nothing from the
//! crate.

/// A version as three numbers, for comparing.
type Triple = (u64, u64, u64);

/// A version requirement: every comparator must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionReq {
    /// Each comparator as the half-open range `[lo, hi)` it allows.
    ranges: Vec<(Option<Triple>, Option<Triple>)>,
}

impl VersionReq {
    /// Parses `text`: comparators separated by commas, each an optional
    /// operator (`=`, `>`, `>=`, `<`, `<=`, `~`, `^`; none means `^`) and a
    /// version `MAJOR[.MINOR[.PATCH]]`, where a missing or wildcard (`*`,
    /// `x`, `X`) part matches any. A lone `*` matches every version.
    pub fn parse(text: &str) -> Result<VersionReq, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("the requirement is empty".into());
        }
        let comparators: Vec<&str> = text.split(',').collect();
        for c in &comparators {
            if matches!(c.trim(), "*" | "x" | "X") && comparators.len() > 1 {
                return Err(format!(
                    "{text:?}: a lone wildcard must be the only comparator"
                ));
            }
        }
        let mut ranges = Vec::with_capacity(comparators.len());
        for c in comparators {
            ranges.push(comparator(c.trim())?);
        }
        Ok(VersionReq { ranges })
    }

    /// Whether `major.minor.patch` meets every comparator.
    pub fn matches(&self, major: u64, minor: u64, patch: u64) -> bool {
        let v = (major, minor, patch);
        for (lo, hi) in &self.ranges {
            if matches!(lo, Some(lo) if v < *lo) || matches!(hi, Some(hi) if v >= *hi) {
                return false;
            }
        }
        true
    }
}

/// The operators, longest first so that `>=` is not read as `>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Exact,
    Greater,
    GreaterEq,
    Less,
    LessEq,
    Tilde,
    Caret,
}

const OPS: [(&str, Op); 7] = [
    (">=", Op::GreaterEq),
    ("<=", Op::LessEq),
    ("=", Op::Exact),
    (">", Op::Greater),
    ("<", Op::Less),
    ("~", Op::Tilde),
    ("^", Op::Caret),
];

/// One comparator as the range `[lo, hi)` it allows. With an operator, a
/// wildcard part is a missing one (`>=2.*` is `>=2`); without one, a
/// version with a wildcard is exact to its given parts (`2.18.*` is
/// `=2.18`), and one without is a caret requirement (`2.18` is `^2.18`).
fn comparator(text: &str) -> Result<(Option<Triple>, Option<Triple>), String> {
    if text.is_empty() {
        return Err("a comparator is empty (two commas, or one at an end)".into());
    }
    let mut op = None;
    let mut rest = text;
    for (s, o) in OPS {
        if let Some(r) = text.strip_prefix(s) {
            op = Some(o);
            rest = r.trim_start();
            break;
        }
    }
    let (parts, wild) = version_parts(rest)?;
    let op = match op {
        Some(_) if parts[0].is_none() => {
            return Err(format!("{text:?}: a wildcard cannot follow an operator"))
        }
        Some(op) => op,
        None if wild => Op::Exact,
        None => Op::Caret,
    };
    Ok(range(op, parts))
}

/// `MAJOR[.MINOR[.PATCH]]`, each part a number, or `None` when missing or
/// a wildcard (after a wildcard only wildcards may come); and whether
/// there was a wildcard.
fn version_parts(text: &str) -> Result<([Option<u64>; 3], bool), String> {
    if text.is_empty() {
        return Err("a version is missing after the operator".into());
    }
    if text.contains(['-', '+']) {
        return Err(format!(
            "{text:?}: NCCL versions have no pre-release or build part; write MAJOR.MINOR.PATCH"
        ));
    }
    let pieces: Vec<&str> = text.split('.').collect();
    if pieces.len() > 3 {
        return Err(format!("{text:?} has more than three parts"));
    }
    if pieces.len() > 1 && matches!(pieces[0], "*" | "x" | "X") {
        return Err(format!(
            "{text:?}: nothing may follow a wildcard major version"
        ));
    }
    let mut out = [None; 3];
    let mut wild = false;
    for (i, p) in pieces.iter().enumerate() {
        if matches!(*p, "*" | "x" | "X") {
            wild = true;
            continue;
        }
        if wild {
            return Err(format!("{text:?}: a number cannot follow a wildcard"));
        }
        out[i] = Some(number(p, text)?);
    }
    Ok((out, wild))
}

fn number(p: &str, text: &str) -> Result<u64, String> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a version like 2.18 or 2.18.3"));
    }
    if p.len() > 1 && p.starts_with('0') {
        return Err(format!("{text:?}: a number has a leading zero"));
    }
    p.parse()
        .map_err(|_| format!("{text:?}: {p} is too large for a version number"))
}

/// The range an operator and a version (with missing parts) allow.
fn range(op: Op, [major, minor, patch]: [Option<u64>; 3]) -> (Option<Triple>, Option<Triple>) {
    let Some(x) = major else {
        return (None, None);
    };
    let next_major = Some((x + 1, 0, 0));
    let (y, z) = (minor.unwrap_or(0), patch.unwrap_or(0));
    let next_minor = Some((x, y + 1, 0));
    match (op, minor, patch) {
        (Op::Exact, Some(_), Some(_)) => (Some((x, y, z)), Some((x, y, z + 1))),
        (Op::Exact | Op::Tilde, Some(_), None) => (Some((x, y, 0)), next_minor),
        (Op::Exact | Op::Tilde | Op::Caret, None, _) => (Some((x, 0, 0)), next_major),
        (Op::Greater, Some(_), Some(_)) => (Some((x, y, z + 1)), None),
        (Op::Greater, Some(_), None) => (next_minor, None),
        (Op::Greater, None, _) => (next_major, None),
        (Op::GreaterEq, ..) => (Some((x, y, z)), None),
        (Op::Less, ..) => (None, Some((x, y, z))),
        (Op::LessEq, Some(_), Some(_)) => (None, Some((x, y, z + 1))),
        (Op::LessEq, Some(_), None) => (None, next_minor),
        (Op::LessEq, None, _) => (None, next_major),
        (Op::Tilde, Some(_), Some(_)) => (Some((x, y, z)), next_minor),
        (Op::Caret, Some(_), _) if x > 0 => (Some((x, y, z)), next_major),
        (Op::Caret, Some(_), Some(_)) if y > 0 => (Some((0, y, z)), Some((0, y + 1, 0))),
        (Op::Caret, Some(_), Some(_)) => (Some((0, 0, z)), Some((0, 0, z + 1))),
        (Op::Caret, Some(_), None) => (Some((0, y, 0)), Some((0, y + 1, 0))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(req: &str, v: Triple) -> bool {
        VersionReq::parse(req).unwrap().matches(v.0, v.1, v.2)
    }

    #[test]
    fn the_usual_requirements() {
        assert!(ok(">=2.18", (2, 18, 0)) && !ok(">=2.18", (2, 17, 9)));
        assert!(ok(">=2.18, <3", (2, 32, 3)) && !ok(">=2.18, <3", (3, 0, 0)));
        assert!(ok("2.18", (2, 30, 0)) && !ok("2.18", (3, 0, 0)));
        assert!(ok("~2.18.3", (2, 18, 9)) && !ok("~2.18.3", (2, 19, 0)));
        assert!(ok("=2.21.5", (2, 21, 5)) && !ok("=2.21.5", (2, 21, 6)));
        assert!(ok("2.*", (2, 0, 0)) && !ok("2.*", (1, 9, 9)));
        assert!(ok("*", (9, 9, 9)));
        assert!(ok(">2.18", (2, 19, 0)) && !ok(">2.18", (2, 18, 9)));
        assert!(ok("<=2.18", (2, 18, 9)) && !ok("<=2.18", (2, 19, 0)));
    }

    #[test]
    fn bad_requirements_say_why() {
        for (req, why) in [
            ("", "the requirement is empty"),
            (">=2.18,", "a comparator is empty"),
            (">=", "a version is missing"),
            ("2.x.1", "a number cannot follow a wildcard"),
            (">=2.18.0-rc1", "no pre-release"),
            ("02.18", "leading zero"),
            ("2.18.3.1", "more than three parts"),
            ("two", "not a version"),
            ("99999999999999999999", "too large"),
        ] {
            let e = VersionReq::parse(req).unwrap_err();
            assert!(e.contains(why), "{req:?}: {e}");
        }
    }
}
