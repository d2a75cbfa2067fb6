//! The `NCCL_*` settings in force, as the NCCL that runs reads them
//! (`initEnv` in its `src/misc/param.cc`): the environment, then
//! `NCCL_CONF_FILE` (else `~/.nccl.conf`), then `/etc/nccl.conf`, by that
//! release's rules (`NCCL_CONF_FILE` from 2.23.4; `~` from `HOME` and a
//! line's `\r` taken off from 2.30.3, [`Change`]). A file's line is
//! `NAME=value` (everything before the first `=` is the name, as it is; a
//! line without `=`, or starting with `#`, sets nothing), and NCCL sets
//! each name only where it is not set yet: the environment wins, then the
//! first file. nccl-find's own variables (`NCCL_HOME`, `NCCL_FIND_*`) are
//! no settings.

use std::path::PathBuf;

use nccl_find::explain::Change;
use nccl_find::Version;

use crate::facts::conf::{ConfFacts, File};

/// nccl-find's own variables (which install to link), which NCCL does not
/// read.
const OURS: [&str; 10] = [
    "NCCL_HOME",
    "NCCL_ROOT",
    "NCCL_DIR",
    "NCCL_SOURCE_DIR",
    "NCCL_INCLUDE_DIR",
    "NCCL_LIB_DIR",
    "NCCL_STATIC",
    "NCCL_DYNAMIC",
    "NCCL_SYSROOT",
    "NCCL_NO_PKG_CONFIG",
];

/// Whether `name` is one of NCCL's settings: `NCCL_*`, but not nccl-find's
/// own (`NCCL_FIND_*`, `NCCL_HOME` and the other install variables).
pub fn is_nccls(name: &str) -> bool {
    name.starts_with("NCCL_") && !name.starts_with("NCCL_FIND_") && !OURS.contains(&name)
}

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The process's environment.
    Environment,
    /// A configuration file NCCL reads.
    File(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Environment => f.write_str("the environment"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One setting in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub name: String,
    pub value: String,
    pub source: Source,
}

impl Setting {
    /// `NAME=value`, with ` from FILE` where a configuration file set it.
    pub fn shown(&self) -> String {
        match &self.source {
            Source::Environment => format!("{}={}", self.name, self.value),
            Source::File(p) => format!("{}={} from {}", self.name, self.value, p.display()),
        }
    }
}

/// A configuration file NCCL would read that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// The file and why, in words.
    pub text: String,
    /// NCCL would wait on it for ever at start (a FIFO, a device).
    pub hangs: bool,
}

/// The settings in force for one NCCL release.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InForce {
    /// Sorted by name, each with its source.
    pub settings: Vec<Setting>,
    /// The files that count but could not be read.
    pub unread: Vec<Unread>,
}

