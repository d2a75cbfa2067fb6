//! The smoke test's two GPU kernels, as PTX text written here and loaded
//! with `cuModuleLoadData` (the driver compiles it: no toolkit, no NVRTC).
//!
//! - `nf_fill` writes rank `rank`'s input (`mode` 0) or the poison
//!   (`mode` 1: every bit of the right answer flipped, so it can never
//!   equal it);
//! - `nf_check` compares every element with the right answer and adds the
//!   number of wrong ones to `out[0]`, and the lowest wrong index into
//!   `out[1]` (atomic min).
//!
//! Both compute exactly what [`crate::data`] computes on the host, for
//! every datatype, reduction ([`Exact`]) and collective ([`Source`]). The
//! run checks the two against each other on every GPU before it starts.

use crate::data::{Exact, Source, K_INDEX, K_RANK};

/// The kernels' parameters, every one a `u64`, in order.
const PARAMS: [&str; 21] = [
    "ptr", "count", "first", "seed", "rank", "mode", "out", "nranks", "nnz", "mask", "pow", "kind",
    "esize", "redop", "kmask", "flip", "scale", "reduce", "block", "from", "base",
];

/// One launch: `count` elements from `ptr` on, element `first` of the
/// result on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launch {
    pub(crate) ptr: u64,
    pub(crate) count: u64,
    pub(crate) first: u64,
    pub(crate) seed: u64,
    /// `nf_fill`: whose input.
    pub(crate) rank: u64,
    /// `nf_fill`: 0 the input, 1 the poison.
    pub(crate) mode: u64,
    /// `nf_check`: its two counters.
    pub(crate) out: u64,
    pub(crate) rule: Exact,
    pub(crate) src: Source,
}

impl Launch {
    /// The values of [`PARAMS`], in order.
    pub(crate) fn values(&self) -> [u64; 21] {
        let (r, t) = (&self.rule, self.rule.t);
        [
            self.ptr,
            self.count,
            self.first,
            self.seed,
            self.rank,
            self.mode,
            self.out,
            r.nranks as u64,
            r.nnz as u64,
            r.mask,
            u64::from(r.pow),
            t.kind() as u64,
            t.size() as u64,
            r.op.nccl().0 as u64,
            r.key_mask(),
            t.sign_flip(),
            (1.0 / (1u64 << r.shift) as f64).to_bits(),
            u64::from(self.src.reduce),
            self.src.block,
            self.src.from,
            self.src.base,
        ]
    }
}

/// A 64-bit PTX literal.
fn hex(k: u64) -> String {
    format!("0x{k:016X}U")
}

/// PTX that computes `dst` = element `idx` of rank `rank`'s input, in the
/// integer domain ([`Exact::value`]); `%t0`, `%t1`, `%w` are scratch.
fn value(dst: &str, rank: &str, idx: &str) -> String {
    let (kr, ki) = (hex(K_RANK), hex(K_INDEX));
    format!(
        "\tmul.lo.u64 %t0, {rank}, {kr};\n\
         \tmul.lo.u64 %t1, {idx}, {ki};\n\
         \txor.b64 {dst}, %t0, %t1;\n\
         \txor.b64 {dst}, {dst}, %seed;\n\
         \tadd.u64 {dst}, {dst}, 0x9E3779B97F4A7C15U;\n\
         \tshr.u64 %t0, {dst}, 30;\n\
         \txor.b64 {dst}, {dst}, %t0;\n\
         \tmul.lo.u64 {dst}, {dst}, 0xBF58476D1CE4E5B9U;\n\
         \tshr.u64 %t0, {dst}, 27;\n\
         \txor.b64 {dst}, {dst}, %t0;\n\
         \tmul.lo.u64 {dst}, {dst}, 0x94D049BB133111EBU;\n\
         \tshr.u64 %t0, {dst}, 31;\n\
         \txor.b64 {dst}, {dst}, %t0;\n\
         \tand.b64 {dst}, {dst}, %mask;\n\
         \tsetp.ge.u64 %p, {rank}, %nnz;\n\t@%p mov.u64 {dst}, 0;\n\
         \tcvt.u32.u64 %w, {dst};\n\tmov.u64 %t0, 1;\n\tshl.b64 %t0, %t0, %w;\n\
         \tsetp.ne.u64 %p, %pow, 0;\n\t@%p mov.u64 {dst}, %t0;\n"
    )
}

