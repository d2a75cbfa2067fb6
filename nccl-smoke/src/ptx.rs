//! The smoke test's two GPU kernels, as PTX text written here and loaded
//! with `cuModuleLoadData` (the driver compiles it: no toolkit, no NVRTC).
//!
//! - `nf_fill(ptr, count, seed, rank, nranks, dtype, mask, esize, mode)`
//!   writes rank `rank`'s input (`mode` 0) or the poison (`mode` 1: every
//!   bit of the right answer flipped, so it can never equal it);
//! - `nf_check(ptr, count, seed, nranks, dtype, mask, esize, out)` compares
//!   every element with the right answer and adds the number of wrong ones
//!   to `out[0]`, and the lowest wrong index into `out[1]` (atomic min).
//!
//! Both compute exactly what [`super::data`] computes on the host: element
//! `i` of rank `r` is `mix(seed ^ r·K1 ^ i·K2) & mask`, encoded in the type,
//! and the answer is the wrapping sum over ranks, encoded. The run checks
//! the two against each other on every GPU before it starts.

/// `Dtype::code()` order: f32, f16, bf16, f64, i32, i64, u8.
const K_RANK: u64 = 0x9E37_79B9_7F4A_7C15;
const K_INDEX: u64 = 0xD1B5_4A32_D192_ED03;

/// A 64-bit PTX literal.
fn hex(k: u64) -> String {
    format!("0x{k:016X}U")
}

/// PTX that computes `dst = mix(seed ^ r*K_RANK ^ i*K_INDEX) & mask`
/// (registers named by the caller; `%t0`, `%t1` are scratch).
fn value(dst: &str, rank: &str) -> String {
    let (kr, ki) = (hex(K_RANK), hex(K_INDEX));
    format!(
        "\tmul.lo.u64 %t0, {rank}, {kr};\n\
         \tmul.lo.u64 %t1, %i, {ki};\n\
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
         \tand.b64 {dst}, {dst}, %mask;\n"
    )
}

/// PTX that turns the integer-domain value `%v` into the element's bits
/// `%bits` by `%dtype`, masked to the element's size.
fn encode(tag: &str) -> String {
    format!(
        "\tsetp.eq.u32 %p, %dtype, 0;\n\t@%p bra {tag}_f32;\n\
         \tsetp.eq.u32 %p, %dtype, 1;\n\t@%p bra {tag}_f16;\n\
         \tsetp.eq.u32 %p, %dtype, 2;\n\t@%p bra {tag}_bf16;\n\
         \tsetp.eq.u32 %p, %dtype, 3;\n\t@%p bra {tag}_f64;\n\
         \tmov.b64 %bits, %v;\n\tbra.uni {tag}_done;\n\
         {tag}_f32:\n\tcvt.rn.f32.u64 %f, %v;\n\tmov.b32 %w, %f;\n\tcvt.u64.u32 %bits, %w;\n\tbra.uni {tag}_done;\n\
         {tag}_f16:\n\tcvt.rn.f32.u64 %f, %v;\n\tcvt.rn.f16.f32 %h, %f;\n\tcvt.u64.u16 %bits, %h;\n\tbra.uni {tag}_done;\n\
         {tag}_bf16:\n\tcvt.rn.f32.u64 %f, %v;\n\tmov.b32 %w, %f;\n\tshr.u32 %w, %w, 16;\n\tcvt.u64.u32 %bits, %w;\n\tbra.uni {tag}_done;\n\
         {tag}_f64:\n\tcvt.rn.f64.u64 %d, %v;\n\tmov.b64 %bits, %d;\n\
         {tag}_done:\n\tand.b64 %bits, %bits, %smask;\n"
    )
}

