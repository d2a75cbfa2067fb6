//! The `NCCL_*` settings in force, as NCCL reads them (`initEnv` in its
//! `src/misc/param.cc`): the environment, then `NCCL_CONF_FILE` (else
//! `~/.nccl.conf`), then `/etc/nccl.conf`, by the rules of the NCCL that
//! runs ([`ConfRules`]: before 2.23 there is no `NCCL_CONF_FILE`, and before
//! 2.30.3 `~` is the user database's home, not `HOME`). A file's line is `NAME=value`
//! (everything before the first `=` is the name, as it is; a line without
//! `=`, or starting with `#`, sets nothing), and NCCL sets each name only
//! where it is not set yet: the environment wins, then the first file.
//! nccl-find's own variables (`NCCL_HOME`, `NCCL_FIND_*`) are no settings.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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

/// A configuration file NCCL would read that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// The file and why, in words.
    pub text: String,
    /// It is a FIFO, a device or a socket: NCCL's `fgets` waits on a FIFO
    /// for a writer, and on `/dev/zero` never ends a line, so NCCL hangs
    /// there at start.
    pub hangs: bool,
}

/// The most a configuration file is read: NCCL's own lines are at most
/// 4 KiB; a file of settings is far smaller than this.
const MAX_FILE: u64 = 1 << 20;

/// This process's `NCCL_*` variables.
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect()
}

/// How a release of NCCL finds its configuration files, read from
/// `src/misc/param.cc` at each release tag: `NCCL_CONF_FILE` came in 2.23
/// (2.22.3 has none; 2.23.4 has it), and `userHomeDir()` took the user
/// database's home (`getpwuid(getuid())->pw_dir`) up to 2.29.7 and `HOME`
/// from 2.30.3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfRules {
    /// `NCCL_CONF_FILE` replaces `~/.nccl.conf`.
    pub conf_file_var: bool,
    /// `~` is `HOME` (else the user database's home directory).
    pub home_from_env: bool,
}

impl ConfRules {
    /// The rules of NCCL `version`; the newest where it is not known.
    pub fn of(version: Option<(u32, u32, u32)>) -> ConfRules {
        let v = version.unwrap_or((u32::MAX, 0, 0));
        ConfRules {
            conf_file_var: v >= (2, 23, 0),
            home_from_env: v >= (2, 30, 3),
        }
    }
}

/// This user's home directory in the user database, as NCCL before 2.30.3
/// takes it.
fn database_home() -> Option<PathBuf> {
    // SAFETY: getuid cannot fail; getpwuid returns a pointer to static
    // storage or null, read at once on this thread (nothing else here
    // calls getpw*); pw_dir is a NUL-terminated string when not null.
    unsafe {
        let pw = libc::getpwuid(libc::getuid());
        if pw.is_null() || (*pw).pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr((*pw).pw_dir);
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
    }
}

/// [`in_force`] as an NCCL of these `rules` reads its files here: `~` is
/// this process's `HOME` or its user's home in the user database.
pub fn read(
    env: &[(String, String)],
    root: &Path,
    rules: ConfRules,
) -> (Vec<Setting>, Vec<Unread>) {
    let home = match rules.home_from_env {
        true => std::env::var_os("HOME").map(PathBuf::from),
        false => database_home(),
    };
    in_force(env, home.as_deref(), root, rules)
}

/// The files NCCL reads, in its order: `NCCL_CONF_FILE` (from `env`, where
/// the rules have it), else `~/.nccl.conf` (`home`); then `/etc/nccl.conf`.
/// Paths are taken under `root` (`/` but for tests and sysroots), and shown
/// as NCCL names them.
pub fn files(env: &[(String, String)], home: Option<&Path>, rules: ConfRules) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let named = match rules.conf_file_var {
        true => env.iter().find(|(k, _)| k == "NCCL_CONF_FILE"),
        false => None,
    };
    match named {
        Some((_, f)) if !f.is_empty() => out.push(PathBuf::from(f)),
        _ => {
            if let Some(h) = home {
                out.push(h.join(".nccl.conf"));
            }
        }
    }
    out.push(PathBuf::from("/etc/nccl.conf"));
    out
}

