//! Reads the version out of `nccl.h` the way a C preprocessor would, for
//! the five macros that matter: `NCCL_MAJOR`, `NCCL_MINOR`, `NCCL_PATCH`,
//! `NCCL_SUFFIX` and `NCCL_VERSION_CODE`. Lines are spliced at a backslash,
//! comments and string literals are understood, `#if`/`#ifdef`/`#elif`/
//! `#else` blocks are evaluated (integer constant expressions, `defined`,
//! macros defined earlier in the file, undefined names as 0), and values
//! are C integer constant expressions: hex, octal, `u`/`l` suffixes,
//! parentheses. A number that does not fit is an error naming the macro.
//! The code is then checked against MAJOR/MINOR/PATCH under the formula
//! that applies: `X*1000+Y*100+Z` up to 2.8, `X*10000+Y*100+Z` from 2.9.

use std::path::Path;

use crate::version::Version;

mod expr;

use std::cell::Cell;

use expr::{eval, string_literal, tokens, Macro, Macros, Tok};

/// The most object-like macros a header may define (a real `nccl.h`
/// defines about 35; each lookup is a search of the list).
const MAX_MACROS: usize = 256;

/// The most `#if` groups that may be open at once.
const MAX_GROUPS: usize = 256;

/// A real `nccl.h` is tens of kilobytes; anything past this is not one.
pub(crate) const MAX_HEADER_BYTES: u64 = 4 << 20;

/// What a header turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

/// `text` with every `pat` (a line splice) taken out, as
/// `text.replace(pat, "")` does, and for each splice the line of the result
/// it joined the next line onto.
fn without(text: &str, pat: &str) -> (String, Vec<usize>) {
    let mut out = String::new();
    let mut joined = Vec::new();
    let mut line = 1;
    let mut rest = text;
    while let Some(i) = rest.find(pat) {
        line += rest[..i].matches('\n').count();
        joined.push(line);
        out.push_str(&rest[..i]);
        rest = &rest[i + pat.len()..];
    }
    out.push_str(rest);
    (out, joined)
}

/// The physical lines, before the splices `joined` were taken out, of the
/// ascending lines `lines` after: one walk over both (a line moves down by
/// the splices joined onto lines before it).
fn before_splices(lines: &mut [(usize, String)], joined: &[usize]) {
    let mut k = 0;
    for (line, _) in lines.iter_mut() {
        while k < joined.len() && joined[k] < *line {
            k += 1;
        }
        *line += k;
    }
}

/// Phases 2 and 3 of translation: lines spliced at a backslash-newline,
/// each comment replaced by one space; string and character literals kept
/// whole, so a `//` inside a string is not a comment. Returns the logical
/// lines with their first physical line number.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let (once, joined_crlf) = without(text, "\\\r\n");
    let (spliced, joined_lf) = without(&once, "\\\n");
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut line_no = 1;
    let mut start = 1;
    let mut chars = spliced.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            if c != '\n' {
                cur.push(c);
            }
            if c == '\\' {
                if let Some(&n) = chars.peek() {
                    if n != '\n' {
                        cur.push(n);
                        chars.next();
                    }
                }
            } else if c == q || c == '\n' {
                if c == '\n' {
                    out.push((start, std::mem::take(&mut cur)));
                    line_no += 1;
                    start = line_no;
                }
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => {
                quote = Some(c);
                cur.push(c);
            }
            '/' if matches!(chars.peek(), Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for d in chars.by_ref() {
                    if d == '\n' {
                        line_no += 1;
                    }
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
                cur.push(' ');
            }
            '/' if matches!(chars.peek(), Some('/')) => {
                while let Some(&d) = chars.peek() {
                    if d == '\n' {
                        break;
                    }
                    chars.next();
                }
            }
            '\n' => {
                out.push((start, std::mem::take(&mut cur)));
                line_no += 1;
                start = line_no;
            }
            '\r' if matches!(chars.peek(), Some('\n')) => {}
            _ => cur.push(c),
        }
    }
    out.push((start, cur));
    before_splices(&mut out, &joined_lf);
    before_splices(&mut out, &joined_crlf);
    out
}

/// One `#if` group: whether a branch was taken, and whether we are in it.
struct Group {
    taken: bool,
    active: bool,
    /// `#else` was seen: no `#elif` or `#else` may follow.
    ended: bool,
}

