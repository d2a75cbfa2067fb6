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

/// A path or other OS string for a message: escaped (`escape`), with each byte
/// that is not UTF-8 written as `\xNN`, so that what is shown names the
/// real file (a lossy conversion would name one that does not exist).
pub fn escape_os(s: &std::ffi::OsStr) -> String {
    if let Some(text) = s.to_str() {
        return escape(text);
    }
    // Not UTF-8: every byte outside printable ASCII is written out.
    let mut out = String::new();
    for &b in s.as_encoded_bytes() {
        if b == b' ' || b.is_ascii_graphic() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}