/// PTX that reduces `%x` into `%v` by `%redop` ([`Exact`]'s `combine`):
/// minimum and maximum compare keys, the sign bit flipped for signed
/// integers.
const COMBINE: &str = "\tsetp.eq.u64 %p, %redop, 1;\n\t@%p bra C_PROD;\n\
\tsetp.eq.u64 %p, %redop, 2;\n\t@%p bra C_MAX;\n\
\tsetp.eq.u64 %p, %redop, 3;\n\t@%p bra C_MIN;\n\
\tadd.u64 %v, %v, %x;\n\tbra.uni C_DONE;\n\
C_PROD:\n\tmul.lo.u64 %v, %v, %x;\n\tbra.uni C_DONE;\n\
C_MAX:\n\tand.b64 %t0, %v, %kmask;\n\txor.b64 %t0, %t0, %flip;\n\tand.b64 %t1, %x, %kmask;\n\txor.b64 %t1, %t1, %flip;\n\
\tsetp.gt.u64 %p, %t1, %t0;\n\t@%p mov.u64 %v, %x;\n\tbra.uni C_DONE;\n\
C_MIN:\n\tand.b64 %t0, %v, %kmask;\n\txor.b64 %t0, %t0, %flip;\n\tand.b64 %t1, %x, %kmask;\n\txor.b64 %t1, %t1, %flip;\n\
\tsetp.lt.u64 %p, %t1, %t0;\n\t@%p mov.u64 %v, %x;\n\
C_DONE:\n";

/// PTX that ends an integer average: the wrapped sum divided by the ranks,
/// toward zero (signed) ([`Exact`]'s `finish`).
const FINISH: &str = "\tsetp.ne.u64 %p, %redop, 4;\n\t@%p bra F_DONE;\n\
\tsetp.ne.u64 %p, %kind, 0;\n\t@%p bra F_DONE;\n\
\tand.b64 %v, %v, %smask;\n\
\tsetp.eq.u64 %p, %flip, 0;\n\t@%p bra F_UNSIGNED;\n\
\tcvt.u32.u64 %w, %esize;\n\tshl.b32 %w, %w, 3;\n\tmov.u32 %w2, 64;\n\tsub.u32 %w, %w2, %w;\n\
\tshl.b64 %v, %v, %w;\n\tshr.s64 %v, %v, %w;\n\tdiv.s64 %v, %v, %nranks;\n\tbra.uni F_DONE;\n\
F_UNSIGNED:\n\tdiv.u64 %v, %v, %nranks;\n\
F_DONE:\n";

/// PTX that puts element `%j`'s answer in `%v` and its scale in `%sc`
/// ([`Exact::answer`]).
fn answer() -> String {
    format!(
        "\tsetp.ne.u64 %p, %reduce, 0;\n\t@%p bra A_REDUCE;\n\
         \tdiv.u64 %q, %j, %block;\n\trem.u64 %idx, %j, %block;\n\tadd.u64 %idx, %idx, %base;\n\
         \tadd.u64 %r, %from, %q;\n{}\
         \tmov.f64 %sc, 0d3FF0000000000000;\n\tbra.uni A_DONE;\n\
         A_REDUCE:\n\tadd.u64 %idx, %base, %j;\n\tmov.u64 %r, 0;\n{}\tmov.u64 %r, 1;\n\
         A_LOOP:\n\tsetp.ge.u64 %p, %r, %nranks;\n\t@%p bra A_POST;\n{}{COMBINE}\
         \tadd.u64 %r, %r, 1;\n\tbra.uni A_LOOP;\n\
         A_POST:\n{FINISH}\tmov.b64 %sc, %scale;\n\
         A_DONE:\n",
        value("%v", "%r", "%idx"),
        value("%v", "%r", "%idx"),
        value("%x", "%r", "%idx")
    )
}