/// The object-like macros a header defines, as a preprocessor would see
/// them after every `#if` is decided, or why it could not be read.
fn defines(text: &str) -> Result<Macros, String> {
    let mut pre = Preprocessor::default();
    for (line, l) in &logical_lines(text) {
        let Some(d) = l.trim_start().strip_prefix('#') else {
            continue;
        };
        let d = d.trim_start();
        let mut word_end = d.len();
        for (i, c) in d.char_indices() {
            if !c.is_ascii_alphabetic() {
                word_end = i;
                break;
            }
        }
        let (word, rest) = d.split_at(word_end);
        pre.directive(*line, word, rest)?;
    }
    Ok(pre.macros)
}

/// The state of the directives read so far: the macros defined (with the
/// line of each definition) and the open `#if` groups.
#[derive(Default)]
struct Preprocessor {
    macros: Macros,
    stack: Vec<Group>,
    /// Tokens evaluated so far (see [`expr::MAX_STEPS`]).
    steps: Cell<u64>,
}

/// Whether every group is in its active branch.
fn all_active(groups: &[Group]) -> bool {
    for g in groups {
        if !g.active {
            return false;
        }
    }
    true
}

impl Preprocessor {
    /// One directive: `#word rest` on `line`.
    fn directive(&mut self, line: usize, word: &str, rest: &str) -> Result<(), String> {
        let live = all_active(&self.stack);
        match word {
            "if" | "ifdef" | "ifndef" => {
                if self.stack.len() >= MAX_GROUPS {
                    return Err(format!(
                        "line {line}: more than {MAX_GROUPS} #if groups are open at once"
                    ));
                }
                let on = live && self.test(line, word, rest)?;
                self.stack.push(Group {
                    taken: on,
                    active: on,
                    ended: false,
                });
            }
            "elif" | "elifdef" | "elifndef" | "else" => {
                let n = self.stack.len();
                let outer = n == 1 || (n > 1 && all_active(&self.stack[..n - 1]));
                let Some(g) = self.stack.last() else {
                    return Err(format!("line {line}: #{word} without #if"));
                };
                if g.ended {
                    return Err(format!("line {line}: #{word} after #else"));
                }
                let taken = g.taken;
                let on = outer && !taken && (word == "else" || self.test(line, word, rest)?);
                let g = self.stack.last_mut().expect("checked above");
                g.active = on;
                g.taken |= on;
                g.ended = word == "else";
            }
            "endif" => {
                let Some(_) = self.stack.pop() else {
                    return Err(format!("line {line}: #endif without #if"));
                };
            }
            "define" if live => self.define(line, rest)?,
            "undef" if live => self.undef(rest.split_whitespace().next().unwrap_or("")),
            _ => {}
        }
        Ok(())
    }

    /// The condition of `#if`/`#elif` (evaluated) or `#ifdef`/`#ifndef`/
    /// `#elifdef`/`#elifndef` (a macro defined or not).
    fn test(&self, line: usize, word: &str, rest: &str) -> Result<bool, String> {
        match word {
            "if" | "elif" => match eval(&tokens(rest), &self.macros, &self.steps) {
                Ok(v) => Ok(v != 0),
                Err(e) => Err(format!("line {line}: cannot evaluate `#{word}{rest}`: {e}")),
            },
            _ => {
                let name = rest.split_whitespace().next().unwrap_or("");
                let want_defined = word == "ifdef" || word == "elifdef";
                Ok(self.macros.contains(name) == want_defined)
            }
        }
    }

    /// `#define NAME body`; a function-like macro is not needed here, and
    /// undefines any earlier object-like one of that name.
    fn define(&mut self, line: usize, rest: &str) -> Result<(), String> {
        let rest = rest.trim_start();
        let mut name_end = rest.len();
        for (i, c) in rest.char_indices() {
            if !(c.is_alphanumeric() || c == '_') {
                name_end = i;
                break;
            }
        }
        let (name, body) = rest.split_at(name_end);
        if name.is_empty() {
            return Ok(());
        }
        if body.starts_with('(') {
            self.undef(name);
            return Ok(());
        }
        if self.macros.list.len() >= MAX_MACROS && !self.macros.contains(name) {
            return Err(format!(
                "line {line}: more than {MAX_MACROS} macros are defined (a real nccl.h defines about 35)"
            ));
        }
        self.macros.insert(name, line, tokens(body));
        Ok(())
    }

    fn undef(&mut self, name: &str) {
        self.macros.remove(name);
    }
}

