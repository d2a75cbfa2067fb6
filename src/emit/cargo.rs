//! Cargo directives for build scripts: link flags, `rerun-if-*`, metadata
//! for dependents (`DEP_NCCL_*` when the -sys crate has `links = "nccl"`),
//! and a cfg per API level. The `cargo:` form works with every Cargo.

use std::path::{Path, PathBuf};

use crate::check::{LinkArg, Linking};
use crate::env::EnvRead;
pub use crate::lines::{escape, has_line_break};
use crate::report::Nccl;

/// Prints directives, one per line. A line that holds a line break inside
/// (which would inject further directives) is never printed: a warning with
/// the break escaped is printed instead.
pub fn print(lines: &[String]) {
    for l in lines {
        if has_line_break(l) {
            println!(
                "cargo:warning=nccl-find: a directive was not printed because it holds a line break: {}",
                escape(l)
            );
        } else {
            println!("{l}");
        }
    }
}

/// `rerun-if-env-changed` for every variable read (cargo sets `TARGET` and
/// `HOST` itself). A name with a line break in it (from a strange `TARGET`)
/// cannot be written as a directive and is left out.
pub fn rerun_env(env: &[EnvRead]) -> Vec<String> {
    let mut out = Vec::new();
    for r in env {
        if r.decides() && r.name != "TARGET" && r.name != "HOST" && !has_line_break(&r.name) {
            out.push(format!("cargo:rerun-if-env-changed={}", r.name));
        }
    }
    out
}

/// Everything a build script prints for this install.
pub fn directives(n: &Nccl) -> Vec<String> {
    let mut out = Vec::new();
    let lib_dir = n.lib_dir.display();
    for a in n.linking.args(&n.lib_dir) {
        out.push(match a {
            LinkArg::SearchDir(d) => format!("cargo:rustc-link-search=native={}", d.display()),
            LinkArg::Shared(l) => format!("cargo:rustc-link-lib=dylib={l}"),
            LinkArg::SharedFile(f) => format!("cargo:rustc-link-lib=dylib:+verbatim={f}"),
            LinkArg::Static { name, .. } => format!("cargo:rustc-link-lib=static={name}"),
        });
    }
    out.append(&mut rerun_env(&n.report.env));
    let mut files: Vec<PathBuf> = Vec::new();
    for d in &n.include_paths {
        files.push(d.join("nccl.h"));
    }
    files.push(n.library.clone());
    files.push(n.library_real.clone());
    if let Linking::Static { archive, cudart } = &n.linking {
        files.push(archive.clone());
        files.push(cudart.clone());
    }
    for d in &n.report.watched {
        files.push(d.clone());
    }
    let mut seen: Vec<&Path> = Vec::new();
    for f in &files {
        if !seen.contains(&f.as_path()) {
            seen.push(f);
            out.push(format!("cargo:rerun-if-changed={}", f.display()));
        }
    }
    if let Some(inc) = n.include_paths.first() {
        out.push(format!("cargo:include={}", inc.display()));
    }
    out.push(format!("cargo:lib_dir={lib_dir}"));
    // Under a sysroot, the directory the target will have, for the final
    // binary's rpath (emit_rpath_from_dep).
    if let Ok(rest) = n.lib_dir.strip_prefix(&n.report.root) {
        if n.report.root.parent().is_some() {
            out.push(format!(
                "cargo:run_lib_dir={}",
                Path::new("/").join(rest).display()
            ));
        }
    }
    let root = match &n.root {
        Some(r) => r.clone(),
        None => prefix(n),
    };
    out.push(format!("cargo:root={}", root.display()));
    out.push(format!("cargo:version={}", n.version));
    out.push(format!("cargo:version_code={}", n.version.code));
    if let Some(c) = n.cuda_version {
        out.push(format!("cargo:cuda_version={c}"));
    }
    check_cfg(&mut out);
    for name in crate::api::cfgs_for(n.version.major, n.version.minor, n.version.patch) {
        out.push(format!("cargo:rustc-cfg={name}"));
    }
    for w in &n.report.warnings {
        out.push(format!("cargo:warning=nccl-find: {}", escape(w)));
    }
    out
}