/// PTX that writes `%v` times `%sc` in the type (`%kind`) as `%bits`,
/// masked to the element's size ([`crate::data`]'s `encode`).
const ENCODE: &str = "\tsetp.eq.u64 %p, %kind, 0;\n\t@%p bra E_INT;\n\
\tcvt.rn.f64.u64 %d, %v;\n\tmul.rn.f64 %d, %d, %sc;\n\
\tsetp.eq.u64 %p, %kind, 4;\n\t@%p bra E_F64;\n\
\tcvt.rn.f32.f64 %f, %d;\n\
\tsetp.eq.u64 %p, %kind, 1;\n\t@%p bra E_F32;\n\
\tsetp.eq.u64 %p, %kind, 3;\n\t@%p bra E_BF16;\n\
\tcvt.rn.f16.f32 %h, %f;\n\tcvt.u64.u16 %bits, %h;\n\
\tsetp.eq.u64 %p, %kind, 2;\n\t@%p bra E_DONE;\n\
\tsetp.eq.u64 %p, %kind, 6;\n\t@%p bra E_E5M2;\n\
\tsetp.eq.u64 %p, %bits, 0;\n\t@%p bra E_DONE;\n\
\tshr.u64 %t0, %bits, 10;\n\tand.b64 %t0, %t0, 31;\n\tsub.u64 %t0, %t0, 8;\n\tshl.b64 %t0, %t0, 3;\n\
\tshr.u64 %t1, %bits, 7;\n\tand.b64 %t1, %t1, 7;\n\tor.b64 %bits, %t0, %t1;\n\tbra.uni E_DONE;\n\
E_E5M2:\n\tshr.u64 %bits, %bits, 8;\n\tbra.uni E_DONE;\n\
E_BF16:\n\tmov.b32 %w, %f;\n\tshr.u32 %w, %w, 16;\n\tcvt.u64.u32 %bits, %w;\n\tbra.uni E_DONE;\n\
E_F32:\n\tmov.b32 %w, %f;\n\tcvt.u64.u32 %bits, %w;\n\tbra.uni E_DONE;\n\
E_F64:\n\tmov.b64 %bits, %d;\n\tbra.uni E_DONE;\n\
E_INT:\n\tmov.b64 %bits, %v;\n\
E_DONE:\n\tand.b64 %bits, %bits, %smask;\n";

/// The registers of both kernels.
fn registers() -> String {
    format!(
        "\t.reg .pred %p;\n\t.reg .b16 %h;\n\t.reg .b32 %w, %w2;\n\t.reg .f32 %f;\n\t.reg .f64 %d, %sc;\n\
         \t.reg .b64 {}, %i, %stride, %j, %smask, %addr, %v, %x, %r, %q, %idx, %bits, %got, %t0, %t1, %nwrong, %lowest;\n",
        PARAMS.map(|p| format!("%{p}")).join(", ")
    )
}

