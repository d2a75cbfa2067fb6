//! Properties: version codes round-trip under both formulas; the probe's
//! answer does not depend on the order directories are listed in; and the
//! probe on a random tree with a random environment never panics.

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nccl_find::{Config, Version};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn version_codes_round_trip(major in 0u32..10, minor in 0u32..100, patch in 0u32..100) {
        let code = Version::code_of(major, minor, patch);
        let back = Version::from_code(code);
        let old = major < 2 || (major == 2 && minor <= 8);
        // The old formula only holds one digit of minor; the new one from 2.9.
        if old && minor < 10 && major <= 2 {
            prop_assert_eq!(back, Some((major, minor, patch)));
        } else if !old {
            prop_assert_eq!(back, Some((major, minor, patch)));
        }
        let v = Version::new(major, minor, patch, "");
        prop_assert_eq!(v.code, code);
        prop_assert_eq!((v.major, v.minor, v.patch), (major, minor, patch));
        let exact = format!("={major}.{minor}.{patch}");
        prop_assert_eq!(v.matches(&exact), Ok(true));
    }
}

fn fixture(rel: &str) -> PathBuf {
    common::trees().join(rel)
}

/// Installs that compete: CUDA toolkits, pyenv versions and wheels, conda.
const PLACES: [&str; 8] = [
    "usr/local/cuda-12.4",
    "usr/local/cuda-11.8",
    "usr/local/cuda-12.10",
    "home/u/.pyenv/versions/3.11.7/lib/python3.11/site-packages/nvidia/nccl",
    "home/u/.pyenv/versions/3.12.1/lib/python3.12/site-packages/nvidia/nccl",
    "home/u/.local/lib/python3.10/site-packages/nvidia/nccl",
    "opt/conda",
    "usr/local",
];

/// Puts a copy of the tarball fixture's include/ and lib/ at `place`.
fn install(root: &Path, place: &str) {
    let src = fixture("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64");
    let dst = root.join(place);
    std::fs::create_dir_all(dst.join("include")).unwrap();
    std::fs::create_dir_all(dst.join("lib")).unwrap();
    std::fs::copy(src.join("include/nccl.h"), dst.join("include/nccl.h")).unwrap();
    std::fs::copy(
        src.join("lib/libnccl.so.2.21.5"),
        dst.join("lib/libnccl.so.2.21.5"),
    )
    .unwrap();
    symlink("libnccl.so.2.21.5", dst.join("lib/libnccl.so.2")).unwrap();
}

fn report_of(root: &Path) -> String {
    let env = [
        ("HOME", "/home/u"),
        ("CONDA_PREFIX", "/opt/conda"),
        ("CUDA_HOME", "/usr/local/cuda-11.8"),
    ];
    let (r, e) = Config::new()
        .root(root)
        .target("x86_64-unknown-linux-gnu")
        .cargo_metadata(false)
        .env_vars(env)
        .report();
    // Everything the probe saw, in its order.
    let text = format!("{r:#?}\n{e:?}");
    text.replace(&root.display().to_string(), "<ROOT>")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The same installs, created in any order (which is what a directory
    /// listing returns on many filesystems), give the same report.
    #[test]
    fn selection_does_not_depend_on_listing_order(order in Just((0..PLACES.len()).collect::<Vec<_>>()).prop_shuffle(), n in 2usize..=8) {
        let base = std::env::temp_dir().join(format!("nccl-find-prop-order-{}", std::process::id()));
        let (a, b) = (base.join("a"), base.join("b"));
        let _ = std::fs::remove_dir_all(&base);
        let chosen: Vec<usize> = (0..n).collect();
        for i in &chosen {
            install(&a, PLACES[*i]);
        }
        for i in order.iter().filter(|i| chosen.contains(i)) {
            install(&b, PLACES[*i]);
        }
        let (ra, rb) = (report_of(&a), report_of(&b));
        std::fs::remove_dir_all(&base).unwrap();
        prop_assert_eq!(ra, rb);
    }
}

/// One random thing at one of the places NCCL is looked for.
#[derive(Debug, Clone)]
enum Thing {
    GoodHeader,
    Garbage(Vec<u8>),
    Nccl1Header,
    GoodLib,
    LinkTo(String),
    Dir,
}

fn thing() -> impl Strategy<Value = Thing> {
    prop_oneof![
        Just(Thing::GoodHeader),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Thing::Garbage),
        Just(Thing::Nccl1Header),
        Just(Thing::GoodLib),
        "[a-z./]{0,12}".prop_map(Thing::LinkTo),
        Just(Thing::Dir),
    ]
}

const SPOTS: [&str; 12] = [
    "usr/include/nccl.h",
    "usr/lib/x86_64-linux-gnu/libnccl.so",
    "usr/lib/x86_64-linux-gnu/libnccl.so.2",
    "usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5",
    "usr/lib/x86_64-linux-gnu/libnccl_static.a",
    "opt/n/include/nccl.h",
    "opt/n/lib/libnccl.so.2",
    "opt/n/lib/libnccl.so.1",
    "var/lib/dpkg/status",
    "etc/ld.so.cache",
    "usr/local/cuda/include/nccl.h",
    "usr/local/cuda/lib64/libnccl.so",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// A random tree and a random environment: an answer or an error, never
    /// a panic.
    #[test]
    fn the_probe_never_panics(things in proptest::collection::vec((0..SPOTS.len(), thing()), 0..14),
                              home in prop_oneof![Just(None), Just(Some("/opt/n")), Just(Some("/usr")), Just(Some("")), Just(Some("rel"))],
                              statik in any::<bool>()) {
        let root = std::env::temp_dir().join(format!("nccl-find-prop-random-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let header = std::fs::read(fixture("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64/include/nccl.h")).unwrap();
        let nccl1 = std::fs::read(fixture("nccl1-only/opt/anaconda3/include/nccl.h")).unwrap();
        let lib = std::fs::read(fixture("tarball/opt/nccl_2.21.5-1+cuda12.4_x86_64/lib/libnccl.so.2.21.5")).unwrap();
        for (spot, t) in &things {
            let p = root.join(SPOTS[*spot]);
            let _ = std::fs::create_dir_all(p.parent().unwrap());
            if std::fs::symlink_metadata(&p).is_ok() {
                continue;
            }
            let _ = match t {
                Thing::GoodHeader => std::fs::write(&p, &header),
                Thing::Garbage(b) => std::fs::write(&p, b),
                Thing::Nccl1Header => std::fs::write(&p, &nccl1),
                Thing::GoodLib => std::fs::write(&p, &lib),
                Thing::LinkTo(t) => symlink(t, &p),
                Thing::Dir => std::fs::create_dir_all(&p),
            };
        }
        let mut env = vec![("PATH".to_string(), "/usr/bin".to_string())];
        if let Some(h) = home {
            env.push(("NCCL_HOME".into(), h.into()));
        }
        if statik {
            env.push(("NCCL_STATIC".into(), "1".into()));
        }
        let start = std::time::Instant::now();
        let (r, e) = Config::new().root(&root).target("x86_64-unknown-linux-gnu").cargo_metadata(false).env_vars(env).report();
        let _ = format!("{r:?}{e:?}");
        prop_assert!(start.elapsed() < std::time::Duration::from_secs(5));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
