//! The data of the smoke test: seeded inputs that differ per rank, chosen
//! for each datatype and reduction so that every result is exact; poison
//! that can never equal the right answer; and an element-by-element check.
//!
//! Every value lives in an integer domain (`u64`) until it is written in
//! its type. Element `i` of rank `r` is `mix(seed ^ r·K1 ^ i·K2) & mask`
//! (or `1 << that`, for a product of floats), and every collective's answer
//! is a [`Source`]: one rank's element, or a reduction over every rank's.
//! The GPU kernels ([`crate::ptx`]) compute exactly the same.

use std::ffi::c_int;

/// The datatypes the smoke test runs: every `ncclDataType_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dtype {
    /// `float` (the default).
    F32,
    /// `half`.
    F16,
    /// `bfloat16` (NCCL 2.10 and newer).
    Bf16,
    /// `double`.
    F64,
    /// `int32_t`.
    I32,
    /// `int64_t`.
    I64,
    /// `uint8_t`.
    U8,
    /// `int8_t`.
    I8,
    /// `uint32_t`.
    U32,
    /// `uint64_t`.
    U64,
    /// 8-bit float, 4 exponent and 3 mantissa bits (NCCL 2.24 and newer,
    /// reductions on compute capability 9.0 and newer).
    F8e4m3,
    /// 8-bit float, 5 exponent and 2 mantissa bits (as `F8e4m3`).
    F8e5m2,
}

/// How the kernels write a value: as an integer, or as one of the floats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Int = 0,
    F32 = 1,
    F16 = 2,
    Bf16 = 3,
    F64 = 4,
    E4m3 = 5,
    E5m2 = 6,
}

impl Dtype {
    /// Every datatype, in the order `--dtypes all` runs them.
    pub const ALL: [Dtype; 12] = [
        Dtype::F32,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::F64,
        Dtype::I32,
        Dtype::I64,
        Dtype::U8,
        Dtype::I8,
        Dtype::U32,
        Dtype::U64,
        Dtype::F8e4m3,
        Dtype::F8e5m2,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 | Dtype::I8 | Dtype::F8e4m3 | Dtype::F8e5m2 => 1,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
        }
    }

    /// `ncclDataType_t`'s value and name.
    pub fn nccl(self) -> (c_int, &'static str) {
        match self {
            Dtype::I8 => (0, "ncclInt8"),
            Dtype::U8 => (1, "ncclUint8"),
            Dtype::I32 => (2, "ncclInt32"),
            Dtype::U32 => (3, "ncclUint32"),
            Dtype::I64 => (4, "ncclInt64"),
            Dtype::U64 => (5, "ncclUint64"),
            Dtype::F16 => (6, "ncclFloat16"),
            Dtype::F32 => (7, "ncclFloat32"),
            Dtype::F64 => (8, "ncclFloat64"),
            Dtype::Bf16 => (9, "ncclBfloat16"),
            Dtype::F8e4m3 => (10, "ncclFloat8e4m3"),
            Dtype::F8e5m2 => (11, "ncclFloat8e5m2"),
        }
    }

    /// Whether it is one of the 8-bit floats (e4m3, e5m2).
    pub(crate) fn is_f8(self) -> bool {
        matches!(self, Dtype::F8e4m3 | Dtype::F8e5m2)
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::F64 => "f64",
            Dtype::I32 => "i32",
            Dtype::I64 => "i64",
            Dtype::U8 => "u8",
            Dtype::I8 => "i8",
            Dtype::U32 => "u32",
            Dtype::U64 => "u64",
            Dtype::F8e4m3 => "f8e4m3",
            Dtype::F8e5m2 => "f8e5m2",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == s)
    }

    /// How the kernels write it.
    pub(crate) fn kind(self) -> Kind {
        match self {
            Dtype::F32 => Kind::F32,
            Dtype::F16 => Kind::F16,
            Dtype::Bf16 => Kind::Bf16,
            Dtype::F64 => Kind::F64,
            Dtype::F8e4m3 => Kind::E4m3,
            Dtype::F8e5m2 => Kind::E5m2,
            _ => Kind::Int,
        }
    }

    /// Whether it is a signed integer.
    pub(crate) fn signed(self) -> bool {
        matches!(self, Dtype::I8 | Dtype::I32 | Dtype::I64)
    }

    /// For a float: bits of precision (every integer below `2^p` is
    /// exact), the largest power of two it holds, and the smallest normal
    /// one, as exponents.
    fn float_bits(self) -> Option<(u32, u32, i32)> {
        match self {
            Dtype::F16 => Some((11, 15, -14)),
            Dtype::Bf16 => Some((8, 127, -126)),
            Dtype::F32 => Some((24, 127, -126)),
            Dtype::F64 => Some((53, 1023, -1022)),
            Dtype::F8e4m3 => Some((4, 8, -6)),
            Dtype::F8e5m2 => Some((3, 15, -14)),
            _ => None,
        }
    }

    /// The bits of one element: all ones of its size.
    pub(crate) fn element_mask(self) -> u64 {
        match self.size() {
            8 => u64::MAX,
            s => (1 << (8 * s)) - 1,
        }
    }

    /// What makes an unsigned comparison of two values a comparison in the
    /// type: the sign bit for signed integers.
    pub(crate) fn sign_flip(self) -> u64 {
        if self.signed() {
            1 << (8 * self.size() - 1)
        } else {
            0
        }
    }
}