/// A kernel's signature, its registers, its parameters loaded, and the
/// grid-stride prologue: `%i`, `%stride`, `%smask`.
fn head(name: &str) -> String {
    let params: Vec<String> = PARAMS
        .iter()
        .map(|p| format!(".param .u64 a_{p}"))
        .collect();
    let loads: String = PARAMS
        .iter()
        .map(|p| format!("\tld.param.u64 %{p}, [a_{p}];\n"))
        .collect();
    format!(
        ".visible .entry {name}(\n\t{}\n)\n{{\n{}{loads}\
         \tmov.u32 %w, %ctaid.x;\n\tcvt.u64.u32 %i, %w;\n\
         \tmov.u32 %w, %ntid.x;\n\tcvt.u64.u32 %t0, %w;\n\tmul.lo.u64 %i, %i, %t0;\n\
         \tmov.u32 %w, %tid.x;\n\tcvt.u64.u32 %t1, %w;\n\tadd.u64 %i, %i, %t1;\n\
         \tmov.u32 %w, %nctaid.x;\n\tcvt.u64.u32 %stride, %w;\n\tmul.lo.u64 %stride, %stride, %t0;\n\
         \tmov.u64 %smask, -1;\n\tsetp.eq.u64 %p, %esize, 8;\n\t@%p bra MASKED;\n\
         \tshl.b64 %t0, %esize, 3;\n\tcvt.u32.u64 %w, %t0;\n\tmov.u64 %smask, 1;\n\tshl.b64 %smask, %smask, %w;\n\tsub.u64 %smask, %smask, 1;\n\
         MASKED:\n\tmov.u64 %nwrong, 0;\n\tmov.u64 %lowest, -1;\n\
         LOOP:\n\tsetp.ge.u64 %p, %i, %count;\n\t@%p bra END;\n\tadd.u64 %j, %first, %i;\n\
         \tmad.lo.u64 %addr, %i, %esize, %ptr;\n",
        params.join(",\n\t"),
        registers()
    )
}

/// The whole module.
pub fn module() -> String {
    let mut s = String::from(
        "// nccl-find smoke: fill and check kernels\n.version 7.0\n.target sm_70\n.address_size 64\n\n",
    );
    // The fill kernel: the input, or the poison.
    s.push_str(&head("nf_fill"));
    s.push_str("\tsetp.ne.u64 %p, %mode, 0;\n\t@%p bra POISON;\n");
    s.push_str(&value("%v", "%rank", "%j"));
    s.push_str("\tmov.f64 %sc, 0d3FF0000000000000;\n\tbra.uni ENCODE;\nPOISON:\n");
    s.push_str(&answer());
    s.push_str("ENCODE:\n");
    s.push_str(ENCODE);
    s.push_str("\tsetp.eq.u64 %p, %mode, 0;\n\t@%p bra STORE;\n\tnot.b64 %bits, %bits;\n\tand.b64 %bits, %bits, %smask;\nSTORE:\n");
    s.push_str(
        "\tsetp.eq.u64 %p, %esize, 1;\n\t@%p bra S1;\n\
         \tsetp.eq.u64 %p, %esize, 2;\n\t@%p bra S2;\n\
         \tsetp.eq.u64 %p, %esize, 4;\n\t@%p bra S4;\n\
         \tst.global.u64 [%addr], %bits;\n\tbra.uni NEXT;\n\
         S1:\n\tcvt.u16.u64 %h, %bits;\n\tst.global.u8 [%addr], %h;\n\tbra.uni NEXT;\n\
         S2:\n\tcvt.u16.u64 %h, %bits;\n\tst.global.u16 [%addr], %h;\n\tbra.uni NEXT;\n\
         S4:\n\tcvt.u32.u64 %w, %bits;\n\tst.global.u32 [%addr], %w;\n\
         NEXT:\n\tadd.u64 %i, %i, %stride;\n\tbra.uni LOOP;\nEND:\n\tret;\n}\n\n",
    );
    // The check kernel.
    s.push_str(&head("nf_check"));
    s.push_str(&answer());
    s.push_str(ENCODE);
    s.push_str(
        "\tsetp.eq.u64 %p, %esize, 1;\n\t@%p bra L1;\n\
         \tsetp.eq.u64 %p, %esize, 2;\n\t@%p bra L2;\n\
         \tsetp.eq.u64 %p, %esize, 4;\n\t@%p bra L4;\n\
         \tld.global.u64 %got, [%addr];\n\tbra.uni CMP;\n\
         L1:\n\tld.global.u8 %h, [%addr];\n\tcvt.u64.u16 %got, %h;\n\tbra.uni CMP;\n\
         L2:\n\tld.global.u16 %h, [%addr];\n\tcvt.u64.u16 %got, %h;\n\tbra.uni CMP;\n\
         L4:\n\tld.global.u32 %w, [%addr];\n\tcvt.u64.u32 %got, %w;\n\
         CMP:\n\tsetp.eq.u64 %p, %got, %bits;\n\t@%p bra NEXT;\n\
         \tadd.u64 %nwrong, %nwrong, 1;\n\tmin.u64 %lowest, %lowest, %i;\n\
         NEXT:\n\tadd.u64 %i, %i, %stride;\n\tbra.uni LOOP;\n\
         END:\n\tsetp.eq.u64 %p, %nwrong, 0;\n\t@%p bra DONE;\n\
         \tatom.global.add.u64 %t0, [%out], %nwrong;\n\
         \tadd.u64 %addr, %out, 8;\n\tatom.global.min.u64 %t0, [%addr], %lowest;\n\
         DONE:\n\tret;\n}\n",
    );
    s
}

