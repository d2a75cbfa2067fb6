//! The human-readable report: what `nccl-find --print` prints, and the body
//! of [`crate::Error`]'s message.

use std::fmt::Write;

use crate::inspect::{Candidate, Status};
use crate::origin::SourceKind;
use crate::problem::ErrorKind;
use crate::problem::Problem;
use crate::report::Report;

fn describe(r: &Report, c: &Candidate) -> String {
    // The library's version is what runs; a header of another version is
    // named beside it, never mixed into it.
    let runs = c.library_version.as_ref().or(c.version());
    let mut version = match (runs, &c.cuda_version) {
        (Some(v), Some(cu)) => format!("NCCL {v} (CUDA {cu})"),
        (Some(v), None) => format!("NCCL {v}"),
        (None, _) => "NCCL ?".to_string(),
    };
    if let (Some(hv), Some(lv)) = (&c.header_version, &c.library_version) {
        if hv != lv {
            let _ = write!(version, " with header {hv}");
        }
    }
    format!(
        "{version} at {} — {}",
        r.logical(&c.place).display(),
        c.origin
    )
}

/// A loader-visible library's version, in words.
fn seen_version(v: &crate::check::loader::Visible) -> String {
    match &v.version {
        Some(v) => format!("NCCL {v}"),
        None => "version unknown".into(),
    }
}

/// The full report, for `--print`: `directives` are the cargo directives a
/// build script would get (empty when nothing was selected).
pub fn report(r: &Report, error: Option<&ErrorKind>, directives: &[String]) -> String {
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
            cargo_directives(&mut s, directives);
        }
        None => {
            let _ = writeln!(s, "Selected: nothing.");
            if let Some(kind) = error {
                let _ = writeln!(s, "{}", kind.headline());
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
fn selected(s: &mut String, r: &Report, c: &Candidate) {
    let _ = writeln!(s, "Selected: {}", describe(r, c));
    let show = |p: &Option<std::path::PathBuf>| match p {
        Some(p) => r.logical(p).display().to_string(),
        None => "none".into(),
    };
    let _ = writeln!(s, "  from     {}", c.origin);
    if let Some(v) = &c.header_version {
        let _ = writeln!(
            s,
            "  header   {} (NCCL {v}, code {})",
            show(&c.header),
            v.code
        );
    }
    let mut lib = show(&c.library);
    if let Some(real) = &c.library_real {
        if Some(real) != c.library.as_ref() {
            let _ = write!(lib, " -> {}", r.logical(real).display());
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
    let _ = writeln!(s, "  static   {}", show(&c.static_library));
    for o in &c.also_found_by {
        let _ = writeln!(s, "  also via {o}");
    }
}

/// The directives a build script gets, the `rerun-if-env-changed` ones
/// folded into one line.
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
            let (tag, why) = match &c.status {
                Status::Lost(why) => ("lost", why.clone()),
                Status::Rejected(p) => ("rejected", p.to_string()),
                Status::Selected => ("selected", String::new()),
            };
            let _ = writeln!(s, "  [{tag}] {}", describe(r, c));
            let _ = writeln!(s, "      {why}");
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
    let _ = writeln!(s, "\nSearch order:");
    for (i, k) in SourceKind::all().enumerate() {
        let _ = writeln!(s, "  {}. {:<13} {}", i + 1, k.name(), k.describe());
    }
    let _ = writeln!(s, "\nLooked in ({} places):", r.looked.len());
    for l in &r.looked {
        let _ = writeln!(
            s,
            "  [{}] {}: {}",
            l.source,
            r.logical(&l.path).display(),
            l.outcome
        );
    }
    let _ = writeln!(s, "\nVariables read:");
    for e in &r.env {
        let _ = writeln!(s, "  {e}");
    }
    s
}

/// What to do, for an error.
pub fn advice(kind: &ErrorKind, r: &Report) -> String {
    let mut s = String::from("\nWhat to do:\n");
    match kind {
        ErrorKind::OnlyOneOfPair { missing, .. } => {
            let _ = writeln!(s, "  - set {missing} too (to the directory holding libnccl.so*/nccl.h), or unset the other.");
        }
        ErrorKind::InvalidRequirement { .. } => {
            let _ = writeln!(s, "  - write the requirement as a version like \"2.18\" or a semver range like \">=2.18, <3\".");
        }
        ErrorKind::Explicit { variable, .. } => {
            let _ = writeln!(
                s,
                "  - fix what is described above, or unset {variable} to let nccl-find search."
            );
        }
        ErrorKind::NoneSatisfies { requirement } => {
            let _ = writeln!(s, "  - install NCCL {requirement}, e.g. pip install nvidia-nccl-cu12 (the newest), and use that virtualenv.");
        }
        ErrorKind::OnlyNccl1 => {
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
    for c in &r.candidates {
        if let Some(Problem::NoHeader { hint, .. }) = c.problem() {
            if hint.starts_with("Only the runtime package") {
                let _ = writeln!(s, "  - {hint}");
            }
        }
    }
    if matches!(kind, ErrorKind::NotFound | ErrorKind::OnlyNccl1) {
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
    s
}
