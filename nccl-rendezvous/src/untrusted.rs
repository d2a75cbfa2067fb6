//! Text that another process sent (a refusal, an abort, a peer's outcome, a
//! host name from a shared file): it may hold anything. Before it is
//! printed or put into a report it goes through [`peer_text`], here and
//! nowhere else, so that it can neither drive the terminal (escape
//! sequences, bidi overrides) nor forge a line of our own (line breaks).

/// `s` cut to at most `max` bytes, at a character boundary: text bounded
/// before it is sent.
pub(crate) fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The most characters of one piece of peer text that are shown.
pub const MAX_PEER_TEXT: usize = 2000;

/// Whether `c` must not reach a terminal as it is: C0 controls (line breaks
/// and ESC included), DEL, C1 controls, the Unicode line and paragraph
/// separators, and the bidi controls (which reorder what is shown).
pub fn unsafe_char(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}'
            | '\u{7f}'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
    )
}

/// Peer text made safe to print, on one line: each character that could
/// drive the terminal or break the line is written as `\u{..}` (its code in
/// hex), a backslash as `\\`, and at most [`MAX_PEER_TEXT`] characters are
/// kept (a count of the bytes left out follows).
pub fn peer_text(s: &str) -> String {
    shown(s, MAX_PEER_TEXT)
}

/// [`peer_text`] with another bound: at most `max` characters kept. For
/// short things from outside, as a launcher's variable in an error.
pub fn shown(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(4 * max));
    for (n, (at, c)) in s.char_indices().enumerate() {
        if n == max {
            out.push_str(&format!("... ({} more bytes)", s.len() - at));
            break;
        }
        if c == '\\' {
            out.push_str("\\\\");
        } else if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_and_line_breaks_are_escaped() {
        assert_eq!(
            peer_text("\x1b]0;pwned\x07\nOK: fake"),
            "\\u{1b}]0;pwned\\u{7}\\u{a}OK: fake"
        );
        assert_eq!(
            peer_text("a\r\tb\u{7f}\u{85}\u{9b}c\\d"),
            "a\\u{d}\\u{9}b\\u{7f}\\u{85}\\u{9b}c\\\\d"
        );
        assert_eq!(
            peer_text("x\u{202e}y\u{2066}z\u{2069}\u{200f}\u{61c}\u{2028}"),
            "x\\u{202e}y\\u{2066}z\\u{2069}\\u{200f}\\u{61c}\\u{2028}"
        );
        assert_eq!(
            peer_text("rank 2: 3 wrong (ünïcode ok)"),
            "rank 2: 3 wrong (ünïcode ok)"
        );
        let long = "é".repeat(MAX_PEER_TEXT + 10);
        assert_eq!(
            peer_text(&long),
            format!("{}... (20 more bytes)", "é".repeat(MAX_PEER_TEXT))
        );
    }
}