/// The reductions: every built-in `ncclRedOp_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Redop {
    /// `ncclSum` (the default).
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
    /// `ncclAvg` (NCCL 2.10 and newer).
    Avg,
}

impl Redop {
    /// Every reduction, in the order `--redops all` runs them.
    pub const ALL: [Redop; 5] = [Redop::Sum, Redop::Prod, Redop::Max, Redop::Min, Redop::Avg];

    /// `ncclRedOp_t`'s value and name.
    pub fn nccl(self) -> (c_int, &'static str) {
        match self {
            Redop::Sum => (0, "ncclSum"),
            Redop::Prod => (1, "ncclProd"),
            Redop::Max => (2, "ncclMax"),
            Redop::Min => (3, "ncclMin"),
            Redop::Avg => (4, "ncclAvg"),
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Redop::Sum => "sum",
            Redop::Prod => "prod",
            Redop::Max => "max",
            Redop::Min => "min",
            Redop::Avg => "avg",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Redop> {
        Redop::ALL.into_iter().find(|d| d.name() == s)
    }
}

/// The hash constants of an element: of its rank and of its index.
pub(crate) const K_RANK: u64 = 0x9E37_79B9_7F4A_7C15;
pub(crate) const K_INDEX: u64 = 0xD1B5_4A32_D192_ED03;

/// How the inputs of one datatype are chosen for one reduction over
/// `nranks` ranks, so that the result and every partial result are exact:
///
/// - integers: any value (sums and products wrap, as NCCL's do);
/// - float sums and averages: small integers, whose sum over every rank
///   stays below `2^p` (the type's precision); past `2^p / 2` ranks, the
///   later ranks put in 0;
/// - float products: 1 or 2, so the product is a power of two the type
///   holds; past that many ranks, the later ranks put in 1;
/// - float minimums and maximums: any integer below `2^p`;
/// - float averages: only over a power of two of ranks, `1/n` a normal
///   number of the type (otherwise no input makes NCCL's `x·(1/n)` exact).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exact {
    pub(crate) t: Dtype,
    pub(crate) op: Redop,
    pub(crate) nranks: usize,
    /// The hashed value's mask.
    pub(crate) mask: u64,
    /// The ranks that put in hashed values; the later ones put in the
    /// identity (0, or 1 in a product).
    pub(crate) nnz: usize,
    /// Values are `1 << x` (a product of floats).
    pub(crate) pow: bool,
    /// A float average is the sum times `2^-shift`.
    pub(crate) shift: u32,
}

impl Exact {
    /// The inputs of `t` for `op` over `nranks` ranks, or why none make
    /// every result exact.
    pub(crate) fn of(t: Dtype, op: Redop, nranks: usize) -> Result<Exact, String> {
        let n = nranks.max(1);
        let mut r = Exact {
            t,
            op,
            nranks: n,
            mask: u64::MAX,
            nnz: n,
            pow: false,
            shift: 0,
        };
        let Some((bits, max_exp, min_exp)) = t.float_bits() else {
            return Ok(r);
        };
        match op {
            Redop::Prod => {
                r.pow = true;
                r.mask = 1;
                r.nnz = n.min(max_exp.min(62) as usize);
            }
            Redop::Max | Redop::Min => r.mask = (1 << bits) - 1,
            Redop::Sum | Redop::Avg => {
                let limit = 1u64 << bits;
                r.nnz = n.min((limit / 2) as usize);
                let per = (limit / r.nnz as u64).min(1 << 20);
                r.mask = (1 << (63 - per.leading_zeros())) - 1;
            }
        }
        if op == Redop::Avg {
            let why = if !n.is_power_of_two() {
                "1/n is not a power of two"
            } else if -(n.trailing_zeros() as i32) < min_exp {
                "1/n is below its smallest normal number"
            } else {
                r.shift = n.trailing_zeros();
                return Ok(r);
            };
            return Err(format!(
                "avg in {} over {n} ranks has no exact answer: {why}",
                t.name()
            ));
        }
        Ok(r)
    }

