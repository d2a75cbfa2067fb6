//! A source: the system directories. dpkg's `/usr/include` +
//! `/usr/lib/<multiarch>`, named and versioned from the dpkg database
//! (`/var/lib/dpkg/status`, `/var/lib/dpkg/info/libnccl*.list`); rpm's
//! `/usr/lib64`; `/usr/lib`; and `/usr/local` (NCCL's `make install`).
//!
//! The database diagnoses two cases: `libnccl2` without `libnccl-dev` (no
//! header, no `libnccl.so`), and the two packages at different versions.

use std::path::{Path, PathBuf};

use super::{Ctx, Origin, Package, Site, SourceKind};
use crate::problem::Problem;

/// One installed package from the dpkg status file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DpkgPackage {
    /// `Package:`.
    pub name: String,
    /// `Version:`.
    pub version: String,
    /// `Architecture:`.
    pub arch: String,
}

/// The installed `libnccl*` packages in a dpkg status file's text.
/// Malformed stanzas are skipped; this never fails.
pub fn parse_dpkg_status(text: &str) -> Vec<DpkgPackage> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let (mut name, mut version, mut arch, mut installed) = (None, None, String::new(), false);
        for line in stanza.lines() {
            if line.starts_with(' ') || line.starts_with('\t') {
                continue;
            }
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k {
                "Package" => name = Some(v.to_string()),
                "Version" => version = Some(v.to_string()),
                "Architecture" => arch = v.to_string(),
                "Status" => installed = v.ends_with(" installed"),
                _ => {}
            }
        }
        if let (Some(name), Some(version), true) = (name, version, installed) {
            if name.starts_with("libnccl") {
                out.push(DpkgPackage {
                    name,
                    version,
                    arch,
                });
            }
        }
    }
    out
}

/// The dpkg site (named by its packages when there are any), then the rpm,
/// `/usr/lib` and `/usr/local` layouts.
pub(crate) fn sites(ctx: &Ctx) -> Vec<Site> {
    let packages = installed_packages(ctx);
    let mut out: Vec<Site> = Vec::new();
    if let Some(ma) = ctx.target.multiarch {
        out.push(dpkg_site(
            ctx,
            &ctx.path("/usr/lib").join(ma),
            find_package(ctx, &packages, "libnccl2"),
            find_package(ctx, &packages, "libnccl-dev"),
        ));
    }
    for (inc, lib, what) in [
        ("/usr/include", &["/usr/lib64"][..], "rpm layout"),
        ("/usr/include", &["/usr/lib"][..], "system dirs"),
        (
            "/usr/local/include",
            &["/usr/local/lib", "/usr/local/lib64"][..],
            "/usr/local",
        ),
    ] {
        let inc = ctx.path(inc);
        let mut libs: Vec<PathBuf> = Vec::new();
        for l in lib {
            libs.push(ctx.path(*l));
        }
        let detail = format!("{what} {} + {}", ctx.show(&inc), ctx.show(&libs[0]));
        out.push(Site::new(
            Origin {
                source: SourceKind::System,
                variable: None,
                package: None,
                detail,
            },
            vec![inc],
            libs,
        ));
    }
    out
}

/// The package named `name` built for the target (or for all).
fn find_package<'a>(ctx: &Ctx, packages: &'a [DpkgPackage], name: &str) -> Option<&'a DpkgPackage> {
    for p in packages {
        let arch_fits = p.arch == "all" || Some(p.arch.as_str()) == ctx.target.dpkg_arch;
        if arch_fits && p.name == name {
            return Some(p);
        }
    }
    None
}