/// The answer of element `%i` into `%v`: the wrapping sum over ranks.
fn answer() -> String {
    format!(
        "\tmov.u64 %v, 0;\n\tmov.u64 %r, 0;\n\
         SUM:\n{}\tadd.u64 %v, %v, %x;\n\tadd.u64 %r, %r, 1;\n\
         \tsetp.lt.u64 %p, %r, %nranks;\n\t@%p bra SUM;\n",
        value("%x", "%r")
    )
}

const REGS: &str = "\t.reg .pred %p;\n\t.reg .b16 %h;\n\t.reg .b32 %w, %dtype, %mode;\n\
\t.reg .f32 %f;\n\t.reg .f64 %d;\n\
\t.reg .b64 %ptr, %count, %seed, %rank, %nranks, %mask, %esize, %smask, %out, %i, %stride, %addr, %v, %x, %r, %bits, %got, %t0, %t1, %nwrong, %first;\n";

/// The grid-stride prologue: `%i`, `%stride`, `%smask`, and the exit test.
const PROLOGUE: &str = "\tmov.u32 %w, %ctaid.x;\n\tcvt.u64.u32 %i, %w;\n\
\tmov.u32 %w, %ntid.x;\n\tcvt.u64.u32 %t0, %w;\n\tmul.lo.u64 %i, %i, %t0;\n\
\tmov.u32 %w, %tid.x;\n\tcvt.u64.u32 %t1, %w;\n\tadd.u64 %i, %i, %t1;\n\
\tmov.u32 %w, %nctaid.x;\n\tcvt.u64.u32 %stride, %w;\n\tmul.lo.u64 %stride, %stride, %t0;\n\
\tmov.u64 %smask, -1;\n\tsetp.eq.u64 %p, %esize, 8;\n\t@%p bra MASKED;\n\
\tshl.b64 %t0, %esize, 3;\n\tcvt.u32.u64 %w, %t0;\n\tmov.u64 %smask, 1;\n\tshl.b64 %smask, %smask, %w;\n\tsub.u64 %smask, %smask, 1;\n\
MASKED:\n";

