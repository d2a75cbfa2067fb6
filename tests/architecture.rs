//! The shape of the code, as ARCHITECTURE.md states it: imports in the
//! library run one way, down the layers; no function is longer than about 80
//! lines without a reason; the search order in the docs is the one in the
//! sources table.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crates whose modules sit in layers, each with the heading of its
/// table in ARCHITECTURE.md. The library's packaged crate has only its own
/// `src/`: the others are checked where they are (the repository).
const CRATES: [(&str, &str); 4] = [
    ("src", "## Layers of the library"),
    ("cli/src", "## Layers of the command"),
    ("nccl-rendezvous/src", "## Layers of nccl-rendezvous"),
    ("nccl-smoke/src", "## Layers of nccl-smoke"),
];

/// [`CRATES`] whose sources are here: all of them in the repository, the
/// library alone in its packaged crate (said on stderr).
fn present_crates() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for (dir, heading) in CRATES {
        if repo().join(dir).is_dir() {
            out.push((dir, heading));
        } else {
            assert_ne!(dir, "src", "the library's own sources are missing");
            eprintln!(
                "{dir} is not here (a packaged crate): its layers are checked in the repository"
            );
        }
    }
    out
}

/// The layer table of the library in ARCHITECTURE.md: module → layer.
fn layers() -> BTreeMap<String, u32> {
    layers_of(CRATES[0].1)
}

