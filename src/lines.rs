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
