//! What NCCL's settings are read from: the `NCCL_*` variables of the
//! environment, the two home directories NCCL's releases have taken `~`
//! from, and every configuration file some release reads
//! (`NCCL_CONF_FILE`'s, `~/.nccl.conf` under either home, `/etc/nccl.conf`),
//! each read once. Which of them count, and how a line is read, is the
//! rule of the NCCL that runs (`rules::settings`).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The most a configuration file is read: NCCL's own lines are at most
/// 4 KiB; a file of settings is far smaller than this.
const MAX_FILE: u64 = 1 << 20;

/// A configuration file some release of NCCL reads, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum File {
    /// There is none.
    Missing,
    /// Its bytes.
    Read(Vec<u8>),
    /// It is there but could not be read: why, in words; and whether it is
    /// a FIFO, a device or a socket, on which NCCL's reading waits for ever
    /// (a FIFO without a writer, `/dev/zero` that never ends a line).
    Unread { why: String, hangs: bool },
}

/// The inputs of NCCL's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfFacts {
    /// The environment's `NCCL_*` variables (a facts file's `env` stands
    /// for them).
    pub env: Vec<(String, String)>,
    /// `HOME`, and this user's home in the user database.
    pub home: Option<PathBuf>,
    pub database_home: Option<PathBuf>,
    /// Each file some release reads, by the path NCCL names it with.
    pub files: Vec<(PathBuf, File)>,
}

impl ConfFacts {
    /// Reads the files the environment `env` and this user's homes lead
    /// to, under `root` (`/` but for tests and sysroots).
    pub fn read(env: &[(String, String)], root: &Path) -> ConfFacts {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        ConfFacts::read_with_homes(env, home, database_home(), root)
    }

    /// [`ConfFacts::read`] with the homes given.
    pub fn read_with_homes(
        env: &[(String, String)],
        home: Option<PathBuf>,
        database_home: Option<PathBuf>,
        root: &Path,
    ) -> ConfFacts {
        let mut paths: Vec<PathBuf> = Vec::new();
        if let Some((_, f)) = env.iter().find(|(k, _)| k == "NCCL_CONF_FILE") {
            if !f.is_empty() {
                paths.push(PathBuf::from(f));
            }
        }
        for h in [&home, &database_home].into_iter().flatten() {
            paths.push(h.join(".nccl.conf"));
        }
        paths.push(PathBuf::from("/etc/nccl.conf"));
        let mut files: Vec<(PathBuf, File)> = Vec::new();
        for p in paths {
            if !files.iter().any(|(q, _)| *q == p) {
                let f = read_file(root, &p);
                files.push((p, f));
            }
        }
        ConfFacts {
            env: env.to_vec(),
            home,
            database_home,
            files,
        }
    }

    /// The file NCCL names `path`, as found (`Missing` where it was not
    /// looked for).
    pub fn file(&self, path: &Path) -> &File {
        match self.files.iter().find(|(p, _)| p == path) {
            Some((_, f)) => f,
            None => &File::Missing,
        }
    }
}

/// The file NCCL names `path`, read under `root`: only a regular file, at
/// most [`MAX_FILE`] bytes, never waited on.
fn read_file(root: &Path, path: &Path) -> File {
    let real = root.join(path.strip_prefix("/").unwrap_or(path));
    match nccl_find::internal::read_bounded(&real, MAX_FILE) {
        Ok(d) => File::Read(d),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => File::Missing,
        Err(e) => {
            let hangs = std::fs::metadata(&real).is_ok_and(|m| {
                let t = m.file_type();
                !t.is_file() && !t.is_dir()
            });
            File::Unread {
                why: e.to_string(),
                hangs,
            }
        }
    }
}

/// This process's `NCCL_*` variables (a value that is not UTF-8 shown
/// lossily).
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file some release reads is read once: `NCCL_CONF_FILE`'s, both
    /// homes' (the same home once), `/etc/nccl.conf`; a directory where a
    /// file should be is said, not read.
    #[test]
    fn every_file_some_release_reads_is_read_once() {
        let root = std::env::temp_dir().join(format!("nccl-find-conf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::create_dir_all(root.join("home/u/.nccl.conf")).unwrap();
        std::fs::write(root.join("etc/nccl.conf"), "NCCL_DEBUG=WARN\n").unwrap();
        let env = vec![("NCCL_CONF_FILE".to_string(), "/etc/mine.conf".to_string())];
        let home = Some(PathBuf::from("/home/u"));
        let f = ConfFacts::read_with_homes(&env, home.clone(), home, &root);
        let paths: Vec<&Path> = f.files.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(
            paths,
            [
                Path::new("/etc/mine.conf"),
                Path::new("/home/u/.nccl.conf"),
                Path::new("/etc/nccl.conf")
            ]
        );
        assert_eq!(f.file(Path::new("/etc/mine.conf")), &File::Missing);
        assert!(matches!(
            f.file(Path::new("/home/u/.nccl.conf")),
            File::Unread { hangs: false, .. }
        ));
        assert_eq!(
            f.file(Path::new("/etc/nccl.conf")),
            &File::Read(b"NCCL_DEBUG=WARN\n".to_vec())
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
