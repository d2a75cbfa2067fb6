//! The data of the smoke test: seeded inputs that differ per rank, chosen
//! so that every sum is exact in every datatype; poison that can never equal
//! the right answer; and an element-by-element check.

use std::ffi::c_int;

/// The datatypes the smoke test runs.
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
}

impl Dtype {
    /// Every datatype, in the order `--dtypes all` runs them.
    pub const ALL: [Dtype; 7] = [
        Dtype::F32,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::F64,
        Dtype::I32,
        Dtype::I64,
        Dtype::U8,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::U8 => 1,
        }
    }

    /// `ncclDataType_t`.
    pub fn nccl(self) -> c_int {
        match self {
            Dtype::U8 => 1,
            Dtype::I32 => 2,
            Dtype::I64 => 4,
            Dtype::F16 => 6,
            Dtype::F32 => 7,
            Dtype::F64 => 8,
            Dtype::Bf16 => 9,
        }
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
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Floats get small integers, so that any order of summing is exact:
    /// the largest integer each type holds exactly, shared among the ranks,
    /// rounded down to a power of two (so the GPU takes it with a mask).
    fn float_range(self, nranks: usize) -> u64 {
        let limit: u64 = match self {
            Dtype::F16 => 2048,
            Dtype::Bf16 => 256,
            Dtype::F32 => 1 << 24,
            _ => 1 << 53,
        };
        let r = (limit / nranks.max(1) as u64).clamp(2, 1 << 20);
        1 << (63 - r.leading_zeros())
    }

    /// The mask that takes a hashed value into this type's range of
    /// inputs: all ones for integers (they wrap, as NCCL's sum does).
    pub fn value_mask(self, nranks: usize) -> u64 {
        match self {
            Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::F64 => self.float_range(nranks) - 1,
            _ => u64::MAX,
        }
    }

    /// The position of this type in [`Dtype::ALL`] (the GPU kernels' code).
    pub fn code(self) -> u32 {
        Dtype::ALL.iter().position(|d| *d == self).unwrap_or(0) as u32
    }

    /// The value of element `i` on `rank`, as the sum's integer domain.
    fn raw(self, seed: u64, rank: usize, i: usize, nranks: usize) -> u64 {
        let v = mix(seed
            ^ (rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
        v & self.value_mask(nranks)
    }

    /// Encodes an integer-domain value into the element's bytes.
    fn encode(self, v: u64, out: &mut [u8]) {
        match self {
            Dtype::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
            Dtype::F64 => out.copy_from_slice(&(v as f64).to_le_bytes()),
            Dtype::Bf16 => {
                out.copy_from_slice(&(((v as f32).to_bits() >> 16) as u16).to_le_bytes())
            }
            Dtype::F16 => out.copy_from_slice(&f16_of_int(v as u32).to_le_bytes()),
            Dtype::I32 => out.copy_from_slice(&(v as u32).to_le_bytes()),
            Dtype::I64 => out.copy_from_slice(&v.to_le_bytes()),
            Dtype::U8 => out[0] = v as u8,
        }
    }

    /// The sum over ranks of element `i`, in the integer domain (wrapping
    /// for integer types, as NCCL's sum wraps).
    fn expected_raw(self, seed: u64, i: usize, nranks: usize) -> u64 {
        let mut s = 0u64;
        for r in 0..nranks {
            s = s.wrapping_add(self.raw(seed, r, i, nranks));
        }
        match self {
            Dtype::I32 => s & 0xffff_ffff,
            Dtype::U8 => s & 0xff,
            _ => s,
        }
    }
}

/// splitmix64's finaliser: a fast, well-mixed hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// IEEE half of a non-negative integer up to 2048 (all exact).
fn f16_of_int(v: u32) -> u16 {
    if v == 0 {
        return 0;
    }
    let e = 31 - v.leading_zeros();
    let mant = if e >= 10 {
        (v >> (e - 10)) & 0x3ff
    } else {
        (v << (10 - e)) & 0x3ff
    };
    (((e + 15) << 10) | mant) as u16
}

/// Runs `f` over `buf` in element-aligned chunks on several threads.
fn par_chunks(buf: &mut [u8], elem: usize, f: impl Fn(usize, &mut [u8]) + Sync) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(16);
    let n = buf.len() / elem;
    if n < 1 << 16 || threads == 1 {
        f(0, buf);
        return;
    }
    let per = n.div_ceil(threads) * elem;
    std::thread::scope(|s| {
        for (k, chunk) in buf.chunks_mut(per).enumerate() {
            let f = &f;
            s.spawn(move || f(k * per / elem, chunk));
        }
    });
}

/// Rank `rank`'s input: `count` elements.
pub fn input(t: Dtype, seed: u64, rank: usize, nranks: usize, count: usize) -> Vec<u8> {
    let e = t.size();
    let mut buf = vec![0u8; count * e];
    par_chunks(&mut buf, e, |first, chunk| {
        for (j, el) in chunk.chunks_exact_mut(e).enumerate() {
            t.encode(t.raw(seed, rank, first + j, nranks), el);
        }
    });
    buf
}

/// The right answer: the sum of every rank's input.
pub fn expected(t: Dtype, seed: u64, nranks: usize, count: usize) -> Vec<u8> {
    let e = t.size();
    let mut buf = vec![0u8; count * e];
    par_chunks(&mut buf, e, |first, chunk| {
        for (j, el) in chunk.chunks_exact_mut(e).enumerate() {
            t.encode(t.expected_raw(seed, first + j, nranks), el);
        }
    });
    buf
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

/// The sum of every rank's input, element by element, as a GPU makes it:
/// in the type itself (halves decoded, added as the exact integers they
/// are, encoded again). The tests' reference.
#[cfg(test)]
pub(crate) fn sum_on_host(t: Dtype, inputs: &[Vec<u8>]) -> Vec<u8> {
    let (e, nranks) = (t.size(), inputs.len());
    let count = inputs.first().map_or(0, |i| i.len() / e);
    let mut sum = vec![0u8; count * e];
    for i in 0..count {
        let el = |r: usize| &inputs[r][i * e..(i + 1) * e];
        let out = &mut sum[i * e..(i + 1) * e];
        match t {
            Dtype::F32 => {
                let s: f32 = (0..nranks)
                    .map(|r| f32::from_le_bytes(el(r).try_into().unwrap()))
                    .sum();
                out.copy_from_slice(&s.to_le_bytes());
            }
            Dtype::F64 => {
                let s: f64 = (0..nranks)
                    .map(|r| f64::from_le_bytes(el(r).try_into().unwrap()))
                    .sum();
                out.copy_from_slice(&s.to_le_bytes());
            }
            Dtype::I32 => {
                let s = (0..nranks).fold(0i32, |a, r| {
                    a.wrapping_add(i32::from_le_bytes(el(r).try_into().unwrap()))
                });
                out.copy_from_slice(&s.to_le_bytes());
            }
            Dtype::I64 => {
                let s = (0..nranks).fold(0i64, |a, r| {
                    a.wrapping_add(i64::from_le_bytes(el(r).try_into().unwrap()))
                });
                out.copy_from_slice(&s.to_le_bytes());
            }
            Dtype::U8 => out[0] = (0..nranks).fold(0u8, |a, r| a.wrapping_add(el(r)[0])),
            // Halves: exact integers, so decode, add, re-encode.
            Dtype::F16 | Dtype::Bf16 => {
                let dec = |b: &[u8]| -> u32 {
                    let h = u16::from_le_bytes(b.try_into().unwrap());
                    let f = if t == Dtype::Bf16 {
                        f32::from_bits(u32::from(h) << 16)
                    } else {
                        let (e, m) = ((h >> 10) & 0x1f, h & 0x3ff);
                        if e == 0 {
                            0.0
                        } else {
                            (1.0 + f32::from(m) / 1024.0) * 2f32.powi(i32::from(e) - 15)
                        }
                    };
                    assert_eq!(f.fract(), 0.0);
                    f as u32
                };
                let s: u32 = (0..nranks).map(|r| dec(el(r))).sum();
                t.encode(u64::from(s), out);
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_exact_in_every_type() {
        for t in Dtype::ALL {
            for nranks in [1, 2, 3, 8] {
                let count = 1000;
                let want = expected(t, 42, nranks, count);
                // Sum the inputs the way a GPU would, in the type itself.
                let inputs: Vec<Vec<u8>> = (0..nranks)
                    .map(|r| input(t, 42, r, nranks, count))
                    .collect();
                let sum = sum_on_host(t, &inputs);
                assert_eq!(check(t, &sum, &want), Check::default(), "{t:?} x{nranks}");
                // Different ranks get different data.
                if nranks > 1 {
                    assert_ne!(inputs[0], inputs[1], "{t:?}");
                }
            }
        }
    }

    #[test]
    fn a_planted_wrong_element_is_caught_and_counted() {
        let want = expected(Dtype::F32, 7, 2, 4096);
        let mut got = want.clone();
        got[100 * 4] ^= 1;
        got[3000 * 4 + 3] ^= 0x80;
        let c = check(Dtype::F32, &got, &want);
        assert_eq!(c.wrong, 2);
        assert_eq!(c.first.as_ref().unwrap().0, 100);
        // Poison never passes, in any type.
        for t in Dtype::ALL {
            let want = expected(t, 1, 4, 5000);
            assert_eq!(check(t, &poison(&want), &want).wrong, 5000, "{t:?}");
        }
    }

    #[test]
    fn float_ranges_are_powers_of_two_and_sums_fit() {
        assert_eq!(Dtype::F16.value_mask(2), 1023);
        assert_eq!(Dtype::F16.value_mask(3), 511);
        assert_eq!(Dtype::Bf16.value_mask(4), 63);
        assert_eq!(Dtype::F32.value_mask(1), (1 << 20) - 1);
        assert_eq!(Dtype::F64.value_mask(8), (1 << 20) - 1);
        assert_eq!(Dtype::I32.value_mask(8), u64::MAX);
        for t in [Dtype::F16, Dtype::Bf16, Dtype::F32] {
            for n in 1..=64usize {
                let m = t.value_mask(n);
                assert!((m + 1).is_power_of_two());
                let limit: u64 = match t {
                    Dtype::F16 => 2048,
                    Dtype::Bf16 => 256,
                    _ => 1 << 24,
                };
                assert!(m * n as u64 <= limit || m == 1, "{t:?} x{n}");
            }
        }
        assert_eq!(Dtype::U8.code(), 6);
        assert_eq!(Dtype::F32.code(), 0);
    }

    #[test]
    fn half_encoding() {
        assert_eq!(f16_of_int(1), 0x3c00);
        assert_eq!(f16_of_int(2048), 0x6800);
        assert_eq!(f16_of_int(1000), 0x63d0);
    }
}
