//! The preprocessor's expressions: tokens, the object-like macros defined
//! so far, and the evaluator of integer constant expressions (`#if`, a
//! version macro's value), each within its budget of steps, nesting,
//! macros and groups; and C string literals (`NCCL_SUFFIX`).

use std::cell::Cell;
use std::iter::Peekable;
use std::str::Chars;

/// An object-like macro: its name, the line of its definition, its body.
pub(super) struct Macro {
    pub(super) name: String,
    pub(super) line: usize,
    pub(super) body: Vec<Tok>,
}

/// The object-like macros defined so far, each name once. A header defines
/// a few dozen, so a list searched by name does what a map would: a later
/// `#define` of a name replaces the earlier one, `#undef` removes it.
#[derive(Default)]
pub(super) struct Macros {
    pub(super) list: Vec<Macro>,
}

impl Macros {
    /// Where the macro `name` is in the list.
    pub(super) fn find(&self, name: &str) -> Option<usize> {
        for (i, m) in self.list.iter().enumerate() {
            if m.name == name {
                return Some(i);
            }
        }
        None
    }

    pub(super) fn get(&self, name: &str) -> Option<&Macro> {
        let i = self.find(name)?;
        Some(&self.list[i])
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// Defines `name`, replacing any earlier definition.
    pub(super) fn insert(&mut self, name: &str, line: usize, body: Vec<Tok>) {
        let m = Macro {
            name: name.to_string(),
            line,
            body,
        };
        match self.find(name) {
            Some(i) => self.list[i] = m,
            None => self.list.push(m),
        }
    }

    pub(super) fn remove(&mut self, name: &str) {
        if let Some(i) = self.find(name) {
            self.list.swap_remove(i);
        }
    }
}

/// A preprocessing token, as far as these macros need.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Num(String),
    Ident(String),
    Str(String),
    Punct(&'static str),
    Other(char),
}

pub(super) const PUNCTS: [&str; 22] = [
    "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "(", ")", "+", "-", "*", "/", "%", "<", ">",
    "!", "~", "&", "|", "^",
];

/// The characters as a string.
pub(super) fn text_of(chars: &[char]) -> String {
    let mut s = String::new();
    for &c in chars {
        s.push(c);
    }
    s
}

/// The first of [`PUNCTS`] that `chars` starts with (two-character ones
/// come first).
pub(super) fn punct_at(chars: &[char]) -> Option<&'static str> {
    'puncts: for p in PUNCTS {
        let mut i = 0;
        for c in p.chars() {
            if i >= chars.len() || chars[i] != c {
                continue 'puncts;
            }
            i += 1;
        }
        return Some(p);
    }
    None
}

pub(super) fn tokens(s: &str) -> Vec<Tok> {
    let mut b = Vec::new();
    for c in s.chars() {
        b.push(c);
    }
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let st = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '.' || b[i] == '\'') {
                i += 1;
            }
            out.push(Tok::Num(text_of(&b[st..i])));
        } else if c.is_alphabetic() || c == '_' {
            let st = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(text_of(&b[st..i])));
        } else if c == '"' {
            let st = i;
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            out.push(Tok::Str(text_of(&b[st..i])));
        } else if let Some(p) = punct_at(&b[i..]) {
            i += p.len();
            out.push(Tok::Punct(p));
        } else {
            out.push(Tok::Other(c));
            i += 1;
        }
    }
    out
}

/// A C integer constant: decimal, hex, octal or binary, with `u`/`l`
/// suffixes, into 64 bits (as `#if` arithmetic does).
pub(super) fn int_literal(text: &str) -> Result<u64, String> {
    let t = text.replace('\'', "");
    let mut body_end = t.len();
    while body_end > 0 && matches!(t.as_bytes()[body_end - 1], b'u' | b'U' | b'l' | b'L') {
        body_end -= 1;
    }
    let (body, suffix) = t.split_at(body_end);
    let s = suffix.to_ascii_lowercase();
    if !matches!(
        s.as_str(),
        "" | "u" | "l" | "ul" | "lu" | "ll" | "ull" | "llu"
    ) {
        return Err(format!("{text} is not a C integer constant"));
    }
    let (digits, radix) = if let Some(h) = body.strip_prefix("0x") {
        (h, 16)
    } else if let Some(h) = body.strip_prefix("0X") {
        (h, 16)
    } else if let Some(b) = body.strip_prefix("0b") {
        (b, 2)
    } else if let Some(b) = body.strip_prefix("0B") {
        (b, 2)
    } else if body.len() > 1 && body.starts_with('0') {
        (&body[1..], 8)
    } else {
        (body, 10)
    };
    if digits.is_empty() {
        return Err(format!("{text} is not a C integer constant"));
    }
    match u64::from_str_radix(digits, radix) {
        Ok(v) => Ok(v),
        Err(e) if matches!(e.kind(), std::num::IntErrorKind::PosOverflow) => {
            Err(format!("{text} does not fit in 64 bits"))
        }
        Err(_) => Err(format!("{text} is not a C integer constant")),
    }
}

