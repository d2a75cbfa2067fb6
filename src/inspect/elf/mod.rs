//! A small, bounded ELF reader: the soname, `DT_NEEDED`, `RUNPATH`, and the
//! `NCCL version X.Y.Z+cudaA.B` text that every `libnccl.so.2` carries
//! (found by that pattern: from 2.30 on, help text such as "NCCL version
//! information" comes first in the file). It
//! reads the section headers and the few sections it needs, never the whole
//! file (a real `libnccl.so.2` is 150–300 MB, its `.rodata` 0.1–0.3 MB).
//! Every offset is checked against the file's length: a truncated or
//! garbage file gives an error, never a panic.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::version::{CudaVersion, Version};

mod rodata;
pub use rodata::parse_version_text;
use rodata::scan;

/// What was read from an ELF shared library.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ElfInfo {
    /// `DT_SONAME`, e.g. `libnccl.so.2`.
    pub soname: Option<String>,
    /// `DT_NEEDED` entries.
    pub needed: Vec<String>,
    /// `DT_RPATH`: searched before `LD_LIBRARY_PATH`, for this object's
    /// dependencies and theirs, unless the object also has a `DT_RUNPATH`.
    pub rpath: Option<String>,
    /// `DT_RUNPATH`: searched after `LD_LIBRARY_PATH`, for this object's
    /// own dependencies only.
    pub runpath: Option<String>,
    /// The text after `NCCL version `, e.g. `2.21.5+cuda12.4`.
    pub version_text: Option<String>,
    /// The text after `NCCL git version ` (NCCL 2.29 on): the branch and
    /// the commit it was built from, e.g. `master v2.29.2-1-g3f2a1b4`
    /// (`unknown unknown` in the wheels, built outside git).
    pub git_version: Option<String>,
    /// `e_machine`: 62 for x86-64, 183 for AArch64, 21 for POWER.
    pub machine: u16,
    /// The newest glibc symbol version it needs (`GLIBC_2.38` is `(2, 38)`),
    /// from its version needs (`.gnu.version_r`): a system whose glibc is
    /// older can neither link it nor load it.
    pub glibc_needed: Option<(u32, u32)>,
}

impl ElfInfo {
    /// The NCCL and CUDA versions its version text names
    /// (`2.21.5+cuda12.4`), if it has one that reads as such.
    pub fn version(&self) -> Option<(Version, Option<CudaVersion>)> {
        parse_version_text(self.version_text.as_deref()?)
    }
}

const MAX_TABLE: u64 = 16 << 20;
const MAX_SCAN: u64 = 64 << 20;

/// Anything the reader can read from: a file, or bytes in memory.
trait Source: Read + Seek {}
impl<T: Read + Seek> Source for T {}

struct Reader {
    file: Box<dyn Source>,
    len: u64,
    le: bool,
    wide: bool,
}

impl Reader {
    /// Reads the ELF identification: the magic, then the class (32 or 64
    /// bits) and the byte order, which every later read follows.
    fn identify(&mut self) -> Result<(), String> {
        let len = self.len;
        let ident = self.bytes(0, len.min(16), "the ELF identification")?;
        if !ident.starts_with(b"\x7fELF") {
            return Err("it is not an ELF file (no \\x7fELF magic)".into());
        }
        if len < 16 {
            return Err(format!("it is {len} bytes long, too short to be a library"));
        }
        self.wide = match ident[4] {
            1 => false,
            2 => true,
            c => return Err(format!("unknown ELF class {c}")),
        };
        self.le = match ident[5] {
            1 => true,
            2 => false,
            d => return Err(format!("unknown ELF data encoding {d}")),
        };
        Ok(())
    }

    fn bytes(&mut self, off: u64, len: u64, what: &str) -> Result<Vec<u8>, String> {
        let Some(end) = off.checked_add(len) else {
            return Err(format!("{what}: offset overflows"));
        };
        if end > self.len {
            return Err(format!(
                "{what} lies at bytes {off}..{end}, past the end of the {}-byte file: the file is truncated",
                self.len
            ));
        }
        let mut buf = vec![0; len as usize];
        if let Err(e) = self.file.seek(SeekFrom::Start(off)) {
            return Err(e.to_string());
        }
        match self.file.read_exact(&mut buf) {
            Ok(()) => Ok(buf),
            Err(e) => Err(e.to_string()),
        }
    }