    /// The inputs of a collective that moves data and reduces nothing:
    /// every rank's, over the widest exact range (a maximum's).
    pub(crate) fn copy(t: Dtype, nranks: usize) -> Exact {
        Exact::of(t, Redop::Max, nranks).unwrap_or_else(|_| unreachable!("max is exact"))
    }

    /// Element `i` of `rank`'s input, in the integer domain.
    pub(crate) fn value(&self, seed: u64, rank: usize, i: u64) -> u64 {
        let x = if rank < self.nnz {
            mix(seed ^ (rank as u64).wrapping_mul(K_RANK) ^ i.wrapping_mul(K_INDEX)) & self.mask
        } else {
            0
        };
        if self.pow {
            1 << x
        } else {
            x
        }
    }

    /// Two values reduced, as NCCL reduces them in the type.
    fn combine(&self, a: u64, b: u64) -> u64 {
        let key = |v: u64| (v & self.key_mask()) ^ self.t.sign_flip();
        match self.op {
            Redop::Sum | Redop::Avg => a.wrapping_add(b),
            Redop::Prod => a.wrapping_mul(b),
            Redop::Max if key(b) > key(a) => b,
            Redop::Min if key(b) < key(a) => b,
            Redop::Max | Redop::Min => a,
        }
    }

    /// The bits a comparison looks at: the element's, for an integer.
    pub(crate) fn key_mask(&self) -> u64 {
        match self.t.kind() {
            Kind::Int => self.t.element_mask(),
            _ => u64::MAX,
        }
    }

    /// An integer average: the wrapped sum divided by the ranks, toward
    /// zero (NCCL's `SumPostDiv`).
    fn finish(&self, acc: u64) -> u64 {
        if self.op != Redop::Avg || self.t.kind() != Kind::Int {
            return acc;
        }
        let (v, n) = (acc & self.t.element_mask(), self.nranks as u64);
        if self.t.signed() {
            let pad = 64 - 8 * self.t.size() as u32;
            ((((v << pad) as i64) >> pad) / n as i64) as u64
        } else {
            v / n
        }
    }

    /// The bits of element `j` of a result that comes from `src`.
    pub(crate) fn answer(&self, seed: u64, src: Source, j: u64) -> u64 {
        if src.reduce {
            let i = src.base + j;
            let acc = (1..self.nranks).fold(self.value(seed, 0, i), |a, r| {
                self.combine(a, self.value(seed, r, i))
            });
            encode(self.t, self.finish(acc), self.shift)
        } else {
            let (q, o) = (j / src.block, j % src.block);
            encode(
                self.t,
                self.value(seed, src.from as usize + q as usize, src.base + o),
                0,
            )
        }
    }
}

/// Where each element `j` of a rank's result comes from: reduced over
/// every rank's element `base + j`, or copied from one rank's. Copied in
/// blocks of `block`, block `q` comes from rank `from + q`, its element
/// `base + j % block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// Reduced over every rank.
    pub reduce: bool,
    /// Elements per block (`u64::MAX`: one block).
    pub block: u64,
    /// The rank of the first block.
    pub from: u64,
    /// The element of the source the result starts at.
    pub base: u64,
}