/// The whole module.
pub fn module() -> String {
    let mut s = String::from(
        "// nccl-find smoke: fill and check kernels\n.version 7.0\n.target sm_70\n.address_size 64\n\n",
    );
    // The fill kernel.
    s.push_str(
        ".visible .entry nf_fill(\n\t.param .u64 a_ptr, .param .u64 a_count, .param .u64 a_seed,\n\
         \t.param .u64 a_rank, .param .u64 a_nranks, .param .u32 a_dtype, .param .u64 a_mask,\n\
         \t.param .u64 a_esize, .param .u32 a_mode)\n{\n",
    );
    s.push_str(REGS);
    s.push_str(
        "\tld.param.u64 %ptr, [a_ptr];\n\tld.param.u64 %count, [a_count];\n\tld.param.u64 %seed, [a_seed];\n\
         \tld.param.u64 %rank, [a_rank];\n\tld.param.u64 %nranks, [a_nranks];\n\tld.param.u32 %dtype, [a_dtype];\n\
         \tld.param.u64 %mask, [a_mask];\n\tld.param.u64 %esize, [a_esize];\n\tld.param.u32 %mode, [a_mode];\n",
    );
    s.push_str(PROLOGUE);
    s.push_str("LOOP:\n\tsetp.ge.u64 %p, %i, %count;\n\t@%p bra END;\n");
    s.push_str("\tsetp.ne.u32 %p, %mode, 0;\n\t@%p bra POISON;\n");
    s.push_str(&value("%v", "%rank"));
    s.push_str("\tbra.uni ENC;\nPOISON:\n");
    s.push_str(&answer());
    s.push_str("ENC:\n");
    s.push_str(&encode("E"));
    s.push_str("\tsetp.eq.u32 %p, %mode, 0;\n\t@%p bra STORE;\n\tnot.b64 %bits, %bits;\n\tand.b64 %bits, %bits, %smask;\nSTORE:\n");
    s.push_str(
        "\tmad.lo.u64 %addr, %i, %esize, %ptr;\n\
         \tsetp.eq.u64 %p, %esize, 1;\n\t@%p bra S1;\n\
         \tsetp.eq.u64 %p, %esize, 2;\n\t@%p bra S2;\n\
         \tsetp.eq.u64 %p, %esize, 4;\n\t@%p bra S4;\n\
         \tst.global.u64 [%addr], %bits;\n\tbra.uni NEXT;\n\
         S1:\n\tcvt.u16.u64 %h, %bits;\n\tst.global.u8 [%addr], %h;\n\tbra.uni NEXT;\n\
         S2:\n\tcvt.u16.u64 %h, %bits;\n\tst.global.u16 [%addr], %h;\n\tbra.uni NEXT;\n\
         S4:\n\tcvt.u32.u64 %w, %bits;\n\tst.global.u32 [%addr], %w;\n\
         NEXT:\n\tadd.u64 %i, %i, %stride;\n\tbra.uni LOOP;\nEND:\n\tret;\n}\n\n",
    );
    // The check kernel.
    s.push_str(
        ".visible .entry nf_check(\n\t.param .u64 a_ptr, .param .u64 a_count, .param .u64 a_seed,\n\
         \t.param .u64 a_nranks, .param .u32 a_dtype, .param .u64 a_mask, .param .u64 a_esize,\n\
         \t.param .u64 a_out)\n{\n",
    );
    s.push_str(REGS);
    s.push_str(
        "\tld.param.u64 %ptr, [a_ptr];\n\tld.param.u64 %count, [a_count];\n\tld.param.u64 %seed, [a_seed];\n\
         \tld.param.u64 %nranks, [a_nranks];\n\tld.param.u32 %dtype, [a_dtype];\n\tld.param.u64 %mask, [a_mask];\n\
         \tld.param.u64 %esize, [a_esize];\n\tld.param.u64 %out, [a_out];\n\
         \tmov.u64 %nwrong, 0;\n\tmov.u64 %first, -1;\n",
    );
    s.push_str(PROLOGUE);
    s.push_str("LOOP:\n\tsetp.ge.u64 %p, %i, %count;\n\t@%p bra END;\n");
    s.push_str(&answer());
    s.push_str(&encode("E"));
    s.push_str(
        "\tmad.lo.u64 %addr, %i, %esize, %ptr;\n\
         \tsetp.eq.u64 %p, %esize, 1;\n\t@%p bra L1;\n\
         \tsetp.eq.u64 %p, %esize, 2;\n\t@%p bra L2;\n\
         \tsetp.eq.u64 %p, %esize, 4;\n\t@%p bra L4;\n\
         \tld.global.u64 %got, [%addr];\n\tbra.uni CMP;\n\
         L1:\n\tld.global.u8 %h, [%addr];\n\tcvt.u64.u16 %got, %h;\n\tbra.uni CMP;\n\
         L2:\n\tld.global.u16 %h, [%addr];\n\tcvt.u64.u16 %got, %h;\n\tbra.uni CMP;\n\
         L4:\n\tld.global.u32 %w, [%addr];\n\tcvt.u64.u32 %got, %w;\n\
         CMP:\n\tsetp.eq.u64 %p, %got, %bits;\n\t@%p bra NEXT;\n\
         \tadd.u64 %nwrong, %nwrong, 1;\n\tmin.u64 %first, %first, %i;\n\
         NEXT:\n\tadd.u64 %i, %i, %stride;\n\tbra.uni LOOP;\n\
         END:\n\tsetp.eq.u64 %p, %nwrong, 0;\n\t@%p bra DONE;\n\
         \tatom.global.add.u64 %t0, [%out], %nwrong;\n\
         \tadd.u64 %addr, %out, 8;\n\tatom.global.min.u64 %t0, [%addr], %first;\n\
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
        let t = super::super::Dtype::I64;
        let got = super::super::data::input(t, 99, 3, 4, 10);
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
