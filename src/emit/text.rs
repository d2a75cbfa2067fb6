//! The human-readable report: what `nccl-find --print` prints, and the body
//! of [`crate::Error`]'s message.

use std::fmt::Write;

use crate::inspect::{Candidate, Status};
use crate::origin::{Package, SourceKind};
use crate::problem::ErrorKind;
use crate::problem::Problem;
use crate::report::Report;
use crate::version::Version;

/// A path for a message: as the report shows it (the root taken off), with
/// control characters and bytes that are not UTF-8 escaped (`\xff`), so
/// that what is printed names the real file.
fn show(r: &Report, p: &std::path::Path) -> String {
    crate::lines::escape_os(r.logical(p).as_os_str())
}

fn describe(r: &Report, c: &Candidate) -> String {
    // The library's version is what runs; a header of another version is
    // named beside it, never mixed into it.
    let runs = c.library_version.as_ref().or(c.version());
    let mut version = match (runs, &c.cuda_version) {
        (Some(v), Some(cu)) => format!("NCCL {v} (CUDA {cu})"),
        (Some(v), None) => format!("NCCL {v}"),
        // NCCL 1 has no version macros: its file name may say more.
        (None, _) if c.problem().is_some_and(Problem::is_nccl1) => match c
            .library
            .as_ref()
            .and_then(|l| l.file_name()?.to_str()?.strip_prefix("libnccl.so.1."))
        {
            Some(rest) => format!("NCCL 1.{rest}"),
            None => "NCCL 1".to_string(),
        },
        (None, _) => "NCCL ?".to_string(),
    };
    if let (Some(hv), Some(lv)) = (&c.header_version, &c.library_version) {
        if hv != lv {
            let _ = write!(version, " with header {hv}");
        }
    }
    format!("{version} at {} — {}", show(r, &c.place), c.origin)
}

/// How near a rejected install came to being usable, lower being nearer:
/// a real NCCL 2 one step from use, then a damaged one, then NCCL 1, then
/// a variable that names nothing.
fn closeness(c: &Candidate) -> u8 {
    match c.problem() {
        None => 0,
        Some(
            Problem::Unsatisfied { .. }
            | Problem::NoHeader { .. }
            | Problem::NoLibrary { .. }
            | Problem::DpkgSkew { .. }
            | Problem::Mismatch { .. }
            | Problem::FileNameMismatch { .. }
            | Problem::NotCarried { .. }
            | Problem::LineBreak { .. }
            | Problem::WheelBelow { .. }
            | Problem::UnbuiltSource { .. },
        ) => 1,
        Some(Problem::Nccl1 { .. }) => 3,
        Some(
            Problem::Missing { .. }
            | Problem::MissingRelative { .. }
            | Problem::InnerDir { .. }
            | Problem::NotADirectory { .. }
            | Problem::NoNccl { .. },
        ) => 4,
        Some(_) => 2,
    }
}

/// The installs that were not selected, nearest to usable first (search
/// order among equals).
fn by_closeness(r: &Report) -> Vec<&Candidate> {
    let mut out = Vec::new();
    for rank in 0..=4 {
        for c in r.others() {
            if closeness(c) == rank {
                out.push(c);
            }
        }
    }
    out
}

/// The install a failed probe's headline names: the one nearest to usable,
/// when nothing was selected and the failure is that none could be used.
fn closest<'r>(kind: &ErrorKind, r: &'r Report) -> Option<&'r Candidate> {
    if *kind != ErrorKind::NotFound || r.selected.is_some() {
        return None;
    }
    let first = *by_closeness(r).first()?;
    (closeness(first) < 3).then_some(first)
}

/// The head of a failure's message: where an install came near, that
/// install (first line) and what it lacks, with the fix (second line);
/// else the kind's own one-line headline.
pub fn headline(kind: &ErrorKind, r: &Report) -> String {
    if let ErrorKind::NoneSatisfies { requirement } = kind {
        return unmet(requirement, r);
    }
    match closest(kind, r) {
        Some(c) => format!(
            "no NCCL here can be used. The nearest: {}\n  {}",
            describe(r, c),
            why(c)
        ),
        None => kind.headline(),
    }
}