/// Threads per block of both kernels.
pub const BLOCK: u32 = 256;

/// Blocks for `count` elements: enough to fill the GPU, no more.
pub fn grid(count: usize) -> u32 {
    count.div_ceil(BLOCK as usize).clamp(1, 8192) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A light well-formedness check: every register used is declared,
    /// every branch target is a label of its kernel, braces balance, and
    /// every statement ends with `;`.
    #[test]
    fn the_module_is_well_formed() {
        let m = module();
        assert_eq!(m.matches('{').count(), m.matches('}').count());
        assert!(m.contains(".entry nf_fill(") && m.contains(".entry nf_check("));
        for kernel in m.split(".visible .entry").skip(1) {
            let body = &kernel[kernel.find('{').unwrap()..];
            let declared: Vec<&str> = body
                .lines()
                .filter_map(|l| l.trim().strip_prefix(".reg "))
                .flat_map(|l| {
                    l.split_once(' ')
                        .unwrap()
                        .1
                        .trim_end_matches(';')
                        .split(',')
                })
                .map(str::trim)
                .collect();
            let labels: Vec<&str> = body
                .lines()
                .filter(|l| l.ends_with(':') && !l.starts_with('\t'))
                .map(|l| l.trim_end_matches(':'))
                .collect();
            let mut sorted = labels.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), labels.len(), "a label is defined twice");
            for line in body.lines().filter(|l| l.starts_with('\t')) {
                let l = line.trim();
                if l.starts_with(".reg") {
                    continue;
                }
                assert!(l.ends_with(';'), "{l}");
                let words: Vec<&str> = l.trim_end_matches(';').split_whitespace().collect();
                if let Some(k) = words.iter().position(|w| *w == "bra" || *w == "bra.uni") {
                    assert!(labels.contains(&words[k + 1]), "branch to {}", words[k + 1]);
                }
                for tok in
                    l.split(|c: char| !(c.is_alphanumeric() || c == '%' || c == '_' || c == '.'))
                {
                    if let Some(r) = tok.strip_prefix('%') {
                        let name = format!("%{}", r.split('.').next().unwrap());
                        let special =
                            ["%ctaid", "%ntid", "%tid", "%nctaid"].contains(&name.as_str());
                        assert!(
                            special || declared.contains(&name.as_str()),
                            "{name} undeclared in {l}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_constants_match_the_host_side_data() {
        // The kernels hash with the same constants as data.rs; a value
        // computed here the way the PTX does must equal data::input's.
        let mix = |mut z: u64| {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let rule = Exact::copy(crate::data::Dtype::I64, 4);
        let got = crate::data::input(&rule, 99, 3, 10);
        for i in 0..10u64 {
            let v = mix((3u64.wrapping_mul(K_RANK)) ^ i.wrapping_mul(K_INDEX) ^ 99);
            assert_eq!(got[i as usize * 8..][..8], v.to_le_bytes());
        }
        assert!(module().contains(&hex(K_RANK)) && module().contains(&hex(K_INDEX)));
    }

    #[test]
    fn grid_sizes() {
        assert_eq!(grid(1), 1);
        assert_eq!(grid(256), 1);
        assert_eq!(grid(257), 2);
        assert_eq!(grid(1 << 30), 8192);
    }
}
