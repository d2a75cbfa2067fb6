//! Version requirements read as the `semver` crate (and so Cargo) reads
//! them: the library's own reader, checked against it on generated
//! requirements and versions. NCCL versions have no pre-release part, so
//! none is generated.

use nccl_find::Version;
use proptest::prelude::*;

/// A requirement from Cargo's grammar, spaces and wildcards included.
fn requirement() -> impl Strategy<Value = String> {
    let op = prop::sample::select(vec![
        "", "=", ">", ">=", "<", "<=", "~", "^", "> ", ">= ", "^ ",
    ]);
    let num = prop_oneof![0u64..4, Just(18u64), Just(21), Just(32)].prop_map(|n| n.to_string());
    let part = prop_oneof![4 => num, 1 => prop::sample::select(vec!["*", "x", "X"]).prop_map(String::from)];
    let version = prop::collection::vec(part, 1..=3).prop_map(|p| p.join("."));
    let comparator = (op, version).prop_map(|(o, v)| format!("{o}{v}"));
    let sep = prop::sample::select(vec![",", ", ", " , "]);
    (prop::collection::vec(comparator, 1..=3), sep).prop_map(|(c, s)| c.join(s))
}

fn version() -> impl Strategy<Value = (u32, u32, u32)> {
    (0u32..4, prop_oneof![0u32..4, 17u32..23, Just(32)], 0u32..4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20000, ..ProptestConfig::default() })]

    #[test]
    fn every_requirement_means_what_it_means_to_semver(req in requirement(), (x, y, z) in version()) {
        let ours = Version::new(x, y, z, "").matches(&req);
        match semver::VersionReq::parse(&req) {
            Ok(theirs) => {
                let v = semver::Version::new(x.into(), y.into(), z.into());
                prop_assert_eq!(ours, Ok(theirs.matches(&v)), "{} against {}.{}.{}", req, x, y, z);
            }
            Err(e) => prop_assert!(ours.is_err(), "{:?} is refused by semver ({}) but read as {:?}", req, e, ours),
        }
    }
}

#[test]
fn the_requirements_in_the_docs() {
    let v = |s: &str| {
        let p: Vec<u32> = s.split('.').map(|n| n.parse().unwrap()).collect();
        Version::new(p[0], p[1], p[2], "")
    };
    for (req, yes, no) in [
        (">=2.18, <3", "2.32.3", "3.0.0"),
        (">=2.18", "2.18.0", "2.17.9"),
        ("2.18", "2.30.0", "3.0.0"),
        ("~2.18.3", "2.18.9", "2.19.0"),
        ("=2.21.5", "2.21.5", "2.21.6"),
        ("2.18.*", "2.18.7", "2.19.0"),
        ("*", "9.9.9", "0.0.0"),
    ] {
        assert_eq!(v(yes).matches(req), Ok(true), "{req} {yes}");
        if req != "*" {
            assert_eq!(v(no).matches(req), Ok(false), "{req} {no}");
        }
    }
    // A suffix takes no part.
    assert_eq!(Version::new(2, 19, 3, "a0").matches(">=2.18"), Ok(true));
    // Refused, with the reason.
    assert!(v("2.18.0")
        .matches(">=2.18.0-rc1")
        .unwrap_err()
        .contains("no pre-release"));
    assert!(v("2.18.0").matches("").unwrap_err().contains("empty"));
}