    fn uint(&self, b: &[u8], off: usize, size: usize) -> u64 {
        let s = &b[off..off + size];
        let mut v = 0u64;
        for i in 0..size {
            let byte = if self.le { s[size - 1 - i] } else { s[i] };
            v = (v << 8) | u64::from(byte);
        }
        v
    }

    /// Reads a word: 8 bytes in ELF64, 4 in ELF32.
    fn word(&self, b: &[u8], off64: usize, off32: usize) -> u64 {
        if self.wide {
            self.uint(b, off64, 8)
        } else {
            self.uint(b, off32, 4)
        }
    }
}

#[derive(Debug, Clone)]
struct Section {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
}

/// A section's bytes and the bytes of the string table it links to.
type TableAndStrings = (Vec<u8>, Vec<u8>);

/// An opened ELF file with its section headers read.
struct Elf {
    r: Reader,
    sections: Vec<Section>,
    names: Vec<u8>,
    machine: u16,
}

const SHT_DYNAMIC: u32 = 6;
const SHT_STRTAB: u32 = 3;
const SHT_DYNSYM: u32 = 11;
const SHT_GNU_VERDEF: u32 = 0x6fff_fffd;
const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
#[cfg(feature = "command")]
const SHT_RELA: u32 = 4;
#[cfg(feature = "command")]
const SHT_REL: u32 = 9;

impl Elf {
    fn open(path: &Path) -> Result<Elf, String> {
        match crate::files::open_regular(path) {
            Ok((file, len)) => Elf::from_source(Box::new(file), len),
            Err(e) => Err(e.to_string()),
        }
    }

    #[cfg(any(fuzzing, test))]
    fn from_bytes(data: &[u8]) -> Result<Elf, String> {
        Elf::from_source(
            Box::new(std::io::Cursor::new(data.to_vec())),
            data.len() as u64,
        )
    }

    fn from_source(file: Box<dyn Source>, len: u64) -> Result<Elf, String> {
        let mut r = Reader {
            file,
            len,
            le: true,
            wide: true,
        };
        r.identify()?;
        let ehsize = if r.wide { 64 } else { 52 };
        let eh = r.bytes(0, ehsize, "the ELF header")?;
        let shoff = r.word(&eh, 0x28, 0x20);
        let (shentsize, shnum, shstrndx) = if r.wide {
            (
                r.uint(&eh, 0x3a, 2),
                r.uint(&eh, 0x3c, 2),
                r.uint(&eh, 0x3e, 2),
            )
        } else {
            (
                r.uint(&eh, 0x2e, 2),
                r.uint(&eh, 0x30, 2),
                r.uint(&eh, 0x32, 2),
            )
        };
        let min_ent = if r.wide { 64 } else { 40 };
        if shoff == 0 || shnum == 0 {
            return Err("it has no section headers".into());
        }
        if shentsize < min_ent {
            return Err(format!("its section header size {shentsize} is too small"));
        }
        if shentsize > 256 || shentsize * shnum > MAX_TABLE {
            return Err(format!(
                "its section header table ({shnum} entries of {shentsize} bytes) is implausibly large"
            ));
        }
        let table = r.bytes(shoff, shentsize * shnum, "the section header table")?;
        let mut sections = Vec::with_capacity(shnum as usize);
        for i in 0..shnum as usize {
            let b = &table[i * shentsize as usize..];
            sections.push(Section {
                name: r.uint(b, 0, 4) as u32,
                kind: r.uint(b, 4, 4) as u32,
                offset: r.word(b, 24, 16),
                size: r.word(b, 32, 20),
                link: r.uint(b, if r.wide { 40 } else { 24 }, 4) as u32,
            });
        }
        let names = match sections.get(shstrndx as usize) {
            Some(s) if s.size <= MAX_TABLE => {
                r.bytes(s.offset, s.size, "the section name table")?
            }
            _ => Vec::new(),
        };
        let machine = r.uint(&eh, 18, 2) as u16;
        Ok(Elf {
            r,
            sections,
            names,
            machine,
        })
    }