/// `rustc-check-cfg` for every API level's cfg, reached or not, so that
/// `#[cfg(nccl_2_18)]` never warns "unexpected cfg condition name".
fn check_cfg(out: &mut Vec<String>) {
    for (name, ..) in crate::api::LEVELS {
        out.push(format!("cargo:rustc-check-cfg=cfg({name})"));
    }
}

/// What a build script prints under docs.rs (`DOCS_RS` set), where nothing
/// is probed: every level's `rustc-check-cfg`, and every level's
/// `rustc-cfg`, so that the docs show the whole API, each item with the
/// level that gates it.
pub(crate) fn docs_rs() -> Vec<String> {
    let mut out = Vec::new();
    check_cfg(&mut out);
    for (name, ..) in crate::api::LEVELS {
        out.push(format!("cargo:rustc-cfg={name}"));
    }
    out
}

/// For the **final binary's** build script: gives the binary an rpath to
/// the library directory of the NCCL its -sys crate linked, so that it
/// loads that NCCL without `LD_LIBRARY_PATH`. Returns the directory.
///
/// It reads `DEP_NCCL_LIB_DIR`, which cargo passes only to packages that
/// depend *directly* on the `links = "nccl"` crate. A wrapper crate between
/// them (app → wrapper → -sys) passes it on with its own `links` key and
/// one line in its build script:
///
/// ```no_run
/// // build.rs of a wrapper crate with `links = "mywrapper"` in Cargo.toml,
/// // which depends on the `links = "nccl"` -sys crate.
/// if let Some(dir) = std::env::var_os("DEP_NCCL_LIB_DIR") {
///     println!("cargo:nccl_lib_dir={}", dir.to_string_lossy());
/// }
/// ```
///
/// The app's build script then sees `DEP_MYWRAPPER_NCCL_LIB_DIR`, which
/// this function reads when `DEP_NCCL_LIB_DIR` is not there (any
/// `DEP_<LINKS>_NCCL_LIB_DIR`; several that disagree are refused). Or the
/// app depends on the -sys crate itself.
///
/// When neither reaches it, it prints a `cargo:warning` that says so and
/// what to do, and returns `None`: the binary would need `LD_LIBRARY_PATH`.
/// Under docs.rs (`DOCS_RS` set), where the -sys crate probes nothing and
/// nothing is linked, it prints nothing and returns `None`.
///
/// It must live in the final binary's build script: a -sys crate's
/// `rustc-link-arg` does not reach the binaries of the crates that depend
/// on it. A directory the loader or a directive cannot take exactly (a line
/// break, `:` or `$`, not UTF-8) is refused with a warning. The directory is
/// passed to the linker with `-Xlinker`, verbatim, so a comma in it is not
/// split as `-Wl,` would split it.
pub fn emit_rpath_from_dep() -> Option<PathBuf> {
    let vars: Vec<(String, std::ffi::OsString)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .collect();
    let (lines, dir) = rpath_from_vars(&vars);
    print(&lines);
    dir
}

