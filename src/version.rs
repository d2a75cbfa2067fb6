//! NCCL versions and version codes.

use std::fmt;

/// An NCCL version, as `nccl.h` or the library states it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version {
    /// `NCCL_MAJOR`.
    pub major: u32,
    /// `NCCL_MINOR`.
    pub minor: u32,
    /// `NCCL_PATCH`.
    pub patch: u32,
    /// `NCCL_SUFFIX`, usually empty.
    pub suffix: String,
    /// `NCCL_VERSION_CODE`: `X*1000+Y*100+Z` up to 2.8, `X*10000+Y*100+Z` from 2.9.
    pub code: u32,
}

impl Version {
    /// A version with the code computed by the formula that applies to it.
    pub fn new(major: u32, minor: u32, patch: u32, suffix: impl Into<String>) -> Version {
        Version {
            major,
            minor,
            patch,
            suffix: suffix.into(),
            code: Version::code_of(major, minor, patch),
        }
    }

    /// The version code NCCL gives `major.minor.patch`: the old formula
    /// (`X*1000 + Y*100 + Z`) for versions up to 2.8, the new one
    /// (`X*10000 + Y*100 + Z`) from 2.9.
    /// Saturates at `u32::MAX` for numbers no real version has; see
    /// [`Version::checked`].
    pub fn code_of(major: u32, minor: u32, patch: u32) -> u32 {
        Version::code_checked(major, minor, patch).unwrap_or(u32::MAX)
    }

    /// [`Version::code_of`], or `None` when the code does not fit 32 bits.
    pub fn code_checked(major: u32, minor: u32, patch: u32) -> Option<u32> {
        let m = if major < 2 || (major == 2 && minor <= 8) {
            1000
        } else {
            10000
        };
        major
            .checked_mul(m)?
            .checked_add(minor.checked_mul(100)?)?
            .checked_add(patch)
    }

    /// [`Version::new`], or an error when the numbers are too large for
    /// a version code.
    pub fn checked(
        major: u32,
        minor: u32,
        patch: u32,
        suffix: impl Into<String>,
    ) -> Result<Version, String> {
        let code = Version::code_checked(major, minor, patch).ok_or_else(|| {
            format!("{major}.{minor}.{patch} is too large for a version code (32 bits)")
        })?;
        Ok(Version {
            major,
            minor,
            patch,
            suffix: suffix.into(),
            code,
        })
    }

    /// Turns a version code back into `(major, minor, patch)`, for either
    /// formula. `None` when no version gives this code.
    pub fn from_code(code: u32) -> Option<(u32, u32, u32)> {
        let new = (code / 10000, code / 100 % 100, code % 100);
        if Version::code_of(new.0, new.1, new.2) == code && new.0 >= 2 && (new.0 > 2 || new.1 >= 9)
        {
            return Some(new);
        }
        let old = (code / 1000, code / 100 % 10, code % 100);
        (Version::code_of(old.0, old.1, old.2) == code && old.0 <= 2).then_some(old)
    }

    /// Whether this version meets a requirement in Cargo's syntax
    /// (`>=2.18, <3`); the suffix takes no part, so `>=2.18` matches a
    /// suffixed 2.19. `Err` says why the requirement is not valid.
    pub fn matches(&self, requirement: &str) -> Result<bool, String> {
        let req = crate::req::VersionReq::parse(requirement)?;
        Ok(req.matches(self.major.into(), self.minor.into(), self.patch.into()))
    }

    /// True when this is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}.{}{}",
            self.major, self.minor, self.patch, self.suffix
        )
    }
}

/// The CUDA version a library was built for (`+cuda12.4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CudaVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl CudaVersion {
    /// The CUDA version of a driver or runtime version code
    /// (`cuDriverGetVersion`: `1000 * major + 10 * minor`, so 12040 is 12.4).
    pub fn from_code(code: u32) -> CudaVersion {
        CudaVersion {
            major: code / 1000,
            minor: code % 1000 / 10,
        }
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A version as text, or nothing where there is none (for messages).
pub(crate) fn or_empty(v: &Option<Version>) -> String {
    match v {
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// Reads `2.21.5` (or `2.21`, `2`) leniently into three numbers.
pub(crate) fn lenient_version(s: &str) -> Result<(u64, u64, u64), String> {
    let parts: Vec<&str> = s.trim().split('.').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("{s:?} is not a version like 2.18 or 2.18.3"));
    }
    let mut nums = [0u64; 3];
    for (i, p) in parts.iter().enumerate() {
        nums[i] = p
            .parse()
            .map_err(|_| format!("{s:?} is not a version like 2.18 or 2.18.3"))?;
    }
    Ok((nums[0], nums[1], nums[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_code_formulas() {
        assert_eq!(Version::code_of(2, 8, 4), 2804);
        assert_eq!(Version::code_of(2, 9, 6), 20906);
        assert_eq!(Version::code_of(2, 28, 9), 22809);
        assert_eq!(Version::from_code(2804), Some((2, 8, 4)));
        assert_eq!(Version::from_code(20906), Some((2, 9, 6)));
        assert_eq!(Version::from_code(22809), Some((2, 28, 9)));
        assert_eq!(Version::from_code(20804), None);
    }

    #[test]
    fn codes_round_trip_for_every_2x_version() {
        for minor in 0..40 {
            for patch in 0..30 {
                let code = Version::code_of(2, minor, patch);
                assert_eq!(
                    Version::from_code(code),
                    Some((2, minor, patch)),
                    "code {code}"
                );
            }
        }
    }

    #[test]
    fn lenient_versions() {
        assert_eq!(lenient_version("2.18"), Ok((2, 18, 0)));
        assert_eq!(lenient_version(" 2.21.5 "), Ok((2, 21, 5)));
        assert!(lenient_version("two").is_err());
        assert!(lenient_version("2.18.3.1").is_err());
    }
}