/// The `NCCL_*` settings in force, sorted by name, each with its source;
/// and what could not be read (a file that is there but is no regular file,
/// or cannot be read), in words.
pub fn in_force(
    env: &[(String, String)],
    home: Option<&Path>,
    root: &Path,
    rules: ConfRules,
) -> (Vec<Setting>, Vec<Unread>) {
    let mut out: Vec<Setting> = env
        .iter()
        .filter(|(k, _)| is_nccls(k))
        .map(|(k, v)| Setting {
            name: k.clone(),
            value: v.clone(),
            source: Source::Environment,
        })
        .collect();
    let mut unread = Vec::new();
    for file in files(env, home, rules) {
        let real = root.join(file.strip_prefix("/").unwrap_or(&file));
        let data = match nccl_find::internal::read_bounded(&real, MAX_FILE) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                let special = std::fs::metadata(&real).is_ok_and(|m| {
                    let t = m.file_type();
                    !t.is_file() && !t.is_dir()
                });
                unread.push(Unread {
                    text: format!("{}: {e}", file.display()),
                    hangs: special,
                });
                continue;
            }
        };
        for (name, value) in parse(&String::from_utf8_lossy(&data)) {
            if is_nccls(&name) && !out.iter().any(|s| s.name == name) {
                out.push(Setting {
                    name,
                    value,
                    source: Source::File(file.clone()),
                });
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    (out, unread)
}

/// A file's `NAME=value` lines, as NCCL reads them (names and values cut at
/// 1023 bytes, a line's `\r` taken off as NCCL does from 2.30.3).
fn parse(text: &str) -> Vec<(String, String)> {
    let cut = |s: &str| -> String {
        let mut end = s.len().min(1023);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    };
    let mut out = Vec::new();
    for line in text.lines() {
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

    #[test]
    fn nccl_reads_its_files_so() {
        assert_eq!(
            parse(
                "# a comment\nNCCL_DEBUG=INFO\r\nno equals sign\nNCCL_A=b=c\n NCCL_B=x\nNCCL_C=\n"
            ),
            [
                ("NCCL_DEBUG".to_string(), "INFO".to_string()),
                ("NCCL_A".into(), "b=c".into()),
                (" NCCL_B".into(), "x".into()),
                ("NCCL_C".into(), "".into()),
            ]
        );
        let root = std::env::temp_dir().join(format!("nccl-find-settings-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::create_dir_all(root.join("home/u")).unwrap();
        std::fs::write(
            root.join("etc/nccl.conf"),
            "NCCL_SOCKET_IFNAME=eth0\nNCCL_IB_HCA=mlx5_0\nNCCL_DEBUG=WARN\n",
        )
        .unwrap();
        std::fs::write(root.join("home/u/.nccl.conf"), "NCCL_IB_HCA=mlx5_1\n").unwrap();
        let env = vec![("NCCL_DEBUG".to_string(), "INFO".to_string())];
        let newest = ConfRules::of(None);
        let (got, unread) = in_force(&env, Some(Path::new("/home/u")), &root, newest);
        let show: Vec<String> = got
            .iter()
            .map(|s| format!("{}={} ({})", s.name, s.value, s.source))
            .collect();
        assert_eq!(
            show,
            [
                "NCCL_DEBUG=INFO (the environment)",
                "NCCL_IB_HCA=mlx5_1 (/home/u/.nccl.conf)",
                "NCCL_SOCKET_IFNAME=eth0 (/etc/nccl.conf)",
            ]
        );
        assert!(unread.is_empty());
        // NCCL_CONF_FILE replaces ~/.nccl.conf; /etc/nccl.conf still counts.
        std::fs::write(root.join("etc/mine.conf"), "NCCL_IB_HCA=mlx5_2\n").unwrap();
        let env = vec![("NCCL_CONF_FILE".to_string(), "/etc/mine.conf".to_string())];
        let (got, _) = in_force(&env, Some(Path::new("/home/u")), &root, newest);
        let hca = got.iter().find(|s| s.name == "NCCL_IB_HCA").unwrap();
        assert_eq!(hca.value, "mlx5_2");
        // NCCL 2.22.3 has no NCCL_CONF_FILE: ~/.nccl.conf still counts.
        let old = ConfRules::of(Some((2, 22, 3)));
        let (got, _) = in_force(&env, Some(Path::new("/home/u")), &root, old);
        let hca = got.iter().find(|s| s.name == "NCCL_IB_HCA").unwrap();
        assert_eq!(hca.value, "mlx5_1");
        // A directory where the file should be is said, not read.
        std::fs::remove_file(root.join("home/u/.nccl.conf")).unwrap();
        std::fs::create_dir(root.join("home/u/.nccl.conf")).unwrap();
        let (_, unread) = in_force(&[], Some(Path::new("/home/u")), &root, newest);
        assert_eq!(unread.len(), 1, "{unread:?}");
        assert!(
            unread[0].text.starts_with("/home/u/.nccl.conf: ") && !unread[0].hangs,
            "{unread:?}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The rules by release, as read from NCCL's `param.cc` at each tag.
    #[test]
    fn each_release_finds_its_files_by_its_own_rules() {
        let rules = |v| {
            let r = ConfRules::of(Some(v));
            (r.conf_file_var, r.home_from_env)
        };
        assert_eq!(rules((2, 21, 5)), (false, false));
        assert_eq!(rules((2, 22, 3)), (false, false));
        assert_eq!(rules((2, 23, 4)), (true, false));
        assert_eq!(rules((2, 29, 7)), (true, false));
        assert_eq!(rules((2, 30, 3)), (true, true));
        assert_eq!(rules((2, 32, 3)), (true, true));
        assert_eq!(ConfRules::of(None), ConfRules::of(Some((2, 32, 3))));
    }
}