/// What [`emit_rpath_from_dep`] prints, for these variables, and the
/// directory it gives.
pub fn rpath_from_vars(vars: &[(String, std::ffi::OsString)]) -> (Vec<String>, Option<PathBuf>) {
    if vars.iter().any(|(k, _)| k == "DOCS_RS") {
        return (Vec::new(), None);
    }
    let mut out = vec![
        "cargo:rerun-if-env-changed=DEP_NCCL_LIB_DIR".to_string(),
        "cargo:rerun-if-env-changed=DEP_NCCL_RUN_LIB_DIR".to_string(),
    ];
    let warn = |out: &mut Vec<String>, why: String| {
        out.push(format!(
            "cargo:warning=nccl-find: no rpath was given: {}",
            escape(&why)
        ));
    };
    let (name, dir) = match metadata_dir(vars, &mut out) {
        Ok(found) => found,
        Err(why) => {
            warn(&mut out, why);
            return (out, None);
        }
    };
    let mut lines = match rpath_directives(&dir) {
        Ok(lines) => lines,
        Err(why) => {
            warn(&mut out, format!("{name}: {why}"));
            return (out, None);
        }
    };
    // A directory the loader searches anyway needs no rpath, and one there
    // would put every library in it ahead of LD_LIBRARY_PATH.
    let triple = vars.iter().rev().find(|(k, _)| k == "TARGET");
    let triple = triple.map(|(_, v)| v.to_string_lossy().into_owned());
    let target = crate::target::Target::new(&triple.unwrap_or_else(crate::target::built_for));
    for d in crate::check::loader::default_dirs(target.multiarch) {
        if dir == Path::new(&d) {
            return (out, Some(dir));
        }
    }
    // The place it names outlives the build, and no one else may make it.
    let risk = if name.ends_with("_RUN_LIB_DIR") {
        super::durable::lexical_risk(&dir)
    } else {
        super::durable::rpath_risk(&dir)
    };
    if let Some(why) = risk {
        warn(
            &mut out,
            format!(
                "{why}. Install NCCL in a directory of your own outside any temporary or shared \
                 directory (a virtualenv under your home, say), or start the program with \
                 LD_LIBRARY_PATH naming it"
            ),
        );
        return (out, None);
    }
    out.append(&mut lines);
    (out, Some(dir))
}

/// The variable that names NCCL's directory for the final binary, and the
/// directory; or why there is none. A rerun line for each wrapper's
/// variable goes to `out`.
///
/// The -sys crate's own (`DEP_NCCL_RUN_LIB_DIR`, the directory the target
/// will have under a sysroot, else `DEP_NCCL_LIB_DIR`) comes first; then
/// wrappers' that pass it on under links keys of their own
/// (`DEP_<KEY>_NCCL_RUN_LIB_DIR`, else `DEP_<KEY>_NCCL_LIB_DIR`), which must
/// agree.
fn metadata_dir(
    vars: &[(String, std::ffi::OsString)],
    out: &mut Vec<String>,
) -> Result<(String, PathBuf), String> {
    let get = |name: &str| vars.iter().rev().find(|(k, _)| k == name);
    let direct = get("DEP_NCCL_RUN_LIB_DIR").or_else(|| get("DEP_NCCL_LIB_DIR"));
    let mut passed: Vec<&(String, std::ffi::OsString)> = Vec::new();
    for v in vars {
        let k = &v.0;
        let own = k == "DEP_NCCL_LIB_DIR" || k == "DEP_NCCL_RUN_LIB_DIR";
        if !k.starts_with("DEP_") || own {
            continue;
        }
        if k.ends_with("_NCCL_RUN_LIB_DIR") {
            out.push(format!("cargo:rerun-if-env-changed={k}"));
            passed.push(v);
        } else if let Some(key) = k.strip_suffix("_NCCL_LIB_DIR") {
            out.push(format!("cargo:rerun-if-env-changed={k}"));
            if get(&format!("{key}_NCCL_RUN_LIB_DIR")).is_none() {
                passed.push(v);
            }
        }
    }
    match (direct, passed.first()) {
        (Some((k, v)), _) => Ok((k.clone(), PathBuf::from(v))),
        (None, Some((k, v))) if passed.iter().all(|p| p.1 == *v) => {
            Ok((k.clone(), PathBuf::from(v)))
        }
        (None, Some(_)) => {
            let names: Vec<&str> = passed.iter().map(|p| p.0.as_str()).collect();
            Err(format!(
                "{} disagree: keep one NCCL in the build",
                names.join(", ")
            ))
        }
        (None, None) => Err(
            "DEP_NCCL_LIB_DIR is not set: cargo passes it only to packages that depend directly on \
             the `links = \"nccl\"` -sys crate, so the binary will need LD_LIBRARY_PATH to start. Add that \
             -sys crate to this package's [dependencies], or have the crate in between re-emit it (a \
             `links` key of its own, and `cargo:nccl_lib_dir=<its DEP_NCCL_LIB_DIR>` in its build script)."
                .to_string(),
        ),
    }
}

