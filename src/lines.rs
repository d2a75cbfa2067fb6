//! Text that reaches cargo's directives and messages: line breaks, which
//! cargo cannot carry, found and escaped. The lowest layer: it imports
//! nothing from the crate.

/// Whether text holds a line break (`\n` or `\r`), which cargo cannot
/// escape inside a directive.
pub fn has_line_break(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// Text with line breaks and other control characters escaped (`\n`), for
/// a `cargo:warning` line or a message.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A path or other OS string for a message: [`escape`]d, with each byte
/// that is not UTF-8 written as `\xNN`, so that what is shown names the
/// real file (a lossy conversion would name one that does not exist).
pub fn escape_os(s: &std::ffi::OsStr) -> String {
    let mut bytes = s.as_encoded_bytes();
    let mut out = String::with_capacity(bytes.len());
    loop {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                out.push_str(&escape(text));
                return out;
            }
            Err(e) => {
                let (good, rest) = bytes.split_at(e.valid_up_to());
                out.push_str(&escape(std::str::from_utf8(good).unwrap_or_default()));
                let bad = e.error_len().unwrap_or(rest.len());
                for b in &rest[..bad] {
                    out.push_str(&format!("\\x{b:02x}"));
                }
                bytes = &rest[bad..];
            }
        }
    }
}