    /// A section of `kind` and the string table it links to, both read.
    fn with_strings(&mut self, kind: u32, what: &str) -> Result<Option<TableAndStrings>, String> {
        let mut found = None;
        for s in &self.sections {
            if s.kind == kind {
                found = Some(s);
                break;
            }
        }
        let Some(sec) = found else {
            return Ok(None);
        };
        let strtab = match self.sections.get(sec.link as usize) {
            Some(s) if s.kind == SHT_STRTAB => s,
            _ => return Err(format!("its {what} section has no string table")),
        };
        if sec.size > MAX_TABLE || strtab.size > MAX_TABLE {
            return Err(format!("its {what} section is implausibly large"));
        }
        let data = self.r.bytes(sec.offset, sec.size, what)?;
        let strs = self.r.bytes(strtab.offset, strtab.size, "a string table")?;
        Ok(Some((data, strs)))
    }
}

/// Reads what nccl-find needs from an ELF file.
pub fn read_elf(path: &Path) -> Result<ElfInfo, String> {
    info(Elf::open(path)?)
}

/// [`read_elf`] over bytes in memory (for fuzzing and tests).
#[cfg(any(fuzzing, test))]
pub fn read_elf_bytes(data: &[u8]) -> Result<ElfInfo, String> {
    info(Elf::from_bytes(data)?)
}

/// [`dynamic_symbols`] over bytes in memory (for fuzzing and tests).
#[cfg(any(fuzzing, test))]
pub fn dynamic_symbols_bytes(data: &[u8]) -> Result<Vec<String>, String> {
    symbols(Elf::from_bytes(data)?)
}

/// [`read_elf`] without looking for the version text: the dynamic
/// section's names only, for the loader model, which reads every object a
/// process maps (a `libtorch_cuda.so` is over 1 GB).
pub fn read_dynamic(path: &Path) -> Result<ElfInfo, String> {
    let mut elf = Elf::open(path)?;
    let mut info = ElfInfo {
        machine: elf.machine,
        ..ElfInfo::default()
    };
    dynamic_names(&mut elf, &mut info)?;
    Ok(info)
}

/// The names of the symbols an object imports from others (undefined in
/// its `.dynsym`, global or weak, and not weak references), in the order
/// its relocations bind them, which is the order in which the loader,
/// binding all at once (`RTLD_NOW`, as Python imports extensions), meets
/// them: the first one no library defines is the one its `undefined
/// symbol` error names. (Feature `command`.)
#[cfg(feature = "command")]
#[cfg_attr(docsrs, doc(cfg(feature = "command")))]
pub fn imports(path: &Path) -> Result<Vec<String>, String> {
    let mut elf = Elf::open(path)?;
    let Some((syms, strs)) = elf.with_strings(SHT_DYNSYM, ".dynsym")? else {
        return Ok(Vec::new());
    };
    let wide = elf.r.wide;
    let ent = if wide { 24 } else { 16 };
    let count = syms.len() / ent;
    // Each undefined, strongly referenced symbol, by its index.
    let mut names: Vec<Option<String>> = Vec::with_capacity(count);
    for e in syms.chunks_exact(ent) {
        let name = elf.r.uint(e, 0, 4) as usize;
        let (info, shndx) = if wide {
            (e[4], elf.r.uint(e, 6, 2))
        } else {
            (e[12], elf.r.uint(e, 14, 2))
        };
        let strong = info >> 4 == 1;
        names.push(match cstr(&strs, name) {
            Some(n) if shndx == 0 && strong && !n.is_empty() => Some(n),
            _ => None,
        });
    }
    let mut out: Vec<String> = Vec::new();
    let mut taken = vec![false; count];
    let relocs: Vec<(u64, u64, u32)> = elf
        .sections
        .iter()
        .filter(|s| s.kind == SHT_RELA || s.kind == SHT_REL)
        .map(|s| (s.offset, s.size, s.kind))
        .collect();
    for (offset, size, kind) in relocs {
        if size > MAX_SCAN {
            return Err("a relocation section is implausibly large".into());
        }
        let data = elf.r.bytes(offset, size, "a relocation section")?;
        let step = match (wide, kind == SHT_RELA) {
            (true, true) => 24,
            (true, false) => 16,
            (false, true) => 12,
            (false, false) => 8,
        };
        for r in data.chunks_exact(step) {
            let info = elf.r.word(r, 8, 4);
            let sym = if wide { info >> 32 } else { info >> 8 } as usize;
            if sym < count && !taken[sym] {
                taken[sym] = true;
                if let Some(n) = &names[sym] {
                    out.push(n.clone());
                }
            }
        }
    }
    for (i, n) in names.into_iter().enumerate() {
        if let (false, Some(n)) = (taken[i], n) {
            out.push(n);
        }
    }
    Ok(out)
}