/// The directives that give a binary an rpath to `dir` that wins over
/// `LD_LIBRARY_PATH`: `-Wl,--disable-new-dtags` (the linker then writes
/// `DT_RPATH`, which the loader searches before `LD_LIBRARY_PATH`, instead
/// of `DT_RUNPATH`, searched after it) and
/// `-Xlinker -rpath -Xlinker <dir>`, so that no character of the directory
/// is interpreted (`-Wl,-rpath,<dir>` would split it at commas). Refused when `dir` is not
/// UTF-8 or holds a line break, which a directive cannot carry, or a `:`
/// (the loader splits an rpath there, and a relative half would be searched
/// from wherever the program starts) or a `$` (the loader expands
/// `$ORIGIN`, `$LIB`, `$PLATFORM` in it).
pub fn rpath_directives(dir: &Path) -> Result<Vec<String>, String> {
    let Some(text) = dir.to_str() else {
        return Err(format!(
            "{} is not valid UTF-8, which a cargo directive cannot carry",
            dir.display()
        ));
    };
    if has_line_break(text) {
        return Err(format!(
            "{} holds a line break, which a cargo directive cannot carry",
            escape(text)
        ));
    }
    for (c, why) in [
        (':', "the loader splits an rpath at `:`"),
        ('$', "the loader expands `$` in an rpath"),
    ] {
        if text.contains(c) {
            return Err(format!(
                "{} holds `{c}`, and {why}: move NCCL to a directory without it, or set \
                 LD_LIBRARY_PATH",
                escape(text)
            ));
        }
    }
    Ok(vec![
        "cargo:rustc-link-arg=-Wl,--disable-new-dtags".into(),
        "cargo:rustc-link-arg=-Xlinker".into(),
        "cargo:rustc-link-arg=-rpath".into(),
        "cargo:rustc-link-arg=-Xlinker".into(),
        format!("cargo:rustc-link-arg={text}"),
    ])
}