/// The `libnccl*` packages in dpkg's status file (recorded as looked at);
/// none when there is no dpkg, with a warning when the file cannot be read.
fn installed_packages(ctx: &Ctx) -> Vec<DpkgPackage> {
    let status_file = ctx.path("/var/lib/dpkg/status");
    match crate::files::read_bounded(&status_file, 256 << 20) {
        Ok(bytes) => {
            let p = parse_dpkg_status(&String::from_utf8_lossy(&bytes));
            let mut outcome = String::new();
            if p.is_empty() {
                outcome.push_str("no libnccl packages installed");
            }
            // `<name> <version>`, joined by commas.
            let mut sep = "";
            for package in &p {
                outcome.push_str(sep);
                sep = ", ";
                outcome.push_str(&package.name);
                outcome.push(' ');
                outcome.push_str(&package.version);
            }
            ctx.looked(SourceKind::System, &status_file, outcome);
            p
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            ctx.warn(format!(
                "{} cannot be read ({e}); dpkg's NCCL packages are not known. Check that file.",
                ctx.show(&status_file)
            ));
            Vec::new()
        }
    }
}

/// `/usr/include` + `/usr/lib/<multiarch>` (or where the packages' file
/// lists put them), named and versioned by `libnccl2` and `libnccl-dev`,
/// with the fault of packages at different versions.
fn dpkg_site(
    ctx: &Ctx,
    default_lib: &Path,
    runtime: Option<&DpkgPackage>,
    dev: Option<&DpkgPackage>,
) -> Site {
    let lib_dir = match listed_dir(ctx, runtime, "libnccl.so.2") {
        Some(dir) => dir,
        None => default_lib.to_path_buf(),
    };
    let inc_dir = match listed_dir(ctx, dev, "nccl.h") {
        Some(dir) => dir,
        None => ctx.path("/usr/include"),
    };
    let package = match (runtime, dev) {
        (None, None) => None,
        _ => Some(Package::Dpkg {
            runtime: version_of(runtime),
            dev: version_of(dev),
        }),
    };
    let what = match &package {
        Some(_) => "dpkg packages (",
        None => "system dirs ",
    };
    let close = if package.is_some() { ")" } else { "" };
    let detail = format!(
        "{what}{} + {}{close}",
        ctx.show(&inc_dir),
        ctx.show(&lib_dir)
    );
    let mut site = Site::new(
        Origin {
            source: SourceKind::System,
            variable: None,
            package,
            detail,
        },
        vec![inc_dir],
        vec![lib_dir],
    );
    if let (Some(r), Some(d)) = (runtime, dev) {
        if r.version != d.version {
            site.fault = Some(Problem::DpkgSkew {
                runtime: r.version.clone(),
                dev: d.version.clone(),
            });
        }
    }
    site
}

fn version_of(package: Option<&DpkgPackage>) -> Option<String> {
    Some(package?.version.clone())
}

/// The directory of the first file named `file` in the package's dpkg list.
fn listed_dir(ctx: &Ctx, pkg: Option<&DpkgPackage>, file: &str) -> Option<PathBuf> {
    let pkg = pkg?;
    let info = ctx.path("/var/lib/dpkg/info");
    let names = [
        format!("{}.list", pkg.name),
        format!("{}:{}.list", pkg.name, pkg.arch),
    ];
    let mut text = None;
    for n in &names {
        if let Ok(bytes) = crate::files::read_bounded(&info.join(n), 16 << 20) {
            text = Some(bytes);
            break;
        }
    }
    for line in String::from_utf8_lossy(&text?).lines() {
        let p = Path::new(line.trim());
        let Some(name) = p.file_name() else {
            continue;
        };
        if name != file {
            continue;
        }
        if let Some(parent) = p.parent() {
            return Some(ctx.path(parent));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_installed_nccl_packages_only() {
        let text = "Package: libnccl2\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.28.3-1+cuda13.0\nDescription: x\n more\n\n\
                    Package: libnccl-dev\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 2.27.7-1+cuda12.9\n\n\
                    Package: zlib1g\nStatus: install ok installed\nVersion: 1\n";
        assert_eq!(
            parse_dpkg_status(text),
            [DpkgPackage {
                name: "libnccl2".into(),
                version: "2.28.3-1+cuda13.0".into(),
                arch: "amd64".into()
            }]
        );
    }
}