/// The headline of an unmet version requirement, the fix first: the pip
/// line that installs a release that meets it, or, where no release
/// nccl-find knows of does, that, with the newest. Never the advice to
/// install what is installed.
fn unmet(requirement: &str, r: &Report) -> String {
    let mut newest_here: Option<&Version> = None;
    for c in &r.candidates {
        if let Some(v) = c.version() {
            let newer = match newest_here {
                Some(n) => (v.major, v.minor, v.patch) > (n.major, n.minor, n.patch),
                None => true,
            };
            if newer {
                newest_here = Some(v);
            }
        }
    }
    let here = match newest_here {
        Some(v) => format!("the newest here is NCCL {v}"),
        None => "none here has a known version".to_string(),
    };
    match (
        crate::problem::pip_pin(requirement, &pip_dist(r)),
        crate::problem::wanted(requirement),
    ) {
        (Some(pin), Some(wanted)) => format!(
            "{pin}, or point NCCL_HOME at an install of {wanted}: no install here satisfies the \
             requirement {requirement} ({here})."
        ),
        _ => {
            let newest = crate::problem::newest_release();
            let here = match newest_here {
                Some(v) if v.to_string() == newest => ", and it is installed here".to_string(),
                _ => format!(" ({here})"),
            };
            format!(
                "lower the requirement {requirement}: no NCCL release nccl-find knows of satisfies it. \
                 The newest is {newest}{here}; if NCCL has released a newer one since, install that."
            )
        }
    }
}

/// The pip distribution to name in a fix: the NCCL wheel already in use
/// (`nvidia-nccl-cu13`), else the one for the CUDA major an install was
/// built for, else `nvidia-nccl-cu12`.
fn pip_dist(r: &Report) -> String {
    for c in &r.candidates {
        if let Some(Package::Pip { name, .. }) = &c.origin.package {
            if name.starts_with("nvidia-nccl-cu") {
                return name.clone();
            }
        }
    }
    for c in &r.candidates {
        if let Some(cuda) = &c.cuda_version {
            if (11..=13).contains(&cuda.major) {
                return format!("nvidia-nccl-cu{}", cuda.major);
            }
        }
    }
    "nvidia-nccl-cu12".to_string()
}

/// Why an install lost or was rejected.
fn why(c: &Candidate) -> String {
    match &c.status {
        Status::Lost(why) => why.clone(),
        Status::Rejected(p) => p.to_string(),
        Status::Selected => String::new(),
    }
}

/// At most this many installs and warnings are listed in a failure's
/// message; `NCCL_FIND_VERBOSE=1` lists all.
const BRIEF_ITEMS: usize = 3;

/// Up to [`BRIEF_ITEMS`] lines under a title, then how many more.
fn some_of(s: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n{title}");
    for item in items.iter().take(BRIEF_ITEMS) {
        let _ = writeln!(s, "  - {item}");
    }
    if items.len() > BRIEF_ITEMS {
        let _ = writeln!(s, "  - and {} more", items.len() - BRIEF_ITEMS);
    }
}

/// The body of a failed probe's message, after its headline: the other
/// installs, nearest first, the warnings, what to do, where to find the
/// rest, and the headline again, last. It fits in 26 lines.
pub fn brief(kind: &ErrorKind, r: &Report) -> String {
    let named = closest(kind, r);
    let explicit = match kind {
        ErrorKind::Explicit { problem, .. } => Some(problem),
        _ => None,
    };
    // The headline's install, or the explicit one it describes, is not
    // listed again.
    let mut others = Vec::new();
    for c in by_closeness(r) {
        let headline_has = named.is_some_and(|n| std::ptr::eq(c, n))
            || (explicit.is_some() && c.problem() == explicit);
        if !headline_has {
            others.push(format!("{}\n      {}", describe(r, c), why(c)));
        }
    }
    let mut s = String::new();
    let title = format!("Other installs found ({}), nearest first:", others.len());
    some_of(&mut s, &title, &others);
    some_of(&mut s, "Warnings:", &r.warnings);
    s.push_str(&advice(kind, r));
    let _ = writeln!(
        s,
        "\nEvery place looked in ({}) and every variable read ({}): NCCL_FIND_VERBOSE=1, or `nccl-find --print`.",
        r.looked.len(),
        r.env.len()
    );
    // The last line is the answer: the cause and its fix, again (where an
    // install came near, what it lacks and the fix).
    let head = headline(kind, r);
    let _ = write!(s, "{}", head.lines().last().unwrap_or_default().trim());
    s
}

