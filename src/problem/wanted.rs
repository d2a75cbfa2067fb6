//! A requirement in words: the releases nccl-find's catalog knows of that
//! meet it (`NCCL 2.29.2 or newer`), what it needs, and the pip line that
//! installs one.

use crate::version::lenient_version;

/// The first and the last NCCL release that nccl-find's catalog knows of
/// and `requirement` (Cargo's syntax) allows; `None` when none does.
fn releases_meeting(requirement: &str) -> Option<(&'static str, &'static str)> {
    let req = crate::req::VersionReq::parse(requirement).ok()?;
    let mut found: Option<(&'static str, &'static str)> = None;
    for release in crate::api::known_releases() {
        let Ok((major, minor, patch)) = lenient_version(release) else {
            continue;
        };
        if req.matches(major, minor, patch) {
            found = Some(match found {
                Some((first, _)) => (first, release),
                None => (release, release),
            });
        }
    }
    found
}

/// The newest NCCL release nccl-find's catalog knows of.
pub(crate) fn newest_release() -> &'static str {
    match crate::api::known_releases().last() {
        Some(r) => r,
        None => "?",
    }
}

/// The releases a requirement wants, in words: `NCCL 2.29.2 or newer`,
/// `NCCL 2.18.1 to 2.19.4`; `None` when no release known meets it.
pub(crate) fn wanted(requirement: &str) -> Option<String> {
    Some(match releases_meeting(requirement)? {
        (first, last) if last == newest_release() => format!("NCCL {first} or newer"),
        (first, last) if first == last => format!("NCCL {first}"),
        (first, last) => format!("NCCL {first} to {last}"),
    })
}

/// What a requirement needs, in words: `it needs NCCL 2.29.2 or newer`,
/// or that no release known has it yet.
pub(crate) fn needed(requirement: &str) -> String {
    match wanted(requirement) {
        Some(w) => format!("it needs {w}"),
        None => format!(
            "no NCCL release nccl-find knows of satisfies it (the newest is {})",
            newest_release()
        ),
    }
}

/// The pip line that installs a release meeting `requirement` from the
/// distribution `dist` (`nvidia-nccl-cu12`): the first such release or
/// newer where the newest known meets it, else the newest that does.
/// `None` when no release known meets it.
pub(crate) fn pip_pin(requirement: &str, dist: &str) -> Option<String> {
    let (first, last) = releases_meeting(requirement)?;
    Some(if last == newest_release() {
        format!("pip install -U '{dist}>={first}'")
    } else {
        format!("pip install '{dist}=={last}'")
    })
}
