//! Reads the version out of `nccl.h` with a regular expression, without a
//! compiler: `NCCL_MAJOR`, `NCCL_MINOR`, `NCCL_PATCH`, `NCCL_SUFFIX` and
//! `NCCL_VERSION_CODE`, and checks the code against the other three under
//! the formula that applies (FACTS.md §2).

use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use regex_lite::Regex;

use crate::version::Version;

/// A real `nccl.h` is tens of kilobytes; anything past this is not one.
pub(crate) const MAX_HEADER_BYTES: u64 = 4 << 20;

/// What a header turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    /// An NCCL 2.x (or later) header.
    Nccl2(Version),
    /// An NCCL 1.x header: no version macros, and NCCL 1's result codes.
    Nccl1 {
        /// The NCCL 1 sign that was seen.
        sign: String,
    },
    /// The unconfigured template `nccl.h.in` of a source checkout.
    Template,
    /// Not something we can read a version from.
    Bad(String),
}

/// The five macros, when present.
fn macros() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?m)^[ \t]*#[ \t]*define[ \t]+NCCL_(MAJOR|MINOR|PATCH|SUFFIX|VERSION_CODE)[ \t]+([^\r\n]*?)[ \t]*(?://[^\r\n]*)?\r?$",
        )
        .expect("static regex")
    })
}

/// Parses the text of an `nccl.h`.
pub fn parse_header(text: &str) -> Header {
    if text.contains("${nccl:Major}") {
        return Header::Template;
    }
    let (mut major, mut minor, mut patch, mut suffix, mut code) = (None, None, None, None, None);
    for caps in macros().captures_iter(text) {
        let raw = caps.get(2).map_or("", |m| m.as_str());
        let value = raw
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')')
            .trim();
        let num = || value.parse::<u32>().ok();
        match &caps[1] {
            "MAJOR" => major = Some(num().ok_or(value)),
            "MINOR" => minor = Some(num().ok_or(value)),
            "PATCH" => patch = Some(num().ok_or(value)),
            "VERSION_CODE" => code = Some(num().ok_or(value)),
            _ => suffix = Some(value.trim_matches('"').to_string()),
        }
    }
    if major.is_none() && minor.is_none() && patch.is_none() {
        for sign in [
            "ncclInvalidDevicePointer",
            "ncclLibWrapperNotSet",
            "ncclRankMismatch",
        ] {
            if text.contains(sign) {
                return Header::Nccl1 {
                    sign: format!("no version macros, and NCCL 1's result code {sign}"),
                };
            }
        }
        if text.contains("ncclCommInitRank") && !text.contains("ncclGroupStart") {
            return Header::Nccl1 {
                sign: "no version macros, and ncclCommInitRank without ncclGroupStart".into(),
            };
        }
        return Header::Bad(
            "it defines no NCCL_MAJOR, NCCL_MINOR or NCCL_PATCH: this is not an NCCL header".into(),
        );
    }
    let get = |v: Option<Result<u32, &str>>, name: &str| -> Result<u32, String> {
        match v {
            Some(Ok(n)) => Ok(n),
            Some(Err(raw)) => Err(format!("NCCL_{name} is {raw:?}, not a number")),
            None => Err(format!("NCCL_{name} is not defined")),
        }
    };
    let parsed = (|| {
        let (x, y, z) = (
            get(major, "MAJOR")?,
            get(minor, "MINOR")?,
            get(patch, "PATCH")?,
        );
        let mut v = Version::new(x, y, z, suffix.unwrap_or_default());
        if let Some(c) = code {
            let c = get(Some(c), "VERSION_CODE")?;
            if c != v.code {
                return Err(format!(
                    "NCCL_VERSION_CODE is {c}, but NCCL_MAJOR/MINOR/PATCH say {x}.{y}.{z}, whose code is {}",
                    v.code
                ));
            }
            v.code = c;
        }
        Ok(v)
    })();
    match parsed {
        Ok(v) if v.major == 1 => Header::Nccl1 {
            sign: "NCCL_MAJOR is 1".into(),
        },
        Ok(v) => Header::Nccl2(v),
        Err(why) => Header::Bad(why),
    }
}

/// Reads and parses an `nccl.h` file, refusing huge and binary files.
pub fn read_header(path: &Path) -> Result<Header, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_HEADER_BYTES {
        return Ok(Header::Bad(format!(
            "it is {len} bytes; a real nccl.h is under {} bytes",
            MAX_HEADER_BYTES
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(MAX_HEADER_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.is_empty() {
        return Ok(Header::Bad("it is empty".into()));
    }
    if bytes.contains(&0) {
        return Ok(Header::Bad("it is a binary file, not a C header".into()));
    }
    Ok(parse_header(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(major: &str, minor: &str, patch: &str, code: &str) -> String {
        format!(
            "#ifndef NCCL_H_\n#define NCCL_H_\n#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n\
             #define NCCL_SUFFIX \"\"\n\n#define NCCL_VERSION_CODE {code}\n#endif\n"
        )
    }

    #[test]
    fn new_and_old_formulas() {
        assert_eq!(
            parse_header(&h("2", "21", "5", "22105")),
            Header::Nccl2(Version::new(2, 21, 5, ""))
        );
        let old = parse_header(&h("2", "8", "4", "2804"));
        assert_eq!(old, Header::Nccl2(Version::new(2, 8, 4, "")));
        if let Header::Nccl2(v) = old {
            assert_eq!(v.code, 2804);
        }
    }

    #[test]
    fn code_that_disagrees_is_refused() {
        assert_eq!(
            parse_header(&h("2", "8", "4", "20804")),
            Header::Bad(
                "NCCL_VERSION_CODE is 20804, but NCCL_MAJOR/MINOR/PATCH say 2.8.4, whose code is 2804".into()
            )
        );
    }

    #[test]
    fn nccl1_template_and_garbage() {
        let one = "typedef enum { ncclSuccess, ncclInvalidDevicePointer } ncclResult_t;\nncclResult_t ncclCommInitRank();";
        assert!(matches!(parse_header(one), Header::Nccl1 { .. }));
        assert_eq!(
            parse_header("#define NCCL_MAJOR ${nccl:Major}\n"),
            Header::Template
        );
        assert!(matches!(parse_header("int main() {}"), Header::Bad(_)));
        assert_eq!(
            parse_header("#define NCCL_MAJOR 2\n#define NCCL_MINOR x\n#define NCCL_PATCH 1\n"),
            Header::Bad("NCCL_MINOR is \"x\", not a number".into())
        );
        assert!(matches!(
            parse_header(&h("1", "3", "0", "1300")),
            Header::Nccl1 { .. }
        ));
    }

    #[test]
    fn suffix_and_crlf() {
        let text = "#define NCCL_MAJOR 2\r\n#define NCCL_MINOR 19\r\n#define NCCL_PATCH 3\r\n#define NCCL_SUFFIX \"a0\"\r\n";
        assert_eq!(
            parse_header(text),
            Header::Nccl2(Version::new(2, 19, 3, "a0"))
        );
    }
}