/// A loader-visible library's version, in words.
#[cfg(feature = "command")]
fn seen_version(v: &crate::check::loader::Visible) -> String {
    match &v.version {
        Some(v) => format!("NCCL {v}"),
        None => "version unknown".into(),
    }
}

/// The full report, for `--print`: `directives` are the cargo directives a
/// build script would get (empty when nothing was selected). (Feature
/// `command`.) `cuda`, for the selected install: the CUDA include dirs its
/// `nccl.h` needs, or why they are missing
/// ([`crate::Nccl::cuda_include_dirs`]).
#[cfg(feature = "command")]
#[cfg_attr(docsrs, doc(cfg(feature = "command")))]
pub fn report(
    r: &Report,
    error: Option<&ErrorKind>,
    directives: &[String],
    cuda: Option<&Result<Vec<std::path::PathBuf>, String>>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "nccl-find {} — target {}",
        env!("CARGO_PKG_VERSION"),
        r.target
    );
    if let Some(req) = &r.requirement {
        let _ = writeln!(s, "requirement: {req}");
    }
    s.push('\n');
    match r.selected() {
        Some(c) => {
            selected(&mut s, r, c);
            match cuda {
                Some(Ok(dirs)) if !dirs.is_empty() => {
                    let dirs: Vec<String> = dirs.iter().map(|d| show(r, d)).collect();
                    let _ = writeln!(s, "  cuda     {}", dirs.join(", "));
                }
                Some(Err(why)) => {
                    let _ = writeln!(s, "  cuda     no CUDA headers for nccl.h: {why}");
                }
                _ => {}
            }
            if c.build_script_refuses().is_some() {
                let _ = writeln!(
                    s,
                    "\nCargo directives a build script gets: none; it refuses this install (above)."
                );
            } else {
                cargo_directives(&mut s, directives);
            }
        }
        None => {
            let _ = writeln!(s, "Selected: nothing.");
            if let Some(kind) = error {
                let _ = writeln!(s, "{}", headline(kind, r));
            }
        }
    }
    run_time_loader(&mut s, r);
    s.push_str(&details(r));
    if r.selected.is_none() {
        if let Some(kind) = error {
            s.push_str(&advice(kind, r));
        }
    }
    s
}

/// The selected install: where from, header, library, static library.
#[cfg(feature = "command")]
fn selected(s: &mut String, r: &Report, c: &Candidate) {
    let _ = writeln!(s, "Selected: {}", describe(r, c));
    let opt = |p: &Option<std::path::PathBuf>| match p {
        Some(p) => show(r, p),
        None => "none".into(),
    };
    let _ = writeln!(s, "  from     {}", c.origin);
    if let Some(p) = c.build_script_refuses() {
        let _ = writeln!(s, "  refused  by a build script: {p}");
    }
    if let Some(v) = &c.header_version {
        let _ = writeln!(
            s,
            "  header   {} (NCCL {v}, code {})",
            opt(&c.header),
            v.code
        );
    }
    let mut lib = opt(&c.library);
    if let Some(real) = &c.library_real {
        if Some(real) != c.library.as_ref() {
            let _ = write!(lib, " -> {}", show(r, real));
        }
    }
    let _ = writeln!(s, "  library  {lib}");
    let _ = writeln!(
        s,
        "           soname {}; library says NCCL {}{}",
        c.soname.as_deref().unwrap_or("none"),
        crate::version::or_empty(&c.library_version),
        match c.cuda_version {
            Some(cu) => format!("+cuda{cu}"),
            None => String::new(),
        }
    );
    if !c.has_dev_link {
        let _ = writeln!(
            s,
            "           no libnccl.so here: link libnccl.so.2 by file name"
        );
    }
    let _ = writeln!(s, "  static   {}", opt(&c.static_library));
    if c.cmake_config.is_some() {
        let _ = writeln!(s, "  cmake    {}", opt(&c.cmake_config));
    }
    if c.device_header.is_some() || !c.device_bitcode.is_empty() {
        let mut parts = vec![opt(&c.device_header)];
        for b in &c.device_bitcode {
            parts.push(show(r, b));
        }
        let _ = writeln!(s, "  device   {}", parts.join(", "));
    }
    for o in &c.also_found_by {
        let _ = writeln!(s, "  also via {o}");
    }
}