/// The layer table under `heading` in ARCHITECTURE.md (up to the next
/// heading of its level): module → layer.
fn layers_of(heading: &str) -> BTreeMap<String, u32> {
    let text = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let start = text
        .find(&format!("{heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let body = &text[start + heading.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut out = BTreeMap::new();
    for line in body.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 {
            continue;
        }
        let Ok(layer) = cells[1].parse::<u32>() else {
            continue;
        };
        for m in cells[2].split(',') {
            let m = m.trim().trim_matches('`');
            assert!(
                out.insert(m.to_string(), layer).is_none(),
                "{m} is listed twice"
            );
        }
    }
    assert!(
        out.len() > 5,
        "the layer table {heading:?} was not read: {out:?}"
    );
    out
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The top-level module a file of `src/` belongs to (`src/inspect/elf.rs` → `inspect`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The top-level modules a line of code names through `crate::`: `use
/// crate::a::X`, `crate::b::f()`, `use crate::{c::Y, d}`, and root
/// re-exports (`crate::Nccl`, reported as `Nccl`).
fn crate_paths(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// The imports of one file against the layers: `file:line: a imports b`.
fn violations(module: &str, file: &str, text: &str, layers: &BTreeMap<String, u32>) -> Vec<String> {
    let Some(&own) = layers.get(module) else {
        return vec![format!(
            "{file}: module `{module}` is not in ARCHITECTURE.md's layer table"
        )];
    };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        for dep in crate_paths(line) {
            if dep == module {
                continue;
            }
            match layers.get(&dep) {
                Some(&l) if l < own => {}
                Some(&l) => out.push(format!(
                    "{file}:{}: `{module}` (layer {own}) imports `{dep}` (layer {l}): imports run down the layers only",
                    n + 1
                )),
                None => out.push(format!(
                    "{file}:{}: `{module}` imports `crate::{dep}`: name the module it comes from, not a root re-export",
                    n + 1
                )),
            }
        }
    }
    out
}

/// A file's code without its test modules: a test may use what sits
/// above it (a launcher's tests, the table that holds its row). A module's
/// tests in a file of their own (`tests.rs`) are all test code.
fn without_tests<'a>(file: &Path, text: &'a str) -> &'a str {
    if file.file_name().is_some_and(|n| n == "tests.rs") {
        return "";
    }
    match text.find("\n#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

#[test]
fn imports_run_down_the_layers() {
    let mut bad = Vec::new();
    for (dir, heading) in present_crates() {
        let layers = layers_of(heading);
        let src = repo().join(dir);
        for f in rust_files(&src) {
            let module = module_of(&src, &f);
            if module == "lib" || module == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            let shown = f.strip_prefix(repo()).unwrap().display().to_string();
            bad.extend(violations(
                &module,
                &shown,
                without_tests(&f, &text),
                &layers,
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "imports against ARCHITECTURE.md:\n{}",
        bad.join("\n")
    );
}

/// The commands of `nccl-find`: rooms on one floor of the command's table.
const COMMANDS: [&str; 5] = ["buildsys", "doctor", "explain", "ras", "smoke"];

/// The commands are peers: all on one floor of ARCHITECTURE.md's table
/// (so that none can be moved above another to import it), and none
/// imports another. The count of imports between them is printed.
#[test]
fn the_commands_are_peers() {
    if !repo().join("cli/src").is_dir() {
        eprintln!(
            "cli/src is not here (a packaged crate): the commands are checked in the repository"
        );
        return;
    }
    let layers = layers_of("## Layers of the command");
    let floors: Vec<(&str, Option<&u32>)> = COMMANDS.iter().map(|c| (*c, layers.get(*c))).collect();
    assert!(
        floors.iter().all(|(_, f)| f.is_some() && *f == floors[0].1),
        "the commands are not on one floor: {floors:?}"
    );
    let src = repo().join("cli/src");
    let mut found = Vec::new();
    for f in rust_files(&src) {
        let module = module_of(&src, &f);
        if !COMMANDS.contains(&module.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in without_tests(&f, &text).lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for dep in crate_paths(line) {
                if dep != module && COMMANDS.contains(&dep.as_str()) {
                    let shown = f.strip_prefix(repo()).unwrap().display().to_string();
                    found.push(format!("{shown}:{}: `{module}` imports `{dep}`", n + 1));
                }
            }
        }
    }
    eprintln!("imports between commands: {}", found.len());
    assert!(
        found.is_empty(),
        "a command imports another: move what they share to facts/ or rules/\n{}",
        found.join("\n")
    );
}

#[test]
fn the_import_check_catches_each_kind_of_wrong_import() {
    let layers = layers();
    let v = |m: &str, text: &str| violations(m, "f.rs", text, &layers);
    // Down the layers: fine, in every form.
    assert!(v(
        "inspect",
        "use crate::problem::Problem;\nuse crate::{context::Ctx, version};"
    )
    .is_empty());
    assert!(v("probe", "let r = crate::select::select(&mut c, None);").is_empty());
    // Comments and doc links are not imports.
    assert!(v(
        "inspect",
        "/// See [`crate::probe::Config`].\n// crate::emit"
    )
    .is_empty());
    // Up, sideways, through the root, from an unknown module.
    assert_eq!(
        v("inspect", "use crate::probe::Config;"),
        ["f.rs:1: `inspect` (layer 7) imports `probe` (layer 13): imports run down the layers only"]
    );
    assert_eq!(
        v("req", "x = crate::files::read_bounded(p, 1);"),
        ["f.rs:1: `req` (layer 0) imports `files` (layer 0): imports run down the layers only"]
    );
    assert_eq!(
        v("sources", "use crate::{context::Ctx, inspect::Candidate};"),
        ["f.rs:1: `sources` (layer 6) imports `inspect` (layer 7): imports run down the layers only"]
    );
    assert_eq!(
        v("emit", "use crate::Nccl;"),
        ["f.rs:1: `emit` imports `crate::Nccl`: name the module it comes from, not a root re-export"]
    );
    assert_eq!(
        v("newmod", ""),
        ["f.rs: module `newmod` is not in ARCHITECTURE.md's layer table"]
    );
}

#[test]
fn every_module_is_in_its_crates_layer_table() {
    for (dir, heading) in present_crates() {
        let layers = layers_of(heading);
        let src = repo().join(dir);
        let mut modules: Vec<String> = rust_files(&src)
            .iter()
            .map(|f| module_of(&src, f))
            .collect();
        modules.dedup();
        let missing: Vec<&String> = modules
            .iter()
            .filter(|m| !layers.contains_key(*m))
            .collect();
        let stale: Vec<&String> = layers.keys().filter(|m| !modules.contains(m)).collect();
        assert!(
            missing.is_empty() && stale.is_empty(),
            "{dir}: not in the table: {missing:?}; in the table but not in {dir}: {stale:?}"
        );
    }
}

/// The sibling modules a file names through `via` (`super::`, or the
/// directory's own path, `crate::emit::`): `super::kept` in
/// `emit/loader_dir.rs` → `kept`, among `siblings`.
fn sibling_imports(text: &str, siblings: &[String], via: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let uses = via.iter().flat_map(|v| line.match_indices(v.as_str()));
        for (at, v) in uses {
            let rest = &line[at + v.len()..];
            let mut names = Vec::new();
            match rest.strip_prefix('{') {
                Some(group) => names.extend(group.split([',', '}']).map(str::trim)),
                None => names.push(rest),
            }
            for n in names {
                let name: String = n
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if siblings.contains(&name) && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// No circles inside a module either: the files of one directory (the
/// library's `emit/`, the rendezvous' `stores/`) never import each other
/// around a loop through `super::`. A loop found is named, file by file.
#[test]
fn no_files_import_each_other_around_a_circle() {
    let mut circles = Vec::new();
    for (dir, _) in present_crates() {
        let src = repo().join(dir);
        let mut dirs: Vec<PathBuf> = rust_files(&src)
            .iter()
            .map(|f| f.parent().unwrap().to_path_buf())
            .collect();
        dirs.dedup();
        for d in dirs {
            let files: Vec<PathBuf> = rust_files(&d)
                .into_iter()
                .filter(|f| f.parent() == Some(d.as_path()))
                .collect();
            let names: Vec<String> = files
                .iter()
                .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
                .collect();
            // `crate::emit::`, for the files of src/emit/.
            let rel = d.strip_prefix(&src).unwrap();
            let mut path = String::from("crate::");
            for c in rel.components() {
                path.push_str(&c.as_os_str().to_string_lossy());
                path.push_str("::");
            }
            let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (f, name) in files.iter().zip(&names) {
                let text = std::fs::read_to_string(f).unwrap();
                // In mod.rs (and lib.rs, main.rs) `super::` is the level above.
                let mut via = vec![path.clone()];
                if !["mod", "lib", "main"].contains(&name.as_str()) {
                    via.push("super::".to_string());
                }
                let own = sibling_imports(without_tests(f, &text), &names, &via);
                edges.insert(
                    name.clone(),
                    own.into_iter().filter(|n| n != name).collect(),
                );
            }
            // Depth-first from each file; a path back to where it began is a circle.
            for start in &names {
                let mut stack = vec![vec![start.clone()]];
                while let Some(path) = stack.pop() {
                    for next in &edges[path.last().unwrap()] {
                        if next == start {
                            let shown = d.strip_prefix(repo()).unwrap().display().to_string();
                            circles.push(format!("{shown}: {} -> {start}", path.join(" -> ")));
                        } else if !path.contains(next) {
                            let mut longer = path.clone();
                            longer.push(next.clone());
                            stack.push(longer);
                        }
                    }
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "files that import each other:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_check_reads_super_imports() {
    let siblings = [
        "kept".to_string(),
        "loader_files".to_string(),
        "durable".to_string(),
    ];
    let text = "use super::loader_files::{make_loader_dir, LoaderDir};\n\
                // super::durable in a comment\n\
                let k = super::kept::kept_dir(p);\nuse super::{durable, other};\n";
    let via = ["super::".to_string(), "crate::emit::".to_string()];
    assert_eq!(
        sibling_imports(text, &siblings, &via),
        ["loader_files", "kept", "durable"]
    );
    assert_eq!(
        sibling_imports("use crate::emit::kept::kept_dir;\n", &siblings, &via),
        ["kept"]
    );
}

/// Rust source with comments, strings and char literals blanked out
/// (newlines kept), so that braces can be counted.
fn mask(src: &str) -> Vec<u8> {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !ident_before
            && (b[i..].starts_with(b"r#")
                || b[i..].starts_with(b"r\"")
                || b[i..].starts_with(b"br"))
        {
            let start = i;
            let mut j = i + if b[i] == b'b' { 2 } else { 1 };
            let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
            j += hashes;
            if b.get(j) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat(b'#').take(hashes))
                .collect();
            let end = b[j + 1..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| j + 1 + p + close.len());
            blank(&mut out, start, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\''), not a lifetime ('a).
            let lit = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .take(10)
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p + 1)
            } else {
                let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch_len) == Some(&b'\'')).then_some(i + 2 + ch_len)
            };
            match lit {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Functions longer than `limit` lines: `(name, first line, length)`, each
/// unless a comment line above it (among its docs and attributes) starts
/// with `// Long:` and gives the reason.
fn long_functions(src: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let masked = mask(src);
    let lines: Vec<&str> = src.lines().collect();
    let mut line_starts = vec![0];
    for (i, &c) in masked.iter().enumerate() {
        if c == b'\n' {
            line_starts.push(i + 1);
        }
    }
    let mut out = Vec::new();
    for (n, &start) in line_starts.iter().enumerate() {
        let line = &masked[start..];
        let text = String::from_utf8_lossy(
            &line[..line.iter().position(|&c| c == b'\n').unwrap_or(line.len())],
        )
        .into_owned();
        let words: Vec<&str> = text.split_whitespace().collect();
        let Some(k) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        if !words[..k].iter().all(|w| {
            w.starts_with("pub")
                || ["const", "async", "unsafe", "extern", "\"C\""].contains(w)
                || w.starts_with("pub(")
        }) {
            continue;
        }
        let name: String = words
            .get(k + 1)
            .unwrap_or(&"")
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body: the first `{` at depth 0 of the signature, unless a `;` comes first.
        let (mut depth, mut j, mut body) = (0i32, start, None);
        while j < masked.len() {
            match masked[j] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    body = Some(j);
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let Some(open) = body else { continue };
        let (mut d, mut end) = (0i32, open);
        for (idx, &c) in masked.iter().enumerate().skip(open) {
            match c {
                b'{' => d += 1,
                b'}' => {
                    d -= 1;
                    if d == 0 {
                        end = idx;
                        break;
                    }
                }
                _ => {}
            }
        }
        let last = line_starts.partition_point(|&s| s <= end) - 1;
        let len = last - n + 1;
        if len <= limit {
            continue;
        }
        let mut above = n;
        let mut reason = false;
        while above > 0 {
            let l = lines[above - 1].trim_start();
            if l.starts_with("// Long:") {
                reason = true;
            }
            if !(l.starts_with("//") || l.starts_with("#[")) {
                break;
            }
            above -= 1;
        }
        if !reason {
            out.push((name, n + 1, len));
        }
    }
    out
}

#[test]
fn no_function_is_over_80_lines_without_a_reason() {
    let mut bad = Vec::new();
    for dir in [
        "src",
        "cli/src",
        "nccl-sys/src",
        "nccl-smoke/src",
        "nccl-rendezvous/src",
    ] {
        let d = repo().join(dir);
        if !d.exists() {
            continue;
        }
        for f in rust_files(&d) {
            let text = std::fs::read_to_string(&f).unwrap();
            let shown = f.strip_prefix(repo()).unwrap().display().to_string();
            for (name, line, len) in long_functions(&text, 80) {
                bad.push(format!("{shown}:{line}: fn {name} is {len} lines"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "split these, or say why one reads best whole in a `// Long: <reason>` comment above it:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_length_check_counts_what_it_should() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let f = |n: usize| format!("fn long_one() {{\n{}}}\n", body(n));
    // 80 lines in all passes; 81 does not.
    assert!(long_functions(&f(78), 80).is_empty());
    assert_eq!(
        long_functions(&f(79), 80),
        [("long_one".to_string(), 1, 81)]
    );
    // Braces in strings, chars and comments don't count; lifetimes are not chars.
    let tricky = format!(
        "pub(crate) fn tricky<'a>(s: &'a str) -> usize {{\n    let _ = \"}}\";\n    let _ = '}}';\n    // }}\n    let _ = r#\"}}\"#;\n{}}}\nfn next() {{}}\n",
        body(80)
    );
    assert_eq!(long_functions(&tricky, 80), [("tricky".to_string(), 1, 86)]);
    // A reason above it lets it be.
    let excused = format!(
        "/// Docs.\n// Long: one table, read whole.\n#[allow(dead_code)]\n{}",
        f(100)
    );
    assert!(long_functions(&excused, 80).is_empty());
}

/// The code before a file's `#[cfg(test)]` module: what the library
/// compiles. A module's tests in a file of their own (`tests.rs`) are none.
fn library_part<'a>(file: &Path, text: &'a str) -> &'a str {
    if file.file_name().is_some_and(|n| n == "tests.rs") {
        return "";
    }
    match text.find("\n#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// Uses that compile a large body of std's generic code anew for each
/// element type or comparison: sorts and the std maps and sets. Comments
/// and strings don't count.
fn costly_generics(src: &str) -> Vec<&'static str> {
    const COSTLY: [&str; 10] = [
        ".sort(",
        ".sort_by(",
        ".sort_by_key(",
        ".sort_by_cached_key(",
        ".sort_unstable(",
        ".sort_unstable_by(",
        ".sort_unstable_by_key(",
        "HashMap",
        "HashSet",
        "BTree",
    ];
    let masked = String::from_utf8(mask(src)).unwrap();
    let mut found = Vec::new();
    for c in COSTLY {
        for _ in masked.matches(c) {
            found.push(c);
        }
    }
    found
}

/// Every downstream build script compiles the library, so it sorts in one
/// place (`context::order`) and keeps no std maps or sets: each sort or map
/// instantiated for another type adds thousands of lines of machine code.
#[test]
fn the_library_sorts_in_one_place_and_keeps_no_maps() {
    let src = repo().join("src");
    let mut found = Vec::new();
    for f in rust_files(&src) {
        let text = std::fs::read_to_string(&f).unwrap();
        let shown = f.strip_prefix(repo()).unwrap().display().to_string();
        for c in costly_generics(library_part(&f, &text)) {
            found.push(format!("{shown}: {c}"));
        }
    }
    assert_eq!(
        found,
        ["src/context.rs: .sort_unstable("],
        "sort through context::order or newest_first, and use a Vec for small sets and maps \
         (see ARCHITECTURE.md, Compile cost)"
    );
}

#[test]
fn the_cost_check_sees_code_but_not_comments_or_strings() {
    let src = "// v.sort();\nlet s = \"HashMap\";\nv.sort_by(|a, b| a.cmp(b));\nlet m: HashSet<u8> = HashSet::new();\n#[cfg(test)]\nmod tests {\n    fn f() { v.sort(); }\n}\n";
    assert_eq!(
        costly_generics(library_part(Path::new("src/x.rs"), src)),
        [".sort_by(", "HashSet", "HashSet"]
    );
}
