//! What the target triple means for where NCCL lives.

/// Facts about the target that decide directory names.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The triple, e.g. `x86_64-unknown-linux-gnu`.
    pub triple: String,
    /// The triple as a variable prefix, e.g. `X86_64_UNKNOWN_LINUX_GNU`.
    pub env_prefix: String,
    /// Debian's multiarch directory name, e.g. `x86_64-linux-gnu`.
    pub multiarch: Option<&'static str>,
    /// CUDA toolkit `targets/` directory names, e.g. `x86_64-linux`.
    pub cuda_targets: &'static [&'static str],
    /// NVIDIA HPC SDK platform directory, e.g. `Linux_x86_64`.
    pub hpc_sdk: Option<&'static str>,
    /// dpkg's architecture name, e.g. `amd64`.
    pub dpkg_arch: Option<&'static str>,
    /// The ELF `e_machine` of the target's libraries, where known.
    pub elf_machine: Option<(u16, &'static str)>,
}

/// The target this copy of nccl-find was compiled for, from its own cfgs
/// (a library has no build script to read `TARGET` from, and a build script
/// of a -sys crate always has `TARGET` set by cargo).
pub(crate) fn built_for() -> String {
    let arch = if cfg!(all(target_arch = "powerpc64", target_endian = "little")) {
        "powerpc64le"
    } else {
        std::env::consts::ARCH
    };
    let env = if cfg!(target_env = "musl") {
        "musl"
    } else {
        "gnu"
    };
    match std::env::consts::OS {
        "linux" => format!("{arch}-unknown-linux-{env}"),
        os => format!("{arch}-unknown-{os}"),
    }
}

/// The ELF `e_machine` of each architecture NCCL ships for: `(arch names
/// in a triple, e_machine, name in words)`.
const ELF_MACHINES: [(&str, u16, &str); 4] = [
    ("x86_64", 62, "x86-64"),
    ("aarch64", 183, "AArch64"),
    ("powerpc64le", 21, "POWER"),
    ("i686|i586", 3, "i386"),
];

/// An ELF `e_machine` in words (`x86-64`), `unknown` for others.
pub(crate) fn machine_name(machine: u16) -> &'static str {
    for (_, m, name) in ELF_MACHINES {
        if m == machine {
            return name;
        }
    }
    "unknown"
}

impl Target {
    pub fn new(triple: &str) -> Target {
        let arch = triple.split('-').next().unwrap_or("");
        let (multiarch, cuda_targets, hpc_sdk, dpkg_arch): (_, &'static [&'static str], _, _) =
            match arch {
                "x86_64" => (
                    Some("x86_64-linux-gnu"),
                    &["x86_64-linux"],
                    Some("Linux_x86_64"),
                    Some("amd64"),
                ),
                "aarch64" => (
                    Some("aarch64-linux-gnu"),
                    &["sbsa-linux", "aarch64-linux"],
                    Some("Linux_aarch64"),
                    Some("arm64"),
                ),
                "powerpc64le" => (
                    Some("powerpc64le-linux-gnu"),
                    &["ppc64le-linux"],
                    Some("Linux_ppc64le"),
                    Some("ppc64el"),
                ),
                "i686" | "i586" => (Some("i386-linux-gnu"), &[], None, Some("i386")),
                _ => (None, &[], None, None),
            };
        Target {
            triple: triple.to_string(),
            env_prefix: crate::env::target_prefix(triple),
            multiarch,
            cuda_targets,
            hpc_sdk,
            dpkg_arch,
            elf_machine: elf_machine(arch),
        }
    }
}

/// The ELF machine of an architecture (the triple's first part), in number
/// and words.
fn elf_machine(arch: &str) -> Option<(u16, &'static str)> {
    for (arches, m, name) in ELF_MACHINES {
        for a in arches.split('|') {
            if a == arch {
                return Some((m, name));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    #[test]
    fn built_for_names_this_target() {
        assert_eq!(super::built_for(), "x86_64-unknown-linux-gnu");
    }
}
