//! doctor's `nccl` check: the install found (or why none was), and what
//! will mislead builds and the run-time loader.

use nccl_find::explain::Verdict;
use nccl_find::{Nccl, Report};

use super::{Area, Findings, Level};

/// The NCCL area: the install found (or why none was), and what will mislead
/// builds and the run-time loader.
pub(super) fn check(f: &mut Findings, result: &Result<Nccl, nccl_find::Error>) {
    let report = check_selected(f, result);
    let nccl = result.as_ref().ok();
    check_pkg_config_files(f, report, nccl);
    check_other_installs(f, report);
    check_visible_copies(f, report);
    if let Some(n) = nccl {
        loader_verdict(f, n);
        check_cuda_headers(f, n);
    }
}

/// CUDA headers `nccl.h` includes and that are missing: builds that
/// compile it (C, C++, bindgen) fail; running needs none of them.
fn check_cuda_headers(f: &mut Findings, n: &Nccl) {
    if let Err(why) = &n.cuda_include_dirs {
        f.add(
            Area::Nccl,
            Level::Note,
            "builds that compile nccl.h (C, C++, bindgen) will fail: it includes CUDA headers \
             that are not here; running needs none of them",
            Some(why.clone()),
        );
    }
}

/// The install selected, or why there is none; returns the probe's report.
fn check_selected<'a>(f: &mut Findings, result: &'a Result<Nccl, nccl_find::Error>) -> &'a Report {
    match result {
        Ok(n) => {
            f.add(
                Area::Nccl,
                Level::Ok,
                format!(
                    "NCCL {}{} from {}; links {}",
                    n.version,
                    n.cuda_version
                        .map(|c| format!(" (CUDA {c})"))
                        .unwrap_or_default(),
                    n.origin,
                    n.library.display()
                ),
                None,
            );
            &n.report
        }
        Err(e) => {
            f.add(
                Area::Nccl,
                Level::Problem,
                e.headline(),
                Some(
                    "run `nccl-find --print` to see where it looked and how to install NCCL".into(),
                ),
            );
            e.report()
        }
    }
}

/// `nccl.pc` files whose prefix has no NCCL, which mislead C and CMake builds.
fn check_pkg_config_files(f: &mut Findings, report: &Report, nccl: Option<&Nccl>) {
    for pc in &report.misleading_pc {
        let real = match nccl {
            Some(n) => format!(
                " NCCL's files are in {} and {}.",
                n.include_paths
                    .first()
                    .map(|i| report.logical(i).display().to_string())
                    .unwrap_or_default(),
                report.logical(&n.lib_dir).display()
            ),
            None => String::new(),
        };
        f.add(
            Area::Nccl,
            Level::Problem,
            format!(
                "{} says prefix={} ({}), where there is no NCCL: C and CMake builds that ask \
                 `pkg-config --cflags --libs nccl` get wrong flags and fail.{real}",
                report.logical(&pc.file).display(),
                pc.prefix,
                pc.flags
            ),
            Some(match &pc.tree {
                Some(tree) => format!(
                    "the tree it sits in, {}, holds an NCCL (`pkg-config --define-prefix` finds it): \
                     NCCL_HOME={} uses it; or fix the prefix= line of that file",
                    report.logical(tree).display(),
                    report.logical(tree).display()
                ),
                None => "fix the prefix= line of that file, or build with `nccl-find --cflags --libs` \
                     (or `eval \"$(nccl-find --env)\"`) instead of pkg-config"
                    .into(),
            }),
        );
    }
}

/// Other installs that conflict with the selected one.
fn check_other_installs(f: &mut Findings, report: &Report) {
    for c in report.others().filter(|c| c.conflict.is_some()) {
        f.add(
            Area::Nccl,
            Level::Note,
            format!(
                "another NCCL {} is installed at {} ({})",
                c.version().map(|v| v.to_string()).unwrap_or_default(),
                report.logical(&c.place).display(),
                c.origin
            ),
            Some(
                "keep only one on the loader's path, or link with an rpath to the one you mean"
                    .into(),
            ),
        );
    }
}