/// Reads `DT_SONAME`, `DT_NEEDED`, `DT_RPATH` and `DT_RUNPATH` into `info`.
fn dynamic_names(elf: &mut Elf, info: &mut ElfInfo) -> Result<(), String> {
    if let Some((dynbytes, strs)) = elf.with_strings(SHT_DYNAMIC, ".dynamic")? {
        let r = &elf.r;
        let ent = if r.wide { 16 } else { 8 };
        for e in dynbytes.chunks_exact(ent) {
            let tag = r.word(e, 0, 0);
            let val = r.word(e, 8, 4) as usize;
            match tag {
                0 => break,
                1 => {
                    if let Some(name) = cstr(&strs, val) {
                        info.needed.push(name);
                    }
                }
                14 => info.soname = cstr(&strs, val),
                15 => info.rpath = cstr(&strs, val),
                29 => info.runpath = cstr(&strs, val),
                _ => {}
            }
        }
    }
    Ok(())
}

/// `GLIBC_2.38` → `(2, 38)`.
fn glibc_version(name: &str) -> Option<(u32, u32)> {
    let mut parts = name.strip_prefix("GLIBC_")?.split('.');
    let major = parse_u32(parts.next()?)?;
    let minor = parts.next().map_or(Some(0), parse_u32)?;
    Some((major, minor))
}

/// The newest `GLIBC_x.y` among the names of a version section: needs
/// (`.gnu.version_r`: entries of 16 bytes, each with `vn_cnt` auxiliary
/// entries of 16) or definitions (`.gnu.version_d`: entries of 20 bytes,
/// each with auxiliaries of 8, the first naming the version). Every offset
/// is bounded by the section; a chain longer than it could hold ends, and
/// the whole walk takes at most one step for each 8 bytes of it.
fn newest_glibc(elf: &mut Elf, kind: u32) -> Result<Option<(u32, u32)>, String> {
    let Some((data, strs)) = elf.with_strings(kind, "symbol version")? else {
        return Ok(None);
    };
    let r = &elf.r;
    let need = kind == SHT_GNU_VERNEED;
    // A field `at` bytes into the entry at `base` (offsets from the file,
    // so every sum saturates: past the section is None).
    let field = |base: usize, at: usize, size: usize| -> Option<usize> {
        let off = base.saturating_add(at);
        let b = data.get(off..off.checked_add(size)?)?;
        Some(r.uint(b, 0, size) as usize)
    };
    let mut newest = None;
    // One budget for the entries and their auxiliaries together: no walk
    // takes more steps than the section has 8-byte words.
    let (mut entry, mut left) = (0usize, data.len() / 8);
    while left > 0 {
        left -= 1;
        let (count, aux, next) = match need {
            true => (field(entry, 2, 2), field(entry, 8, 4), field(entry, 12, 4)),
            false => (field(entry, 6, 2), field(entry, 12, 4), field(entry, 16, 4)),
        };
        let (Some(count), Some(aux), Some(next)) = (count, aux, next) else {
            break;
        };
        let mut a = entry.saturating_add(aux);
        for _ in 0..count {
            if left == 0 {
                break;
            }
            left -= 1;
            let name = field(a, if need { 8 } else { 0 }, 4);
            if let Some(v) = name
                .and_then(|n| cstr(&strs, n))
                .and_then(|n| glibc_version(&n))
            {
                newest = newest.max(Some(v));
            }
            match field(a, if need { 12 } else { 4 }, 4) {
                Some(0) | None => break,
                Some(n) => a = a.saturating_add(n),
            }
            if !need {
                break;
            }
        }
        if next == 0 {
            break;
        }
        entry = entry.saturating_add(next);
    }
    Ok(newest)
}