impl Source {
    /// Every rank's element `base + j`, reduced.
    pub fn reduced(base: u64) -> Source {
        Source {
            reduce: true,
            block: u64::MAX,
            from: 0,
            base,
        }
    }

    /// Rank `from`'s element `base + j`.
    pub fn copied(from: usize, base: u64) -> Source {
        Source {
            reduce: false,
            block: u64::MAX,
            from: from as u64,
            base,
        }
    }

    /// Block `q` of `block` elements from rank `q`, its elements from
    /// `base` on.
    pub fn blocks(block: usize, base: u64) -> Source {
        Source {
            reduce: false,
            block: block.max(1) as u64,
            from: 0,
            base,
        }
    }
}

/// Writes an integer-domain value in `t`; a float divided by `2^shift`
/// (exact, by [`Exact`]).
pub(crate) fn encode(t: Dtype, v: u64, shift: u32) -> u64 {
    let f = || v as f32 / (1u64 << shift) as f32;
    match t.kind() {
        Kind::Int => v & t.element_mask(),
        Kind::F32 => u64::from(f().to_bits()),
        Kind::F64 => (v as f64 / (1u64 << shift) as f64).to_bits(),
        Kind::Bf16 => u64::from(f().to_bits() >> 16),
        Kind::F16 => u64::from(half_of(f())),
        Kind::E5m2 => u64::from(half_of(f()) >> 8),
        Kind::E4m3 => u64::from(e4m3_of_half(half_of(f()))),
    }
}

/// IEEE half of a float the half holds exactly (0, or normal).
fn half_of(f: f32) -> u16 {
    if f == 0.0 {
        return 0;
    }
    let b = f.to_bits();
    let e = ((b >> 23) & 0xff) as i32 - 127 + 15;
    ((e.clamp(0, 31) as u32) << 10 | ((b >> 13) & 0x3ff)) as u16
}

/// e4m3 of a half that it holds exactly (0, or normal): exponent bias 7
/// against the half's 15, three mantissa bits of its ten.
fn e4m3_of_half(h: u16) -> u8 {
    if h == 0 {
        return 0;
    }
    let e = ((h >> 10) & 0x1f).saturating_sub(8);
    ((e << 3) | ((h >> 7) & 7)) as u8
}

/// splitmix64's finaliser: a fast, well-mixed hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with `bits(j)` for each element, on several threads where
/// it is large.
fn fill(t: Dtype, count: usize, bits: impl Fn(u64) -> u64 + Sync) -> Vec<u8> {
    let e = t.size();
    let mut buf = vec![0u8; count * e];
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(16);
    // Elements from `first` on, into `chunk`.
    let part = |first: usize, chunk: &mut [u8]| {
        for (j, el) in chunk.chunks_exact_mut(e).enumerate() {
            let b = bits((first + j) as u64).to_le_bytes();
            el.copy_from_slice(&b[..e]);
        }
    };
    if count < 1 << 16 || threads == 1 {
        part(0, &mut buf);
        return buf;
    }
    let per = count.div_ceil(threads);
    std::thread::scope(|s| {
        for (k, chunk) in buf.chunks_mut(per * e).enumerate() {
            let part = &part;
            s.spawn(move || part(k * per, chunk));
        }
    });
    buf
}

/// Rank `rank`'s input: `count` elements.
pub(crate) fn input(rule: &Exact, seed: u64, rank: usize, count: usize) -> Vec<u8> {
    fill(rule.t, count, |i| {
        encode(rule.t, rule.value(seed, rank, i), 0)
    })
}

/// The right answer: `count` elements of a result that comes from `src`.
pub(crate) fn expected(rule: &Exact, seed: u64, src: Source, count: usize) -> Vec<u8> {
    fill(rule.t, count, |j| rule.answer(seed, src, j))
}

/// Poison for an output buffer: every byte the complement of the answer's,
/// so an element NCCL never wrote can never pass.
pub fn poison(expected: &[u8]) -> Vec<u8> {
    expected.iter().map(|b| !b).collect()
}

/// The outcome of a check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Check {
    /// How many elements are wrong.
    pub wrong: usize,
    /// The first wrong element: index, bytes found, bytes expected.
    pub first: Option<(usize, Vec<u8>, Vec<u8>)>,
}

