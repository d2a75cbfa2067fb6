//! `--json`: the report as a stable JSON object. The keys `schema`,
//! `found`, `selected`, `candidates`, `loader` and `env` and their fields,
//! listed in the README, are fixed; others may be added. `schema` is the
//! version of this format, raised whenever a documented key changes shape.

use std::path::Path;

use nccl_find::explain::{Candidate, Package, SourceKind};
use nccl_find::{Nccl, Report};
use serde_json::{json, Value};

/// The version of this format. 1: `source` was a string (the source's
/// name). 2: `source` is an object, `{"kind", "display"}`.
pub const SCHEMA: u32 = 2;

/// A source as tools read it: a fixed identifier, and words for people.
fn source(kind: SourceKind, display: &str) -> Value {
    json!({"kind": kind.id(), "display": display})
}

/// A path: exact where it is UTF-8, else with each byte that is not written
/// as `\xNN` (such an install also has `build_script_refuses`).
fn path(p: &Path) -> Value {
    match p.to_str() {
        Some(s) => Value::String(s.to_string()),
        None => Value::String(nccl_find::internal::escape_os(p.as_os_str())),
    }
}

fn opt_path(p: Option<&Path>) -> Value {
    p.map_or(Value::Null, path)
}

fn package(p: &Option<Package>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => Value::Object(
            p.fields()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.map_or(Value::Null, Value::String)))
                .collect(),
        ),
    }
}

fn candidate(c: &Candidate) -> Value {
    let (status, reason) = (c.status.id(), c.status.reason());
    json!({
        "path": path(&c.place),
        "version": c.version().map(|v| v.to_string()),
        "source": source(c.origin.source, &c.origin.detail),
        "accepted": c.is_usable(),
        "reason": reason,
        "status": status,
        "origin": c.origin.detail,
        "variable": c.origin.variable,
        "package": package(&c.origin.package),
        "header": opt_path(c.header.as_deref()),
        "library": opt_path(c.library.as_deref()),
        "library_version": c.library_version.as_ref().map(|v| v.to_string()),
        "cuda_version": c.cuda_version.map(|v| v.to_string()),
        "conflict": c.conflict,
        "also_found_by": c.also_found_by.iter().map(|o| o.detail.clone()).collect::<Vec<_>>(),
        "build_script_refuses": c.build_script_refuses().map(|p| p.to_string()),
        "cmake_config": opt_path(c.cmake_config.as_deref()),
        "device_header": opt_path(c.device_header.as_deref()),
        "device_bitcode": c.device_bitcode.iter().map(|p| path(p)).collect::<Vec<_>>(),
    })
}

/// The whole report; `error` is the failure's headline, if it failed.
pub fn report(r: &Report, n: Option<&Nccl>, error: Option<&str>) -> String {
    let selected = match n {
        None => Value::Null,
        Some(n) => json!({
            "version": n.version.to_string(),
            "version_code": n.version.code,
            "cuda_version": n.cuda_version.map(|v| v.to_string()),
            "include_dir": opt_path(n.include_paths.first().map(|p| p.as_path())),
            "lib_dir": path(&n.lib_dir),
            "library": path(&n.library),
            "library_real": path(&n.library_real),
            "library_version": n.library_version.to_string(),
            "static_library": opt_path(n.static_library.as_deref()),
            "soname": n.soname,
            "source": source(n.origin.source, &n.origin.detail),
            "origin": n.origin.detail,
            "variable": n.origin.variable,
            "package": package(&n.origin.package),
            "root": opt_path(n.root.as_deref()),
            "linking": n.linking.id(),
            "cuda_include_dirs": match &n.cuda_include_dirs {
                Ok(d) => d.iter().map(|p| path(p)).collect::<Vec<_>>(),
                Err(_) => Vec::new(),
            },
            "cuda_headers_missing": n.cuda_include_dirs.as_ref().err(),
            "cargo_directives": n.cargo_directives(),
            "cmake_config": opt_path(n.cmake_config.as_deref()),
            "device_header": opt_path(n.device_header.as_deref()),
            "device_bitcode": n.device_bitcode.iter().map(|p| path(p)).collect::<Vec<_>>(),
        }),
    };
    let visible = |v: &nccl_find::explain::Visible| {
        json!({
            "path": path(&v.path),
            "real": path(&v.real),
            "via": v.via,
            "version": v.version.as_ref().map(|v| v.to_string()),
        })
    };
    let out = json!({
        "schema": SCHEMA,
        "found": n.is_some(),
        "selected": selected,
        "candidates": r.candidates.iter().map(candidate).collect::<Vec<_>>(),
        "loader": {
            "pick": r.loader.pick.as_ref().map(visible),
            "visible": r.loader.visible.iter().map(visible).collect::<Vec<_>>(),
        },
        "env": r.env.iter().map(|e| json!({
            "name": e.name,
            "value": e.value.as_ref().map(|v| v.to_string_lossy().into_owned()),
        })).collect::<Vec<_>>(),
        "error": error,
        "warnings": r.warnings,
        "notes": r.notes,
        "target": r.target,
        "requirement": r.requirement,
        "looked": r.looked.iter().map(|l| json!({
            "source": source(l.source, l.source.name()),
            "path": path(&l.path),
            "outcome": l.outcome,
        })).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&out).expect("JSON from plain values")
}

/// Lets a write to a closed pipe (`nccl-find --json | head -c 20`) end the
/// process quietly, as it does other Unix tools, instead of a panic. Not for
/// `smoke`, which talks to sockets and handles its own output.
pub fn quiet_on_closed_pipe() {
    // SAFETY: restores the default action of one signal before any thread
    // is started; no handler code runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