/// Evaluates an integer constant expression, as `#if` does: `defined`,
/// macros defined earlier (object-like, integer-valued), and any other name
/// as 0. Arithmetic is in 64 bits; overflow and division by zero are errors.
pub(super) struct Eval<'a> {
    toks: &'a [Tok],
    at: usize,
    macros: &'a Macros,
    depth: u32,
    /// How deep the expression nests (parentheses, unary operators, `?:`,
    /// macro bodies): bounded, so that no header can exhaust the stack.
    nest: u32,
    /// Tokens evaluated for the whole header so far: bounded, so that
    /// macros that expand to copies of each other cannot take forever.
    steps: &'a Cell<u64>,
}

/// The most a header's expressions may nest.
const MAX_NESTING: u32 = 64;

/// The most tokens all of a header's expressions may evaluate, macro
/// expansions included. A real `nccl.h` evaluates a few hundred.
pub(super) const MAX_STEPS: u64 = 1_000_000;

impl Eval<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }
    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Punct(q)) if *q == p) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn full(mut self) -> Result<i64, String> {
        let v = self.cond()?;
        match self.peek() {
            None => Ok(v),
            Some(t) => Err(format!("unexpected {t:?}")),
        }
    }
    /// Goes one level deeper, or says the expression nests too deeply.
    fn enter(&mut self) -> Result<(), String> {
        self.nest += 1;
        if self.nest > MAX_NESTING {
            return Err(format!("the expression nests more than {MAX_NESTING} deep"));
        }
        Ok(())
    }
    /// A branch of `?:`, one level deeper.
    fn branch(&mut self) -> Result<i64, String> {
        self.enter()?;
        let v = self.cond();
        self.nest -= 1;
        v
    }
    fn cond(&mut self) -> Result<i64, String> {
        let c = self.binary(0)?;
        if matches!(self.peek(), Some(Tok::Other('?'))) {
            self.at += 1;
            let a = self.branch()?;
            if !matches!(self.peek(), Some(Tok::Other(':'))) {
                return Err("`?` without `:`".into());
            }
            self.at += 1;
            let b = self.branch()?;
            return Ok(if c != 0 { a } else { b });
        }
        Ok(c)
    }
    fn binary(&mut self, level: usize) -> Result<i64, String> {
        const LEVELS: [&[&str]; 10] = [
            &["||"],
            &["&&"],
            &["|"],
            &["^"],
            &["&"],
            &["==", "!="],
            &["<", ">", "<=", ">="],
            &["<<", ">>"],
            &["+", "-"],
            &["*", "/", "%"],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut v = self.binary(level + 1)?;
        loop {
            let Some(Tok::Punct(op)) = self.peek() else {
                return Ok(v);
            };
            let op = *op;
            if !LEVELS[level].contains(&op) {
                return Ok(v);
            }
            self.at += 1;
            let r = self.binary(level + 1)?;
            // `None`: the operation overflows.
            let checked = match op {
                "||" => Some(i64::from(v != 0 || r != 0)),
                "&&" => Some(i64::from(v != 0 && r != 0)),
                "|" => Some(v | r),
                "^" => Some(v ^ r),
                "&" => Some(v & r),
                "==" => Some(i64::from(v == r)),
                "!=" => Some(i64::from(v != r)),
                "<" => Some(i64::from(v < r)),
                ">" => Some(i64::from(v > r)),
                "<=" => Some(i64::from(v <= r)),
                ">=" => Some(i64::from(v >= r)),
                "<<" => match u32::try_from(r) {
                    Ok(r) => v.checked_shl(r),
                    Err(_) => None,
                },
                ">>" => match u32::try_from(r) {
                    Ok(r) => v.checked_shr(r),
                    Err(_) => None,
                },
                "+" => v.checked_add(r),
                "-" => v.checked_sub(r),
                "*" => v.checked_mul(r),
                _ if r == 0 => return Err("division by zero".into()),
                "/" => v.checked_div(r),
                _ => v.checked_rem(r),
            };
            match checked {
                Some(c) => v = c,
                None => return Err(format!("`{op}` overflows")),
            }
        }
    }
    fn unary(&mut self) -> Result<i64, String> {
        self.steps.set(self.steps.get() + 1);
        if self.steps.get() > MAX_STEPS {
            return Err(format!(
                "its macros take more than {MAX_STEPS} steps to evaluate (a real nccl.h takes a few hundred)"
            ));
        }
        self.enter()?;
        let v = self.unary_inner();
        self.nest -= 1;
        v
    }
    fn unary_inner(&mut self) -> Result<i64, String> {
        if self.eat("!") {
            return Ok(i64::from(self.unary()? == 0));
        }
        if self.eat("~") {
            return Ok(!self.unary()?);
        }
        if self.eat("-") {
            return match self.unary()?.checked_neg() {
                Some(v) => Ok(v),
                None => Err("`-` overflows".into()),
            };
        }
        if self.eat("+") {
            return self.unary();
        }
        if self.eat("(") {
            let v = self.cond()?;
            if !self.eat(")") {
                return Err("`(` without `)`".into());
            }
            return Ok(v);
        }
        let toks = self.toks;
        let tok = toks.get(self.at);
        self.at += 1;
        match tok {
            Some(Tok::Num(n)) => match i64::try_from(int_literal(n)?) {
                Ok(v) => Ok(v),
                Err(_) => Err(format!("{n} does not fit in 63 bits")),
            },
            Some(Tok::Ident(name)) if name == "defined" => {
                let paren = self.eat("(");
                let Some(Tok::Ident(m)) = toks.get(self.at) else {
                    return Err("`defined` without a name".into());
                };
                self.at += 1;
                if paren && !self.eat(")") {
                    return Err("`defined(` without `)`".into());
                }
                Ok(i64::from(self.macros.contains(m)))
            }
            Some(Tok::Ident(name)) => match self.macros.get(name) {
                Some(m) if self.depth < 32 => Eval {
                    toks: &m.body,
                    at: 0,
                    macros: self.macros,
                    depth: self.depth + 1,
                    nest: self.nest,
                    steps: self.steps,
                }
                .full(),
                Some(_) => Err(format!("{name} expands too deeply")),
                None => Ok(0),
            },
            Some(t) => Err(format!("unexpected {t:?}")),
            None => Err("the expression ends early".into()),
        }
    }
}

pub(super) fn eval(toks: &[Tok], macros: &Macros, steps: &Cell<u64>) -> Result<i64, String> {
    Eval {
        toks,
        at: 0,
        macros,
        depth: 0,
        nest: 0,
        steps,
    }
    .full()
}

/// The value of a string literal, its escapes undone.
pub(super) fn string_literal(lit: &str) -> Result<String, String> {
    let inner = match lit.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"'),
        None => None,
    };
    let Some(inner) = inner else {
        return Err(format!("{lit} is not a string literal"));
    };
    let mut out = String::new();
    let mut it = inner.chars().peekable();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = it.next() else {
            return Err("a string ends in a backslash".into());
        };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match peek_digit(&mut it, 8) {
                        Some(d) => {
                            v = v * 8 + d;
                            it.next();
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
            }
            'x' => {
                let mut v = 0u32;
                while let Some(d) = peek_digit(&mut it, 16) {
                    v = v.saturating_mul(16).saturating_add(d);
                    it.next();
                }
                out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// The value of the next character as a digit of `radix`, without taking it.
pub(super) fn peek_digit(it: &mut Peekable<Chars>, radix: u32) -> Option<u32> {
    match it.peek() {
        Some(d) => d.to_digit(radix),
        None => None,
    }
}