/// Several versions of libnccl.so.2 visible to the run-time loader.
fn check_visible_copies(f: &mut Findings, report: &Report) {
    let visible = &report.loader.visible;
    let mut versions: Vec<String> = visible
        .iter()
        .filter_map(|v| v.version.as_ref().map(|v| v.to_string()))
        .collect();
    versions.sort();
    versions.dedup();
    if versions.len() > 1 {
        let list: Vec<String> = visible
            .iter()
            .map(|v| {
                format!(
                    "{} ({}, {})",
                    report.logical(&v.path).display(),
                    v.version.as_ref().map_or("?".into(), |v| v.to_string()),
                    v.via
                )
            })
            .collect();
        f.add(
            Area::Nccl,
            Level::Problem,
            format!(
                "several different libnccl.so.2 are visible to the loader: {}; the first wins",
                list.join(", ")
            ),
            Some("remove the stale ones, or put the one you mean first on LD_LIBRARY_PATH".into()),
        );
    }
}

/// The loader verdict: whether the run-time loader will load the selected
/// NCCL. (The library's `check/loader.rs` judges the same with other
/// thresholds; doctor is to take its verdict from there.)
fn loader_verdict(f: &mut Findings, n: &Nccl) {
    let report = &n.report;
    let fix = || {
        Some(format!(
            "put {} first on LD_LIBRARY_PATH, or use an rpath",
            n.lib_dir.display()
        ))
    };
    match report.loader.verdict(&n.library_real, &n.library_version) {
        Verdict::NoneFound => f.add(
            Area::Nccl,
            Level::Note,
            format!("the run-time loader finds no libnccl.so.2, so programs linked against {} need an rpath", n.library.display()),
            Some(format!(
                "LD_LIBRARY_PATH={} or nccl_find::emit_rpath_from_dep in the binary's build script",
                n.lib_dir.display()
            )),
        ),
        // A note: whether it fails depends on what a program needs; the
        // Python area says it for the packages that will run.
        Verdict::OtherOlder(p) => f.add(
            Area::Nccl,
            Level::Note,
            format!(
                "a program linked against the selected NCCL {} with no rpath of its own would map {} (NCCL {}): {}",
                n.library_version,
                report.logical(&p.path).display(),
                p.version.as_ref().map_or("?".into(), |v| v.to_string()),
                match &p.version {
                    Some(_) => "an older minor version, so it fails with `undefined symbol` if it uses what that lacks",
                    None => "its version cannot be read, so it fails with `undefined symbol` if that is older and lacks what it uses",
                }
            ),
            Some(format!(
                "nccl_find::emit_rpath_from_dep in the program's build script (a DT_RPATH wins over LD_LIBRARY_PATH), or put {} first on LD_LIBRARY_PATH",
                n.lib_dir.display()
            )),
        ),
        Verdict::OtherCompatible(p) => {
            let theirs = p.version.as_ref().map_or("?".into(), |v| v.to_string());
            let mine = &n.library_version;
            let why = match &p.version {
                Some(v) if (v.major, v.minor) == (mine.major, mine.minor) => format!(
                    "the same minor version ({}.{}) has the same API, so programs run, with {theirs}'s fixes",
                    mine.major, mine.minor
                ),
                _ => format!("{theirs} is newer, and NCCL runs programs built against older versions"),
            };
            f.add(
                Area::Nccl,
                Level::Note,
                format!(
                    "the run-time loader picks {} (NCCL {theirs}), not the selected NCCL {mine}: {why}",
                    report.logical(&p.path).display(),
                ),
                fix(),
            )
        }
        Verdict::OtherSameVersion(p) => f.add(
            Area::Nccl,
            Level::Note,
            format!(
                "the run-time loader picks {}, another copy of NCCL {}: it works, but it is not the file nccl-find inspected",
                report.logical(&p.path).display(),
                n.library_version
            ),
            fix(),
        ),
        _ => {}
    }
}
