//! A source: `NCCL_INCLUDE_DIR` + `NCCL_LIB_DIR` (the pair Makefile and CMake builds often set by hand). Both or
//! neither: one alone is an error that says which one is missing.

use super::{Ctx, Origin, Site, SourceKind};
use crate::problem::ErrorKind;

pub(crate) fn sites(ctx: &Ctx) -> Result<Vec<Site>, ErrorKind> {
    let inc = ctx.var_path("NCCL_INCLUDE_DIR");
    let lib = ctx.var_path("NCCL_LIB_DIR");
    let ((iv, idir), (lv, ldir)) = match (inc, lib) {
        (None, None) => return Ok(Vec::new()),
        (Some((v, _)), None) => {
            return Err(ErrorKind::OnlyOneOfPair {
                set: v.setting(),
                missing: "NCCL_LIB_DIR",
            })
        }
        (None, Some((v, _))) => {
            return Err(ErrorKind::OnlyOneOfPair {
                set: v.setting(),
                missing: "NCCL_INCLUDE_DIR",
            })
        }
        (Some(i), Some(l)) => (i, l),
    };
    let variable = format!("{}, {}", iv.setting(), lv.setting());
    let mut site = Site::new(
        Origin {
            source: SourceKind::ExplicitDirs,
            variable: Some(variable.clone()),
            package: None,
            detail: variable,
        },
        vec![idir.clone()],
        vec![ldir.clone()],
    );
    site.explicit = true;
    for (var, dir) in [(&iv, &idir), (&lv, &ldir)] {
        if site.fault.is_none() {
            site.fault = super::home::check_dir(ctx.root, &var.name, dir);
        }
        ctx.looked(
            SourceKind::ExplicitDirs,
            dir,
            format!("named by {}", var.name),
        );
    }
    Ok(vec![site])
}
