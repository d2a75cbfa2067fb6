//! The human report on its way out: made safe for a terminal, fitted to
//! the terminal's width, and coloured (only on a terminal, never with
//! `NO_COLOR`). Piped output is neither wrapped nor coloured.

use std::io::IsTerminal;

/// When to colour.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum When {
    /// On a terminal, unless `NO_COLOR` is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

impl When {
    pub fn enabled(self) -> bool {
        match self {
            When::Always => true,
            When::Never => false,
            When::Auto => {
                std::io::stdout().is_terminal()
                    && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        }
    }
}

const BOLD: &str = "\x1b[1m";
const GREEN: &str = "\x1b[1;32m";
const YELLOW: &str = "\x1b[33m";
const RED: &str = "\x1b[31m";
const RESET: &str = "\x1b[0m";

/// Colours a report's lines by what they begin with.
pub fn paint(text: &str, on: bool) -> String {
    if !on {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 256);
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let t = body.trim_start();
        let colour = if t.starts_with("Selected: nothing")
            || t.starts_with("[rejected]")
            || t.starts_with("problem")
        {
            Some(RED)
        } else if t.starts_with("Selected:") || t.starts_with("ok ") {
            Some(GREEN)
        } else if t.starts_with("[lost]")
            || t.starts_with("conflict:")
            || t.starts_with("note")
            || t.starts_with("- ")
        {
            Some(YELLOW)
        } else if !body.starts_with(' ') && body.ends_with(':') {
            Some(BOLD)
        } else {
            None
        };
        match colour {
            Some(c) => {
                out.push_str(c);
                out.push_str(body);
                out.push_str(RESET);
                if line.ends_with('\n') {
                    out.push('\n');
                }
            }
            None => out.push_str(line),
        }
    }
    out
}

/// A human report as it is printed: [`terminal_safe`], fitted to the
/// terminal's width where stdout is one ([`fit`]), then [`paint`]ed.
pub fn human(text: &str, color: When) -> String {
    let safe = terminal_safe(text);
    let fitted = match terminal_width() {
        Some(w) => fit(&safe, w),
        None => safe,
    };
    paint(&fitted, color.enabled())
}

/// A value fit to paste into a shell: letters, digits and `._-` as they
/// are, anything else shown (escaped) and single-quoted.
pub fn shell_word(v: &str) -> String {
    let v = nccl_rendezvous::untrusted::shown(v, 200);
    match !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    {
        true => v,
        false => format!("'{}'", v.replace('\'', "'\\''")),
    }
}

/// Local text (paths, variables, host facts) made safe for a terminal the
/// way the smoke test makes peer text safe: each character that could
/// drive the terminal or forge a line (escape sequences, carriage returns,
/// bidi overrides) is written as `\u{..}`; line breaks stay.
pub fn terminal_safe(text: &str) -> String {
    if !text
        .chars()
        .any(|c| c != '\n' && nccl_rendezvous::untrusted::unsafe_char(c))
    {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c != '\n' && nccl_rendezvous::untrusted::unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Says `text` on stderr after `nccl-find: `, [`terminal_safe`].
pub fn complain(text: &str) {
    eprintln!("nccl-find: {}", terminal_safe(text));
}

/// What a command that needs an install says when the probe found none:
/// where to look next, then its headline, the cause and its fix, last.
pub fn not_found(headline: Option<&str>) -> String {
    format!(
        "`nccl-find --print` shows where it looked and what to do:\n{}",
        headline.unwrap_or_default()
    )
}

/// The columns of the terminal stdout is, or `None` where it is none.
pub fn terminal_width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct passed.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col >= 20).then_some(usize::from(ws.ws_col))
}

/// `text` with each line longer than `width` columns broken at spaces.
/// A continuation line starts at the line's text column: after its
/// indent and its label where one is set off by two spaces or more
/// (`  header   /usr/include/nccl.h`), else four columns in. A word that
/// does not fit on a line of its own (a long path) gets a line of its own
/// all the same: nothing is ever cut.
pub fn fit(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        if body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let (head, hang, rest) = split_label(body);
        let hang = " ".repeat(hang.min(width / 2));
        let mut col = head.chars().count();
        out.push_str(head);
        let mut first = true;
        for word in rest.split(' ') {
            let n = word.chars().count();
            if !first && col + 1 + n > width {
                out.push('\n');
                out.push_str(&hang);
                col = hang.len();
            } else if !first {
                out.push(' ');
                col += 1;
            }
            out.push_str(word);
            col += n;
            first = false;
        }
        if line.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// A line's head (its indent, and its label where one is set off by two
/// spaces or more), the column its continuation lines start at, and the
/// text after the head.
fn split_label(body: &str) -> (&str, usize, &str) {
    let indent = body.len() - body.trim_start_matches(' ').len();
    let after = &body[indent..];
    let word_end = after.find(' ').unwrap_or(after.len());
    let gap = after[word_end..].len() - after[word_end..].trim_start_matches(' ').len();
    if gap >= 2 {
        let at = indent + word_end + gap;
        return (&body[..at], body[..at].chars().count(), &body[at..]);
    }
    (&body[..indent], indent + 4, &body[indent..])
}