/// The directives a build script gets, the `rerun-if-env-changed` ones
/// folded into one line.
#[cfg(feature = "command")]
fn cargo_directives(s: &mut String, directives: &[String]) {
    if directives.is_empty() {
        return;
    }
    let _ = writeln!(s, "\nCargo directives a build script gets:");
    let env = "cargo:rerun-if-env-changed=";
    let mut n = 0;
    for d in directives {
        n += usize::from(d.starts_with(env));
    }
    let mut said = false;
    for d in directives {
        if !d.starts_with(env) {
            let _ = writeln!(s, "  {d}");
        } else if !said {
            said = true;
            let _ = writeln!(
                s,
                "  {env}<NAME>  (one line for each of the {n} variables read, listed below)"
            );
        }
    }
}

/// Which `libnccl.so.2` the run-time loader picks, and what else it sees.
#[cfg(feature = "command")]
fn run_time_loader(s: &mut String, r: &Report) {
    let _ = writeln!(s, "\nRun-time loader (libnccl.so.2):");
    match &r.loader.pick {
        Some(p) => {
            let same = r.selected().and_then(|c| c.library_real.as_ref()) == Some(&p.real);
            let _ = writeln!(
                s,
                "  picks    {} ({}, via {}){}",
                r.logical(&p.path).display(),
                seen_version(p),
                p.via,
                if same { ": the selected library" } else { "" }
            );
        }
        None => {
            let _ = writeln!(s, "  picks    nothing: no libnccl.so.2 on LD_LIBRARY_PATH, in the loader cache or the default dirs");
        }
    }
    for v in r.loader.visible.iter().skip(1) {
        let _ = writeln!(
            s,
            "  also sees {} ({}, via {})",
            r.logical(&v.path).display(),
            seen_version(v),
            v.via
        );
    }
}