/// A C library's (`libc.so.6`) machine, and the newest glibc version it
/// defines, from its version definitions: that glibc's own version.
pub(crate) fn glibc_defined(path: &Path) -> Result<(u16, Option<(u32, u32)>), String> {
    let mut elf = Elf::open(path)?;
    Ok((elf.machine, newest_glibc(&mut elf, SHT_GNU_VERDEF)?))
}

fn info(mut elf: Elf) -> Result<ElfInfo, String> {
    let mut info = ElfInfo {
        machine: elf.machine,
        ..ElfInfo::default()
    };
    dynamic_names(&mut elf, &mut info)?;
    info.glibc_needed = newest_glibc(&mut elf, SHT_GNU_VERNEED)?;
    let mut scanned = 0u64;
    for s in &elf.sections {
        match cstr(&elf.names, s.name as usize) {
            Some(name) if name.starts_with(".rodata") => {}
            _ => continue,
        }
        if scanned >= MAX_SCAN {
            break;
        }
        let size = s.size.min(MAX_SCAN - scanned);
        scanned += size;
        let (text, git) = scan(&mut elf.r, s.offset, size)?;
        info.version_text = info.version_text.or(text);
        info.git_version = info.git_version.or(git);
        if info.version_text.is_some() && info.git_version.is_some() {
            break;
        }
    }
    Ok(info)
}

/// The strings of a library's `.rodata` that are exactly a name starting
/// with `prefix` and made of capitals, digits and `_` (`NCCL_SOCKET_IFNAME`):
/// the variables NCCL can read, as the file that runs holds them. Sorted,
/// each once. (Feature `command`.)
#[cfg(feature = "command")]
#[cfg_attr(docsrs, doc(cfg(feature = "command")))]
pub fn rodata_names(path: &Path, prefix: &str) -> Result<Vec<String>, String> {
    let mut elf = Elf::open(path)?;
    let mut out: Vec<String> = Vec::new();
    let mut scanned = 0u64;
    let sections: Vec<(u64, u64)> = elf
        .sections
        .iter()
        .filter(|s| cstr(&elf.names, s.name as usize).is_some_and(|n| n.starts_with(".rodata")))
        .map(|s| (s.offset, s.size))
        .collect();
    for (offset, size) in sections {
        let size = size.min(MAX_SCAN.saturating_sub(scanned));
        scanned += size;
        let data = elf.r.bytes(offset, size, "the .rodata section")?;
        for s in data.split(|b| *b == 0) {
            let name = s.strip_prefix(prefix.as_bytes()).is_some()
                && s.len() > prefix.len()
                && s.iter()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_');
            if name && out.len() < 65536 {
                out.push(String::from_utf8_lossy(s).into_owned());
            }
        }
    }
    Ok(sorted_unique(&out))
}

/// The names of the symbols an ELF shared library defines and exports
/// (`.dynsym` entries that are defined, global or weak), sorted.
pub fn dynamic_symbols(path: &Path) -> Result<Vec<String>, String> {
    symbols(Elf::open(path)?)
}

fn symbols(mut elf: Elf) -> Result<Vec<String>, String> {
    let Some((syms, strs)) = elf.with_strings(SHT_DYNSYM, ".dynsym")? else {
        return Err("it has no dynamic symbol table".into());
    };
    let r = &elf.r;
    let ent = if r.wide { 24 } else { 16 };
    let mut out = Vec::new();
    for e in syms.chunks_exact(ent) {
        let name = r.uint(e, 0, 4) as usize;
        let (info, shndx) = if r.wide {
            (e[4], r.uint(e, 6, 2))
        } else {
            (e[12], r.uint(e, 14, 2))
        };
        let bind = info >> 4;
        if shndx == 0 || !(bind == 1 || bind == 2) {
            continue;
        }
        match cstr(&strs, name) {
            Some(n) if !n.is_empty() => out.push(n),
            _ => {}
        }
    }
    // Sorted by bytes, each name once (callers binary-search the list).
    Ok(sorted_unique(&out))
}