/// Compares every element of `got` with `want`.
pub fn check(t: Dtype, got: &[u8], want: &[u8]) -> Check {
    let e = t.size();
    let mut c = Check::default();
    if got.len() != want.len() {
        c.wrong = want.len() / e;
        return c;
    }
    for (i, (g, w)) in got.chunks_exact(e).zip(want.chunks_exact(e)).enumerate() {
        if g != w {
            c.wrong += 1;
            if c.first.is_none() {
                c.first = Some((i, g.to_vec(), w.to_vec()));
            }
        }
    }
    c
}

/// The tests' reference: every rank's elements reduced in exact
/// arithmetic with the type's own rules (integers wrap; an integer average
/// divides the wrapped sum toward zero; a float average adds `x·(1/n)`, as
/// NCCL does), and the result written in the type only where the type
/// holds it exactly.
#[cfg(test)]
pub(crate) mod reference {
    use super::{Dtype, Kind, Redop};

    /// The bits of element `i` of `buf`.
    pub(crate) fn bits_at(t: Dtype, buf: &[u8], i: usize) -> u64 {
        let mut b = [0u8; 8];
        b[..t.size()].copy_from_slice(&buf[i * t.size()..(i + 1) * t.size()]);
        u64::from_le_bytes(b)
    }

    /// A small float's (mantissa bits, exponent bias).
    fn small(t: Dtype) -> (u32, i32) {
        match t.kind() {
            Kind::F16 => (10, 15),
            Kind::E4m3 => (3, 7),
            _ => (2, 15),
        }
    }

    /// The value of a float's bits, from the formats' definitions.
    pub(crate) fn float_of(t: Dtype, b: u64) -> f64 {
        match t.kind() {
            Kind::F32 => f64::from(f32::from_bits(b as u32)),
            Kind::F64 => f64::from_bits(b),
            Kind::Bf16 => f64::from(f32::from_bits((b as u32) << 16)),
            _ => {
                let (m, bias) = small(t);
                let bits = 8 * t.size() as u32;
                let (e, mant) = ((b >> m) & ((1 << (bits - 1 - m)) - 1), b & ((1 << m) - 1));
                let sign = if b >> (bits - 1) == 1 { -1.0 } else { 1.0 };
                sign * if e == 0 {
                    mant as f64 * 2f64.powi(1 - bias - m as i32)
                } else {
                    ((1 << m) + mant) as f64 * 2f64.powi(e as i32 - bias - m as i32)
                }
            }
        }
    }

    /// The bits of `x` in `t`, if `t` holds it exactly (non-negative).
    pub(crate) fn bits_of(t: Dtype, x: f64) -> Option<u64> {
        match t.kind() {
            Kind::F32 => ((x as f32) as f64 == x).then(|| u64::from((x as f32).to_bits())),
            Kind::F64 => Some(x.to_bits()),
            Kind::Bf16 => {
                let f = (x as f32).to_bits();
                ((x as f32) as f64 == x && f & 0xffff == 0).then(|| u64::from(f >> 16))
            }
            _ if x == 0.0 => Some(0),
            _ => {
                let (m, bias) = small(t);
                let mut e = 1 - bias;
                while x >= 2f64.powi(e + 1) {
                    e += 1;
                }
                let normal = x >= 2f64.powi(1 - bias);
                let mant = if normal {
                    (x / 2f64.powi(e) - 1.0) * f64::from(1u32 << m)
                } else {
                    x / 2f64.powi(1 - bias - m as i32)
                };
                let field = if normal { (e + bias) as u64 } else { 0 };
                let b = (field << m) | mant as u64;
                (mant.fract() == 0.0 && float_of(t, b) == x).then_some(b)
            }
        }
    }