/// Parses the text of an `nccl.h`.
pub fn parse_header(text: &str) -> Header {
    if text.contains("${nccl:Major}") {
        return Header::Template;
    }
    let macros = match defines(text) {
        Ok(m) => m,
        Err(why) => return Header::Bad(why),
    };
    if !macros.contains("NCCL_MAJOR")
        && !macros.contains("NCCL_MINOR")
        && !macros.contains("NCCL_PATCH")
    {
        return without_version(text);
    }
    match version(&macros) {
        Ok(v) if v.major == 1 => Header::Nccl1 {
            sign: "NCCL_MAJOR is 1".into(),
        },
        Ok(v) => Header::Nccl2(v),
        Err(why) => Header::Bad(why),
    }
}

/// A header with no version macros: NCCL 1 by its signs, else not NCCL.
fn without_version(text: &str) -> Header {
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
    Header::Bad(
        "it defines no NCCL_MAJOR, NCCL_MINOR or NCCL_PATCH: this is not an NCCL header".into(),
    )
}

/// The version the macros give: `NCCL_MAJOR`/`MINOR`/`PATCH`, `NCCL_SUFFIX`,
/// and `NCCL_VERSION_CODE` checked against them.
fn version(macros: &Macros) -> Result<Version, String> {
    let x = number(macros, "MAJOR")?;
    let y = number(macros, "MINOR")?;
    let z = number(macros, "PATCH")?;
    let mut v = Version::checked(x, y, z, suffix(macros)?)?;
    if macros.contains("NCCL_VERSION_CODE") {
        let c = number(macros, "VERSION_CODE")?;
        if c != v.code {
            return Err(format!(
                "NCCL_VERSION_CODE is {c}, but NCCL_MAJOR/MINOR/PATCH say {x}.{y}.{z}, whose code is {}",
                v.code
            ));
        }
        v.code = c;
    }
    Ok(v)
}

/// `NCCL_<name>` as a number that fits a version (32 bits).
fn number(macros: &Macros, name: &str) -> Result<u32, String> {
    let full = format!("NCCL_{name}");
    let Some(Macro { line, body, .. }) = macros.get(&full) else {
        return Err(format!("{full} is not defined"));
    };
    let shown = body_text(body);
    let v = match eval(body, macros, &Cell::new(0)) {
        Ok(v) => v,
        Err(e) => {
            return Err(format!(
                "{full} (line {line}) is {shown:?}, not a number: {e}"
            ))
        }
    };
    match u32::try_from(v) {
        Ok(v) => Ok(v),
        Err(_) => Err(format!(
            "{full} (line {line}) is {shown}, which does not fit a version number (0 to {})",
            u32::MAX
        )),
    }
}

/// `NCCL_SUFFIX`: empty, or one string literal without control characters.
fn suffix(macros: &Macros) -> Result<String, String> {
    let Some(Macro { line, body, .. }) = macros.get("NCCL_SUFFIX") else {
        return Ok(String::new());
    };
    match body.as_slice() {
        [] => Ok(String::new()),
        [Tok::Str(s)] => {
            let v = match string_literal(s) {
                Ok(v) => v,
                Err(e) => return Err(format!("NCCL_SUFFIX (line {line}): {e}")),
            };
            for c in v.chars() {
                if c.is_control() {
                    return Err(format!(
                        "NCCL_SUFFIX (line {line}) holds a control character: {v:?}"
                    ));
                }
            }
            Ok(v)
        }
        _ => Err(format!(
            "NCCL_SUFFIX (line {line}) is {:?}, not a string",
            body_text(body)
        )),
    }
}

/// Tokens back to text, for messages.
fn body_text(body: &[Tok]) -> String {
    let mut out = String::new();
    let mut sep = "";
    for t in body {
        out.push_str(sep);
        sep = " ";
        match t {
            Tok::Num(s) | Tok::Ident(s) | Tok::Str(s) => out.push_str(s),
            Tok::Punct(p) => out.push_str(p),
            Tok::Other(c) => out.push(*c),
        }
    }
    out
}

/// Reads and parses an `nccl.h` file, refusing huge, binary and special
/// files.
pub fn read_header(path: &Path) -> Result<Header, String> {
    let bytes = match crate::files::read_bounded(path, MAX_HEADER_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Ok(Header::Bad(format!(
                "{e}; a real nccl.h is under {MAX_HEADER_BYTES} bytes"
            )))
        }
        Err(e) => return Err(e.to_string()),
    };
    if bytes.is_empty() {
        return Ok(Header::Bad("it is empty".into()));
    }
    if bytes.contains(&0) {
        return Ok(Header::Bad("it is a binary file, not a C header".into()));
    }
    Ok(parse_header(&String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests;