/// The names sorted by bytes, each once.
fn sorted_unique(names: &[String]) -> Vec<String> {
    let mut bytes: Vec<&[u8]> = Vec::with_capacity(names.len());
    for n in names {
        bytes.push(n.as_bytes());
    }
    let mut unique: Vec<String> = Vec::with_capacity(names.len());
    for i in crate::context::by_bytes(&bytes) {
        if unique.last() != Some(&names[i]) {
            unique.push(names[i].clone());
        }
    }
    unique
}

/// The longest name read from a string table: a symbol, section or
/// library name longer than this is no name (real ones are under 1 KiB),
/// so that looking names up costs at most this much each, however the
/// table is made.
const MAX_NAME: usize = 4096;

fn cstr(table: &[u8], off: usize) -> Option<String> {
    let rest = table.get(off..)?;
    let rest = &rest[..rest.len().min(MAX_NAME + 1)];
    let end = rest.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// A decimal number that fits in 32 bits, read exactly as
/// `text.parse::<u32>()` reads it. Read as a `u64` first: that parser is
/// compiled for the rest of the crate anyway, a second one for `u32` is not.
pub(crate) fn parse_u32(text: &str) -> Option<u32> {
    match text.parse::<u64>() {
        Ok(v) if v <= u64::from(u32::MAX) => Some(v as u32),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_text() {
        let (v, c) = parse_version_text("2.21.5+cuda12.4").unwrap();
        assert_eq!(
            (v.to_string(), c.unwrap().to_string()),
            ("2.21.5".into(), "12.4".into())
        );
        let (v, c) = parse_version_text("2.19.3a0+cuda11.0").unwrap();
        assert_eq!(
            (v.to_string(), v.suffix.as_str(), c.unwrap().major),
            ("2.19.3a0".into(), "a0", 11)
        );
        assert_eq!(parse_version_text("2.21.5").unwrap().1, None);
        assert!(parse_version_text("%s").is_none());
        assert!(parse_version_text("2.21").is_none());
        assert!(parse_version_text("info").is_none());
        assert!(parse_version_text("2.21.5+cudaX").is_none());
        assert!(parse_version_text("2.21.5%s").is_none());
        let (v, c) = parse_version_text("2.32.3+cuda13.4").unwrap();
        assert_eq!((v.code, c.unwrap().minor), (23203, 4));
    }

    /// A minimal ELF64 with one `.rodata` section holding `strings`.
    fn elf_with_rodata(strings: &[&[u8]]) -> Vec<u8> {
        let mut rodata = Vec::new();
        for s in strings {
            rodata.extend_from_slice(s);
            rodata.push(0);
        }
        let shstr = b"\0.rodata\0.shstrtab\0".to_vec();
        let mut f = vec![0u8; 64];
        f[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        f[18] = 62;
        let ro_off = f.len() as u64;
        f.extend_from_slice(&rodata);
        let sh_off = f.len() as u64;
        f.extend_from_slice(&shstr);
        let table = f.len() as u64;
        let sec = |name: u32, kind: u32, off: u64, size: u64| {
            let mut e = vec![0u8; 64];
            e[0..4].copy_from_slice(&name.to_le_bytes());
            e[4..8].copy_from_slice(&kind.to_le_bytes());
            e[24..32].copy_from_slice(&off.to_le_bytes());
            e[32..40].copy_from_slice(&size.to_le_bytes());
            e
        };
        let mut secs = sec(0, 0, 0, 0);
        secs.extend(sec(1, 1, ro_off, rodata.len() as u64));
        secs.extend(sec(9, 3, sh_off, shstr.len() as u64));
        f.extend(secs);
        f[0x28..0x30].copy_from_slice(&table.to_le_bytes());
        f[0x3a] = 64;
        f[0x3c] = 3;
        f[0x3e] = 2;
        f
    }

    #[test]
    fn the_version_is_found_by_its_pattern_not_by_the_words() {
        // As in NCCL 2.30 and later: help text first, then the version.
        let lib = elf_with_rodata(&[
            b"Prints NCCL version information only.",
            b"NCCL version information",
            b"NCCL version %s",
            b"NCCL version 2.32.3+cuda12.9",
            b"NCCL version 2.32.3 compiled with CUDA 12.9",
        ]);
        assert_eq!(
            read_elf_bytes(&lib).unwrap().version_text.as_deref(),
            Some("2.32.3+cuda12.9")
        );
        // Only the sentence form: its version is taken.
        let lib = elf_with_rodata(&[
            b"NCCL version information",
            b"NCCL version 2.30.7 compiled with CUDA 12.9",
        ]);
        assert_eq!(
            read_elf_bytes(&lib).unwrap().version_text.as_deref(),
            Some("2.30.7")
        );
        // The words and no version at all.
        let lib = elf_with_rodata(&[b"NCCL version information", b"NCCL version %s"]);
        assert_eq!(read_elf_bytes(&lib).unwrap().version_text, None);
    }

    /// NCCL 2.29 on carries the branch and commit it was built from, before
    /// or after its version text; a wheel's is `unknown unknown`.
    #[test]
    fn the_git_version_is_read_in_the_same_pass() {
        let git = |strings: &[&[u8]]| {
            let info = read_elf_bytes(&elf_with_rodata(strings)).unwrap();
            (info.version_text, info.git_version)
        };
        assert_eq!(
            git(&[
                b"NCCL git version master v2.29.2-1-g3f2a1b4",
                b"NCCL version 2.29.2+cuda12.9"
            ]),
            (
                Some("2.29.2+cuda12.9".into()),
                Some("master v2.29.2-1-g3f2a1b4".into())
            )
        );
        assert_eq!(
            git(&[
                b"NCCL version 2.32.3+cuda13.2",
                b"NCCL git version unknown unknown"
            ])
            .1,
            Some("unknown unknown".into())
        );
        // Before 2.29, none; an empty, overlong or unprintable one is none.
        assert_eq!(git(&[b"NCCL version 2.28.9+cuda13.0"]).1, None);
        let long = [b"NCCL git version ".as_slice(), &[b'a'; 200]].concat();
        assert_eq!(git(&[&long, b"NCCL git version \x1b[2J"]).1, None);
    }

    /// A minimal ELF64 with these sections (name, kind, link, data), after
    /// a null section, and `.shstrtab` last.
    fn elf_with(sections: &[(&str, u32, u32, Vec<u8>)]) -> Vec<u8> {
        let mut shstr = b"\0".to_vec();
        let mut f = vec![0u8; 64];
        f[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        f[18] = 62;
        let mut heads = vec![vec![0u8; 64]];
        let head = |name: usize, kind: u32, link: u32, off: usize, size: usize| {
            let mut e = vec![0u8; 64];
            e[0..4].copy_from_slice(&(name as u32).to_le_bytes());
            e[4..8].copy_from_slice(&kind.to_le_bytes());
            e[24..32].copy_from_slice(&(off as u64).to_le_bytes());
            e[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            e[40..44].copy_from_slice(&link.to_le_bytes());
            e
        };
        for (name, kind, link, data) in sections {
            let n = shstr.len();
            shstr.extend_from_slice(name.as_bytes());
            shstr.push(0);
            heads.push(head(n, *kind, *link, f.len(), data.len()));
            f.extend_from_slice(data);
        }
        let n = shstr.len();
        shstr.extend_from_slice(b".shstrtab\0");
        heads.push(head(n, SHT_STRTAB, 0, f.len(), shstr.len()));
        f.extend_from_slice(&shstr);
        let table = f.len() as u64;
        let count = heads.len() as u16;
        for h in heads {
            f.extend(h);
        }
        f[0x28..0x30].copy_from_slice(&table.to_le_bytes());
        f[0x3a] = 64;
        f[0x3c..0x3e].copy_from_slice(&count.to_le_bytes());
        f[0x3e..0x40].copy_from_slice(&(count - 1).to_le_bytes());
        f
    }

    /// Files of 128 KiB made to cost each walk the square of their size: a
    /// version-needs chain that steps one entry at a time, each with a
    /// run of auxiliaries, and string tables with no NUL, which every name
    /// is looked up in. Each is read in time linear in its size.
    #[test]
    fn crafted_tables_are_read_in_linear_time() {
        let no_nul = vec![b'A'; 64 << 10];
        // .gnu.version_r: every 16 bytes an entry (vn_cnt 0xffff, vn_aux 0,
        // vn_next 16) that is also an auxiliary (vna_name 0, vna_next 16).
        let mut need = Vec::new();
        for _ in 0..(64 << 10) / 16 {
            let mut e = [0u8; 16];
            e[2..4].copy_from_slice(&0xffffu16.to_le_bytes());
            e[12..16].copy_from_slice(&16u32.to_le_bytes());
            need.extend_from_slice(&e);
        }
        // .dynsym: 2,700 global defined symbols, every name at offset 0.
        let mut syms = vec![0u8; 24];
        for _ in 0..2700 {
            let mut e = [0u8; 24];
            e[4] = 0x12;
            e[6] = 1;
            syms.extend_from_slice(&e);
        }
        let lib = elf_with(&[
            (".dynstr", SHT_STRTAB, 0, no_nul.clone()),
            (".gnu.version_r", SHT_GNU_VERNEED, 1, need),
            (".dynsym", SHT_DYNSYM, 1, syms),
        ]);
        let t = std::time::Instant::now();
        let info = read_elf_bytes(&lib).unwrap();
        assert_eq!(info.glibc_needed, None);
        assert_eq!(dynamic_symbols_bytes(&lib).unwrap(), Vec::<String>::new());
        let took = t.elapsed();
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn a_huge_section_table_is_refused_before_reading_it() {
        let mut lib = elf_with_rodata(&[b"x"]);
        lib[0x3a..0x3c].copy_from_slice(&0xffffu16.to_le_bytes());
        lib[0x3c..0x3e].copy_from_slice(&0xffffu16.to_le_bytes());
        assert_eq!(
            read_elf_bytes(&lib).unwrap_err(),
            "its section header table (65535 entries of 65535 bytes) is implausibly large"
        );
    }

    #[test]
    fn version_sections_of_real_libraries() {
        // This machine's C library defines its own glibc version, the one
        // that `getconf GNU_LIBC_VERSION` says.
        let out = std::process::Command::new("getconf")
            .arg("GNU_LIBC_VERSION")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let mut v = said.trim().trim_start_matches("glibc ").split('.');
        let want = (parse_u32(v.next().unwrap()), parse_u32(v.next().unwrap()));
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/libc.so.6",
            "/lib/aarch64-linux-gnu/libc.so.6",
        ]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .unwrap();
        assert_eq!(
            glibc_defined(libc).unwrap().1,
            Some((want.0.unwrap(), want.1.unwrap()))
        );
        // Version names as glibc writes them.
        assert_eq!(glibc_version("GLIBC_2.3.4"), Some((2, 3)));
        assert_eq!(glibc_version("GLIBC_2"), Some((2, 0)));
        assert_eq!(glibc_version("GLIBC_PRIVATE"), None);
    }

    #[test]
    fn garbage_files_give_errors() {
        let dir = std::env::temp_dir().join(format!("nccl-find-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x");
        std::fs::write(&p, b"hello, this is text and not a library").unwrap();
        assert_eq!(
            read_elf(&p).unwrap_err(),
            "it is not an ELF file (no \\x7fELF magic)"
        );
        std::fs::write(&p, b"\x7fELF\x02\x01\x01").unwrap();
        assert_eq!(
            read_elf(&p).unwrap_err(),
            "it is 7 bytes long, too short to be a library"
        );
        let mut hdr = b"\x7fELF\x02\x01\x01".to_vec();
        hdr.resize(64, 0);
        hdr[0x28] = 0xff; // section headers far past the end
        hdr[0x3a] = 64;
        hdr[0x3c] = 3;
        std::fs::write(&p, &hdr).unwrap();
        assert!(read_elf(&p)
            .unwrap_err()
            .contains("past the end of the 64-byte file: the file is truncated"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