/// Other installs, warnings, search order, places looked, variables read.
pub fn details(r: &Report) -> String {
    let mut s = String::new();
    let others: Vec<&Candidate> = r.others().collect();
    if !others.is_empty() {
        let title = if r.selected.is_some() {
            "Other installs"
        } else {
            "Installs found"
        };
        let _ = writeln!(s, "\n{title} ({}):", others.len());
        for c in others {
            let tag = match &c.status {
                Status::Lost(_) => "lost",
                Status::Rejected(_) => "rejected",
                Status::Selected => "selected",
            };
            let _ = writeln!(s, "  [{tag}] {}", describe(r, c));
            let _ = writeln!(s, "      {}", why(c));
            if let Some(conflict) = &c.conflict {
                let _ = writeln!(s, "      conflict: {conflict}");
            }
            for o in &c.also_found_by {
                let _ = writeln!(s, "      also via {o}");
            }
        }
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(s, "\nWarnings:");
        for w in &r.warnings {
            let _ = writeln!(s, "  - {w}");
        }
    }
    if !r.notes.is_empty() {
        let _ = writeln!(
            s,
            "\nNotes (nothing to act on; a build script does not print these):"
        );
        for n in &r.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
    let _ = writeln!(s, "\nSearch order:");
    for (i, k) in SourceKind::all().enumerate() {
        let _ = writeln!(s, "  {}. {:<13} {}", i + 1, k.name(), k.describe());
    }
    let _ = writeln!(s, "\nLooked in ({} places):", r.looked.len());
    for l in &r.looked {
        let _ = writeln!(s, "  [{}] {}: {}", l.source, show(r, &l.path), l.outcome);
    }
    let _ = writeln!(s, "\nVariables read:");
    for e in &r.env {
        let _ = writeln!(s, "  {e}");
    }
    s
}

/// What to do when the install a variable names cannot be used:
/// `variable` is `NAME=value` (two, joined by `, `, for the pair).
fn explicit_fix(variable: &str, problem: &Problem) -> String {
    let mut names = Vec::new();
    for setting in variable.split(", ") {
        names.push(setting.split('=').next().unwrap_or(setting));
    }
    let wanted = match problem {
        Problem::Unsatisfied { requirement, .. } => crate::problem::wanted(requirement),
        _ => None,
    };
    let fix = match wanted {
        Some(w) => format!("point {} at an install of {w}", names.join(" and ")),
        None => "fix what is described above".to_string(),
    };
    format!(
        "{fix}, or unset {} to let nccl-find search.",
        names.join(" and ")
    )
}

/// What to do, for an error.
pub fn advice(kind: &ErrorKind, r: &Report) -> String {
    let mut s = String::new();
    match kind {
        ErrorKind::OnlyOneOfPair { missing, .. } => {
            let _ = writeln!(s, "  - set {missing} too (to the directory holding libnccl.so*/nccl.h), or unset the other.");
        }
        ErrorKind::InvalidRequirement { .. } => {
            let _ = writeln!(s, "  - write the requirement as a version like \"2.18\" or a semver range like \">=2.18, <3\".");
        }
        ErrorKind::Explicit { variable, problem } => {
            let _ = writeln!(s, "  - {}", explicit_fix(variable, problem));
        }
        // The headline says what to do.
        ErrorKind::NoneSatisfies { .. } => {}
        ErrorKind::OnlyNccl1 { .. } => {
            let _ = writeln!(s, "  - delete the stale NCCL 1 copies listed above (old build caches, old conda packages), then install NCCL 2:");
        }
        // The headline of these says what to do.
        ErrorKind::NotFound
        | ErrorKind::DocsRs
        | ErrorKind::BadValue { .. }
        | ErrorKind::StaticMissing { .. }
        | ErrorKind::CudartStaticMissing { .. }
        | ErrorKind::MissingSymbols { .. }
        | ErrorKind::CompileCheck { .. }
        | ErrorKind::LineBreak { .. } => {}
    }
    // The runtime package's hint, where the headline does not give it.
    let candidates = if closest(kind, r).is_none() {
        &r.candidates[..]
    } else {
        &[]
    };
    for c in candidates {
        if let Some(Problem::NoHeader { hint, .. }) = c.problem() {
            if hint.starts_with("Only the runtime package") {
                let _ = writeln!(s, "  - {hint}");
            }
        }
    }
    // Ways to install NCCL, where nothing came near: never the advice to
    // install what is there already.
    if matches!(kind, ErrorKind::NotFound | ErrorKind::OnlyNccl1 { .. })
        && closest(kind, r).is_none()
    {
        let _ = writeln!(s, "  - pip install nvidia-nccl-cu12        (or -cu13, -cu11 to match your CUDA), inside a virtualenv;");
        let _ = writeln!(s, "    nccl-find then finds it through VIRTUAL_ENV, or set NCCL_HOME=<site-packages>/nvidia/nccl");
        let _ = writeln!(
            s,
            "  - apt install libnccl2 libnccl-dev     (from NVIDIA's CUDA apt repository)"
        );
        let _ = writeln!(
            s,
            "  - conda install -c conda-forge nccl    (in an active conda env)"
        );
        let _ = writeln!(s, "  - or point NCCL_HOME at an install (include/nccl.h, lib/libnccl.so*), or set NCCL_INCLUDE_DIR and NCCL_LIB_DIR");
    }
    if s.is_empty() {
        return s;
    }
    format!("\nWhat to do:\n{s}")
}