impl InForce {
    /// The settings in force for NCCL `release` (the newest where it is
    /// not known), from `conf`.
    pub fn of(conf: &ConfFacts, release: Option<&Version>) -> InForce {
        let mut out: Vec<Setting> = Vec::new();
        for (k, v) in &conf.env {
            if is_nccls(k) && !out.iter().any(|s| s.name == *k) {
                out.push(Setting {
                    name: k.clone(),
                    value: v.clone(),
                    source: Source::Environment,
                });
            }
        }
        let strip_cr = Change::ConfLinesLoseCarriageReturn.in_release(release);
        let mut unread = Vec::new();
        for path in files(conf, release) {
            let data = match conf.file(&path) {
                File::Missing => continue,
                File::Unread { why, hangs } => {
                    unread.push(Unread {
                        text: format!("{}: {why}", path.display()),
                        hangs: *hangs,
                    });
                    continue;
                }
                File::Read(d) => d,
            };
            for (name, value) in parse(&String::from_utf8_lossy(data), strip_cr) {
                if is_nccls(&name) && !out.iter().any(|s| s.name == name) {
                    out.push(Setting {
                        name,
                        value,
                        source: Source::File(path.clone()),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        InForce {
            settings: out,
            unread,
        }
    }

    /// The setting `name`, where it is in force.
    pub fn get(&self, name: &str) -> Option<&Setting> {
        self.settings.iter().find(|s| s.name == name)
    }

    /// The value of `name`, where it is in force.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.get(name).map(|s| s.value.as_str())
    }

    /// The settings the environment holds (not the files', which NCCL
    /// reads itself), as `NAME`, `value` pairs.
    pub fn environment(&self) -> Vec<(String, String)> {
        self.settings
            .iter()
            .filter(|s| s.source == Source::Environment)
            .map(|s| (s.name.clone(), s.value.clone()))
            .collect()
    }
}

#[cfg(test)]
impl InForce {
    /// The settings in force where the environment holds `vars` and no
    /// file sets any, by the newest rules.
    pub(crate) fn from_vars(vars: &[(&str, &str)]) -> InForce {
        let conf = ConfFacts {
            env: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..ConfFacts::default()
        };
        InForce::of(&conf, None)
    }
}

/// The files NCCL `release` reads, in its order: `NCCL_CONF_FILE` (from
/// 2.23.4, where set and not empty), else `~/.nccl.conf` (`~` from `HOME`
/// from 2.30.3, the user database's home before); then `/etc/nccl.conf`.
pub fn files(conf: &ConfFacts, release: Option<&Version>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let named = match Change::ConfFileVariable.in_release(release) {
        true => conf.env.iter().find(|(k, _)| k == "NCCL_CONF_FILE"),
        false => None,
    };
    match named {
        Some((_, f)) if !f.is_empty() => out.push(PathBuf::from(f)),
        _ => {
            let home = match Change::HomeFromEnvironment.in_release(release) {
                true => &conf.home,
                false => &conf.database_home,
            };
            if let Some(h) = home {
                out.push(h.join(".nccl.conf"));
            }
        }
    }
    out.push(PathBuf::from("/etc/nccl.conf"));
    out
}

/// A file's `NAME=value` lines, as NCCL reads them: names and values cut
/// at 1023 bytes; a line's `\r` taken off only where `strip_cr` (2.30.3 and
/// newer), else left in the value.
fn parse(text: &str, strip_cr: bool) -> Vec<(String, String)> {
    let cut = |s: &str| -> String {
        let mut end = s.len().min(1023);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    };
    let mut out = Vec::new();
    for line in text.split('\n') {
        let line = match strip_cr {
            true => line.strip_suffix('\r').unwrap_or(line),
            false => line,
        };
        if line.starts_with('#') {
            continue;
        }
        if let Some((name, value)) = line.split_once('=') {
            out.push((cut(name), cut(value)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// `OURS` is every `NCCL_` variable the library reads (its own are
    /// `NCCL_FIND_*`): a probe that finds nothing (every source looks) and
    /// one that finds an install (the link mode is read too) read each of
    /// them and no other, so a variable the library starts to read turns
    /// this red.
    #[test]
    fn ours_are_what_the_library_reads() {
        let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/trees/tarball");
        let mut read: Vec<String> = Vec::new();
        for vars in [
            vec![],
            vec![("NCCL_HOME", "/opt/nccl_2.21.5-1+cuda12.4_x86_64")],
        ] {
            let (report, _) = nccl_find::Config::new()
                .root(&tree)
                .target("x86_64-unknown-linux-gnu")
                .cargo_metadata(false)
                .env_vars(vars)
                .report();
            for e in report.env {
                if e.name.starts_with("NCCL_") && !e.name.starts_with("NCCL_FIND_") {
                    read.push(e.name);
                }
            }
        }
        read.sort();
        read.dedup();
        let mut ours = OURS.to_vec();
        ours.sort();
        assert_eq!(read, ours);
    }

    fn v(a: u32, b: u32, c: u32) -> Version {
        Version::new(a, b, c, "")
    }

    #[test]
    fn nccl_reads_its_lines_so() {
        let text =
            "# a comment\nNCCL_DEBUG=INFO\r\nno equals sign\nNCCL_A=b=c\n NCCL_B=x\nNCCL_C=\n";
        let pairs = |strip| -> Vec<String> {
            parse(text, strip)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        };
        assert_eq!(
            pairs(true),
            ["NCCL_DEBUG=INFO", "NCCL_A=b=c", " NCCL_B=x", "NCCL_C="]
        );
        // Before 2.30.3 the `\r` of a file written on Windows stays.
        assert_eq!(pairs(false)[0], "NCCL_DEBUG=INFO\r");
        let long = format!("NCCL_X={}", "é".repeat(600));
        assert_eq!(parse(&long, true)[0].1.len(), 1022);
    }

    /// The files and their precedence, by each release's rules, as read
    /// from NCCL's `param.cc` at each tag.
    #[test]
    fn each_release_reads_its_own_files() {
        let root = std::env::temp_dir().join(format!("nccl-find-settings-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["etc", "home/env", "home/db"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let put = |p: &str, t: &str| std::fs::write(root.join(p), t).unwrap();
        put(
            "etc/nccl.conf",
            "NCCL_SOCKET_IFNAME=eth0\nNCCL_IB_HCA=mlx5_0\nNCCL_DEBUG=WARN\n",
        );
        put("home/env/.nccl.conf", "NCCL_IB_HCA=mlx5_env\r\n");
        put("home/db/.nccl.conf", "NCCL_IB_HCA=mlx5_db\n");
        put("etc/mine.conf", "NCCL_IB_HCA=mlx5_mine\n");
        let read = |env: &[(&str, &str)]| {
            let env: Vec<(String, String)> = env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            ConfFacts::read_with_homes(
                &env,
                Some("/home/env".into()),
                Some("/home/db".into()),
                &root,
            )
        };
        let shown = |f: &InForce| -> Vec<String> {
            f.settings
                .iter()
                .map(|s| format!("{}={} ({})", s.name, s.value, s.source))
                .collect()
        };
        let conf = read(&[("NCCL_DEBUG", "INFO")]);
        assert_eq!(
            shown(&InForce::of(&conf, None)),
            [
                "NCCL_DEBUG=INFO (the environment)",
                "NCCL_IB_HCA=mlx5_env (/home/env/.nccl.conf)",
                "NCCL_SOCKET_IFNAME=eth0 (/etc/nccl.conf)",
            ]
        );
        // 2.29.7: `~` is the user database's home.
        let old = InForce::of(&conf, Some(&v(2, 29, 7)));
        assert_eq!(old.value("NCCL_IB_HCA"), Some("mlx5_db"));
        // NCCL_CONF_FILE replaces ~/.nccl.conf from 2.23.4; /etc still counts.
        let conf = read(&[("NCCL_CONF_FILE", "/etc/mine.conf")]);
        assert_eq!(
            InForce::of(&conf, None).value("NCCL_IB_HCA"),
            Some("mlx5_mine")
        );
        let f = InForce::of(&conf, Some(&v(2, 22, 3)));
        assert_eq!(f.value("NCCL_IB_HCA"), Some("mlx5_db"));
        assert_eq!(f.value("NCCL_SOCKET_IFNAME"), Some("eth0"));
        assert_eq!(f.value("NCCL_CONF_FILE"), Some("/etc/mine.conf"));
        // A directory where the file should be is said, not read; one a
        // release does not read is not said.
        std::fs::remove_file(root.join("home/db/.nccl.conf")).unwrap();
        std::fs::create_dir(root.join("home/db/.nccl.conf")).unwrap();
        let conf = read(&[]);
        assert!(InForce::of(&conf, None).unread.is_empty());
        let unread = InForce::of(&conf, Some(&v(2, 28, 9))).unread;
        assert_eq!(unread.len(), 1, "{unread:?}");
        assert!(
            unread[0].text.starts_with("/home/db/.nccl.conf: ") && !unread[0].hangs,
            "{unread:?}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