    /// Every rank's input reduced by `op`, element by element.
    pub(crate) fn reduce(t: Dtype, op: Redop, inputs: &[Vec<u8>]) -> Vec<u8> {
        let n = inputs.len();
        let count = inputs[0].len() / t.size();
        let width = 8 * t.size() as u32;
        let modulo = |v: i128| (v as u128 & (u128::MAX >> (128 - width))) as u64;
        let mut out = Vec::new();
        for i in 0..count {
            let raw: Vec<u64> = inputs.iter().map(|x| bits_at(t, x, i)).collect();
            let bits = if t.kind() == Kind::Int {
                let ints: Vec<i128> = raw
                    .iter()
                    .map(|&b| {
                        if t.signed() && b >> (width - 1) == 1 {
                            b as i128 - (1i128 << width)
                        } else {
                            b as i128
                        }
                    })
                    .collect();
                let wrapped = |v: i128| {
                    let m = modulo(v) as i128;
                    if t.signed() && m >> (width - 1) == 1 {
                        m - (1i128 << width)
                    } else {
                        m
                    }
                };
                modulo(match op {
                    Redop::Sum => ints.iter().sum(),
                    Redop::Prod => ints.iter().fold(1i128, |a, b| a.wrapping_mul(*b)),
                    Redop::Max => *ints.iter().max().unwrap(),
                    Redop::Min => *ints.iter().min().unwrap(),
                    Redop::Avg => wrapped(ints.iter().sum()) / n as i128,
                })
            } else {
                let xs: Vec<f64> = raw.iter().map(|&b| float_of(t, b)).collect();
                let sum: f64 = xs.iter().sum();
                if matches!(op, Redop::Sum | Redop::Avg) {
                    let p = t.float_bits().unwrap().0;
                    assert!(
                        sum < 2f64.powi(p as i32),
                        "{t:?} {op:?}: {sum} is past 2^{p}"
                    );
                }
                let x = match op {
                    Redop::Sum => sum,
                    Redop::Prod => xs.iter().product(),
                    Redop::Max => xs.iter().copied().fold(f64::MIN, f64::max),
                    Redop::Min => xs.iter().copied().fold(f64::MAX, f64::min),
                    Redop::Avg => xs.iter().map(|x| x * (1.0 / n as f64)).sum(),
                };
                bits_of(t, x).unwrap_or_else(|| panic!("{t:?} {op:?} x{n}: {x} is not exact"))
            };
            out.extend_from_slice(&bits.to_le_bytes()[..t.size()]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reduction_is_exact_in_every_type() {
        for t in Dtype::ALL {
            for op in Redop::ALL {
                for n in [1, 2, 3, 8, 16, 64, 256] {
                    let rule = match Exact::of(t, op, n) {
                        Ok(r) => r,
                        Err(why) => {
                            let float = t.kind() != Kind::Int;
                            assert!(op == Redop::Avg && float, "{t:?} {op:?} x{n}: {why}");
                            assert!(!n.is_power_of_two() || n > 64, "{t:?} x{n}: {why}");
                            continue;
                        }
                    };
                    let count = 200;
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| input(&rule, 42, r, count)).collect();
                    let want = reference::reduce(t, op, &inputs);
                    let got = expected(&rule, 42, Source::reduced(0), count);
                    assert_eq!(check(t, &got, &want), Check::default(), "{t:?} {op:?} x{n}");
                    if n > 1 && rule.nnz > 1 {
                        assert_ne!(inputs[0], inputs[1], "{t:?} {op:?}: ranks differ");
                    }
                }
            }
        }
    }

    #[test]
    fn the_inputs_are_as_wide_as_exactness_allows() {
        let rule = |t, op, n| Exact::of(t, op, n).unwrap();
        assert_eq!(rule(Dtype::F16, Redop::Sum, 2).mask, 1023);
        assert_eq!(rule(Dtype::F16, Redop::Sum, 3).mask, 511);
        assert_eq!(rule(Dtype::Bf16, Redop::Sum, 4).mask, 63);
        assert_eq!(rule(Dtype::F32, Redop::Sum, 1).mask, (1 << 20) - 1);
        assert_eq!(rule(Dtype::F64, Redop::Sum, 8).mask, (1 << 20) - 1);
        assert_eq!(rule(Dtype::I32, Redop::Sum, 8).mask, u64::MAX);
        // Past 2^p / 2 ranks, the later ones put in 0 (1 in a product).
        let e5 = rule(Dtype::F8e5m2, Redop::Sum, 16);
        assert_eq!((e5.mask, e5.nnz), (1, 4));
        assert_eq!(e5.value(7, 4, 3), 0);
        let p = rule(Dtype::F8e4m3, Redop::Prod, 16);
        assert_eq!((p.mask, p.nnz, p.pow), (1, 8, true));
        assert_eq!(p.value(7, 12, 3), 1);
        assert_eq!(rule(Dtype::F32, Redop::Max, 3).mask, (1 << 24) - 1);
        assert_eq!(rule(Dtype::F16, Redop::Avg, 8).shift, 3);
        assert_eq!(
            Exact::of(Dtype::F32, Redop::Avg, 3),
            Err("avg in f32 over 3 ranks has no exact answer: 1/n is not a power of two".into())
        );
        assert_eq!(
            Exact::of(Dtype::F8e4m3, Redop::Avg, 128),
            Err("avg in f8e4m3 over 128 ranks has no exact answer: 1/n is below its smallest normal number".into())
        );
        assert!(Exact::of(Dtype::I8, Redop::Avg, 3).is_ok());
        assert_eq!(Exact::copy(Dtype::F16, 5).mask, 2047);
    }

    #[test]
    fn integer_averages_divide_toward_zero_and_comparisons_are_signed() {
        let r = Exact::of(Dtype::I8, Redop::Avg, 3).unwrap();
        // -7 (0xf9) over 3 ranks: -2, not 0x52 (249/3) or -3.
        assert_eq!(r.finish(0xf9), -2i64 as u64);
        assert_eq!(encode(Dtype::I8, r.finish(0xf9), 0), 0xfe);
        let u = Exact::of(Dtype::U8, Redop::Avg, 3).unwrap();
        assert_eq!(u.finish(0xf9), 83);
        let m = Exact::of(Dtype::I32, Redop::Max, 2).unwrap();
        assert_eq!(m.combine(0xffff_ffff, 1), 1, "-1 < 1");
        let m = Exact::of(Dtype::U32, Redop::Max, 2).unwrap();
        assert_eq!(m.combine(0xffff_ffff, 1), 0xffff_ffff);
    }

    #[test]
    fn a_planted_wrong_element_is_caught_and_counted() {
        let rule = Exact::of(Dtype::F32, Redop::Sum, 2).unwrap();
        let want = expected(&rule, 7, Source::reduced(0), 4096);
        let mut got = want.clone();
        got[100 * 4] ^= 1;
        got[3000 * 4 + 3] ^= 0x80;
        let c = check(Dtype::F32, &got, &want);
        assert_eq!(c.wrong, 2);
        assert_eq!(c.first.as_ref().unwrap().0, 100);
        // Poison never passes, in any type.
        for t in Dtype::ALL {
            let want = expected(&Exact::copy(t, 4), 1, Source::blocks(7, 0), 5000);
            assert_eq!(check(t, &poison(&want), &want).wrong, 5000, "{t:?}");
        }
    }

    #[test]
    fn small_floats_are_written_exactly() {
        assert_eq!(encode(Dtype::F16, 1, 0), 0x3c00);
        assert_eq!(encode(Dtype::F16, 2048, 0), 0x6800);
        assert_eq!(encode(Dtype::F16, 1000, 0), 0x63d0);
        assert_eq!(encode(Dtype::F8e4m3, 16, 0), 0x58);
        assert_eq!(encode(Dtype::F8e4m3, 256, 0), 0x78);
        assert_eq!(
            encode(Dtype::F8e4m3, 1, 6),
            0x08,
            "2^-6, the smallest normal"
        );
        assert_eq!(encode(Dtype::F8e5m2, 8, 0), 0x48);
        assert_eq!(encode(Dtype::F8e5m2, 3, 2), 0x3a, "0.75");
        assert_eq!(encode(Dtype::Bf16, 3, 1), 0x3fc0, "1.5");
        for t in [Dtype::F16, Dtype::F8e4m3, Dtype::F8e5m2, Dtype::Bf16] {
            for v in 0..16u64 {
                for s in 0..3 {
                    let x = v as f64 / f64::from(1 << s);
                    if let Some(b) = reference::bits_of(t, x) {
                        assert_eq!(encode(t, v, s), b, "{t:?} {x}");
                    }
                }
            }
        }
    }
}
