//! What the library's integration tests (`tests/common/mod.rs`) and the
//! command's (`cli/tests/common/mod.rs`) share, in one copy: the scratch
//! directory and the variables that steer a probe.

use std::path::{Path, PathBuf};

/// A fresh, empty directory of this test's own under cargo's scratch
/// directory for tests: `<test file>-<tag>-<pid>`, emptied if an earlier
/// run left it.
pub fn scratch(tag: &str) -> PathBuf {
    let name = format!("{}-{tag}-{}", env!("CARGO_CRATE_NAME"), std::process::id());
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every variable that steers where a probe looks, what a build links or
/// what a program loads: a test takes them all out, then sets its own.
pub const STEERING: &[&str] = &[
    "NCCL_HOME",
    "NCCL_ROOT",
    "NCCL_DIR",
    "NCCL_SOURCE_DIR",
    "NCCL_INCLUDE_DIR",
    "NCCL_LIB_DIR",
    "NCCL_STATIC",
    "NCCL_SYSROOT",
    "NCCL_NO_PKG_CONFIG",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTHONPATH",
    "PYTHONUSERBASE",
    "PYENV_ROOT",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LIBRARY_PATH",
    "PKG_CONFIG_PATH",
    "PKG_CONFIG_LIBDIR",
    "SPACK_ROOT",
    "EBROOTNCCL",
    "NVHPC_ROOT",
    "CMAKE_PREFIX_PATH",
];