/// The install prefix where no source named a root: the deepest directory
/// holding both the include dir and the library dir (`/usr` for
/// `/usr/include` + `/usr/lib/x86_64-linux-gnu`), else the library dir's
/// parent.
fn prefix(n: &Nccl) -> PathBuf {
    let lib = &n.lib_dir;
    if let Some(inc) = n.include_paths.first() {
        let mut common = PathBuf::new();
        let mut lib_parts = lib.components();
        for a in inc.components() {
            if lib_parts.next() != Some(a) {
                break;
            }
            common.push(a);
        }
        if common.parent().is_some() {
            return common;
        }
    }
    lib.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl Nccl {
    /// The cargo directives a build script gets for this install.
    pub fn cargo_directives(&self) -> Vec<String> {
        directives(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpath_directive() {
        assert_eq!(
            rpath_directives(Path::new("/opt/nccl,x/lib")).unwrap(),
            [
                "cargo:rustc-link-arg=-Wl,--disable-new-dtags",
                "cargo:rustc-link-arg=-Xlinker",
                "cargo:rustc-link-arg=-rpath",
                "cargo:rustc-link-arg=-Xlinker",
                "cargo:rustc-link-arg=/opt/nccl,x/lib"
            ]
        );
        assert_eq!(
            rpath_directives(Path::new("/opt/a\ncargo:rustc-cfg=evil"))
                .unwrap_err(),
            "/opt/a\\ncargo:rustc-cfg=evil holds a line break, which a cargo directive cannot carry"
        );
        // What the loader would split or expand never reaches RUNPATH.
        for (dir, c, why) in [
            ("/opt/nccl:v2/lib", ':', "the loader splits an rpath at `:`"),
            ("/opt/:/lib", ':', "the loader splits an rpath at `:`"),
            (
                "/opt/$ORIGIN/lib",
                '$',
                "the loader expands `$` in an rpath",
            ),
            ("/opt/nccl$$/lib", '$', "the loader expands `$` in an rpath"),
        ] {
            assert_eq!(
                rpath_directives(Path::new(dir)).unwrap_err(),
                format!(
                    "{dir} holds `{c}`, and {why}: move NCCL to a directory without it, or set \
                     LD_LIBRARY_PATH"
                )
            );
        }
    }

    // Long: one case after another, each with its exact lines.
    #[test]
    fn emit_rpath_from_dep_reads_the_sys_crates_or_a_wrappers_metadata_and_is_never_silent() {
        use std::ffi::OsString;
        let rpath = |d: &str| {
            vec![
                "cargo:rustc-link-arg=-Wl,--disable-new-dtags".to_string(),
                "cargo:rustc-link-arg=-Xlinker".to_string(),
                "cargo:rustc-link-arg=-rpath".to_string(),
                "cargo:rustc-link-arg=-Xlinker".to_string(),
                format!("cargo:rustc-link-arg={d}"),
            ]
        };
        let run = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, OsString)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), OsString::from(v)))
                .collect();
            rpath_from_vars(&vars)
        };
        let rerun = [
            "cargo:rerun-if-env-changed=DEP_NCCL_LIB_DIR".to_string(),
            "cargo:rerun-if-env-changed=DEP_NCCL_RUN_LIB_DIR".to_string(),
        ];
        // A direct dependent of the -sys crate.
        let (lines, dir) = run(&[("DEP_NCCL_LIB_DIR", "/opt/nccl/lib"), ("PATH", "/bin")]);
        assert_eq!(dir.as_deref(), Some(Path::new("/opt/nccl/lib")));
        assert_eq!(lines, [rerun.to_vec(), rpath("/opt/nccl/lib")].concat());
        // Through a wrapper that re-emits it under its own links key.
        let (lines, dir) = run(&[("DEP_MYWRAP_NCCL_LIB_DIR", "/w/lib")]);
        assert_eq!(dir.as_deref(), Some(Path::new("/w/lib")));
        let wrap = "cargo:rerun-if-env-changed=DEP_MYWRAP_NCCL_LIB_DIR".to_string();
        assert_eq!(
            lines,
            [rerun.to_vec(), vec![wrap.clone()], rpath("/w/lib")].concat()
        );
        // Two wrappers that agree, and two that do not.
        let (_, dir) = run(&[
            ("DEP_A_NCCL_LIB_DIR", "/w/lib"),
            ("DEP_B_NCCL_LIB_DIR", "/w/lib"),
        ]);
        assert_eq!(dir.as_deref(), Some(Path::new("/w/lib")));
        let (lines, dir) = run(&[("DEP_A_NCCL_LIB_DIR", "/a"), ("DEP_B_NCCL_LIB_DIR", "/b")]);
        assert_eq!(dir, None);
        assert_eq!(
            lines.last().unwrap(),
            "cargo:warning=nccl-find: no rpath was given: DEP_A_NCCL_LIB_DIR, DEP_B_NCCL_LIB_DIR \
             disagree: keep one NCCL in the build"
        );
        // Under docs.rs the -sys crate probes nothing, so nothing reaches it:
        // nothing to say, and no blame on the dependency graph.
        let (lines, dir) = run(&[("DOCS_RS", "1"), ("PATH", "/bin")]);
        assert_eq!((lines, dir), (Vec::<String>::new(), None));
        // Nothing reaches it: a warning that says why and what to do.
        let (lines, dir) = run(&[("PATH", "/bin")]);
        assert_eq!(dir, None);
        assert_eq!(
            lines,
            [
                rerun[0].clone(),
                rerun[1].clone(),
                "cargo:warning=nccl-find: no rpath was given: DEP_NCCL_LIB_DIR is not set: cargo passes \
                 it only to packages that depend directly on the `links = \"nccl\"` -sys crate, so the \
                 binary will need LD_LIBRARY_PATH to start. Add that -sys crate to this package's \
                 [dependencies], or have the crate in between re-emit it (a `links` key of its own, and \
                 `cargo:nccl_lib_dir=<its DEP_NCCL_LIB_DIR>` in its build script)."
                    .to_string()
            ]
        );
        // A directory the loader would split.
        let (lines, dir) = run(&[("DEP_NCCL_LIB_DIR", "/x/nccl:v2/lib")]);
        assert_eq!(dir, None);
        assert_eq!(
            lines.last().unwrap(),
            "cargo:warning=nccl-find: no rpath was given: DEP_NCCL_LIB_DIR: /x/nccl:v2/lib holds `:`, \
             and the loader splits an rpath at `:`: move NCCL to a directory without it, or set \
             LD_LIBRARY_PATH"
        );
        // Under a sysroot the -sys crate says where the target has it; a
        // wrapper passes that on beside the lib dir.
        let (lines, dir) = run(&[
            ("DEP_NCCL_LIB_DIR", "/sysroot/opt/nccl/lib"),
            ("DEP_NCCL_RUN_LIB_DIR", "/opt/nccl/lib"),
        ]);
        assert_eq!(dir.as_deref(), Some(Path::new("/opt/nccl/lib")));
        assert_eq!(lines, [rerun.to_vec(), rpath("/opt/nccl/lib")].concat());
        let (_, dir) = run(&[
            ("DEP_W_NCCL_LIB_DIR", "/sysroot/opt/nccl/lib"),
            ("DEP_W_NCCL_RUN_LIB_DIR", "/opt/nccl/lib"),
        ]);
        assert_eq!(dir.as_deref(), Some(Path::new("/opt/nccl/lib")));
        // A directory the loader searches by default gets no rpath: it needs
        // none, and one there would put every library in it ahead of
        // LD_LIBRARY_PATH.
        for d in ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib"] {
            let (lines, dir) = run(&[
                ("DEP_NCCL_LIB_DIR", d),
                ("TARGET", "x86_64-unknown-linux-gnu"),
            ]);
            assert_eq!(
                (lines, dir.as_deref()),
                (rerun.to_vec(), Some(Path::new(d)))
            );
        }
        // A directory another user could make again once it is gone: no
        // rpath, and a warning that says why and what to do.
        for (d, why) in [
            (
                "/tmp/venv/lib/python3.11/site-packages/nvidia/nccl/lib",
                "/tmp/venv/lib/python3.11/site-packages/nvidia/nccl/lib lies in the temporary \
                 directory /tmp, which is cleaned, and where another user could re-create it once it \
                 is gone",
            ),
            (
                "/home/u/cargo-installQ1w2E3/release/build/x/out/nccl-loader",
                "/home/u/cargo-installQ1w2E3/release/build/x/out/nccl-loader is inside \
                 /home/u/cargo-installQ1w2E3, the temporary build directory of `cargo install`, which \
                 is deleted when the install ends",
            ),
        ] {
            let (lines, dir) = run(&[("DEP_NCCL_LIB_DIR", d)]);
            assert_eq!(dir, None);
            assert_eq!(
                lines.last().unwrap(),
                &format!(
                    "cargo:warning=nccl-find: no rpath was given: {why}. Install NCCL in a directory of \
                     your own outside any temporary or shared directory (a virtualenv under your home, \
                     say), or start the program with LD_LIBRARY_PATH naming it"
                )
            );
        }
    }
}
