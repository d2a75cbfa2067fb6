//! Colour for the human report: only on a terminal, never with `NO_COLOR`.

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
