//! The AVX2 backend: 8 lanes per vector in the 16 ymm registers, 11 for
//! values, one for the lanes of a last partial vector and four for the
//! lanes' scratch. Without mask registers or embedded broadcasts, the
//! constants are whole vectors in the pool, compares give lane masks in
//! vectors, and a partial vector loads and stores with `vmaskmovps`
//! (which, like AVX-512's masks, does not fault on the lanes it skips).
//!
//! Each lane runs the operations of its op's scalar FMA form
//! (`vmath::fma`), which the AVX2 tile loops run: the scaling by 2^n
//! that AVX-512 does with `vscalefps` is built from the exponent bits as
//! the scalar form builds it, so the results are bitwise the
//! interpreter's. `exp` branches per vector: when every lane's result is
//! normal it adds n to the exponent field, the same bits with two
//! multiplies fewer.
//!
//! An accumulating program keeps its 32 running f64 sums in memory, at the
//! pointer it is given, not in registers: 32 f64 would take eight of the
//! 16 ymm registers. Each 32-element chunk runs the steps over four
//! vectors, and each vector's summands are added to their eight sums with
//! a load, an add and a store; every sum sees its summands in the order
//! the AVX-512 code and `RowAcc` add them, so the sums are the same bits.

use iced_x86::Register;
use iced_x86::code_asm::*;

use super::emit::{self, Pool, Regs, Step, chunk_loop};
use crate::engine::jit::program::ACC_LANES;
use crate::engine::lanes::{Lane, LaneOp};
use crate::engine::rows::Summand;
use crate::vmath::{EXP_NORMAL_N, EXP_P, LN2_HI, LN2_LO, ROUND_MAGIC, TANH_CLAMP, TANH_G};

/// Registers for values.
const VALUE_REGS: usize = 11;
/// The lanes of a last partial vector (all ones in each selected lane).
const TAIL_MASK: usize = 11;
/// The first of the four scratch registers.
const SCRATCH: usize = 12;

/// The sums live in memory (see the module docs), so an accumulating
/// program has every value register.
pub(super) const REGS: Regs = Regs {
    values: VALUE_REGS,
    with_sums: Some(VALUE_REGS),
};

/// Vector register `i` (0..16) as a ymm.
fn ymm(i: usize) -> AsmRegisterYmm {
    get_ymm(Register::YMM0 + i as u32).expect("one of the 16 vector registers")
}

fn scratch() -> (
    AsmRegisterYmm,
    AsmRegisterYmm,
    AsmRegisterYmm,
    AsmRegisterYmm,
) {
    (
        ymm(SCRATCH),
        ymm(SCRATCH + 1),
        ymm(SCRATCH + 2),
        ymm(SCRATCH + 3),
    )
}

impl Pool {
    /// `bits` in every lane, as a memory operand.
    fn vec(&mut self, bits: u32) -> AsmMemoryOperand {
        ymmword_ptr(rsi + self.offset(bits))
    }
    fn v(&mut self, x: f32) -> AsmMemoryOperand {
        self.vec(x.to_bits())
    }
}

/// The lane `j` index vector `0, 1, .., 7`, for the tail's mask.
const IOTA: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

fn emit_op(
    a: &mut CodeAssembler,
    p: &mut Pool,
    lane: Lane,
    i: &[usize],
    d: usize,
) -> Result<(), IcedError> {
    let (t0, ..) = scratch();
    let d = ymm(d);
    let x = ymm(i[0]);
    let s = lane.scalar;
    match lane.op {
        LaneOp::Add => a.vaddps(d, x, ymm(i[1]))?,
        LaneOp::Sub => a.vsubps(d, x, ymm(i[1]))?,
        LaneOp::Mul => a.vmulps(d, x, ymm(i[1]))?,
        LaneOp::AddScalar => a.vaddps(d, x, p.v(s))?,
        LaneOp::SubScalar => a.vsubps(d, x, p.v(s))?,
        LaneOp::RSubScalar => {
            a.vmovups(t0, p.v(s))?;
            a.vsubps(d, t0, x)?;
        }
        LaneOp::MulScalar => a.vmulps(d, x, p.v(s))?,
        LaneOp::Relu => {
            // _CMP_NLE_UQ keeps positives and NaNs; the rest (-0 too)
            // become +0, as `x <= 0 ? 0 : x`
            a.vxorps(t0, t0, t0)?;
            a.vcmpps(t0, x, t0, 0x16)?;
            a.vandps(d, t0, x)?;
        }
        LaneOp::Abs => a.vandps(d, x, p.vec(0x7fff_ffff))?,
        LaneOp::Neg => a.vxorps(d, x, p.vec(0x8000_0000))?,
        LaneOp::Square => a.vmulps(d, x, x)?,
        LaneOp::LessScalar => {
            // _CMP_LT_OQ: false for NaN, as `x < s`
            a.vcmpps(t0, x, p.v(s), 0x11)?;
            a.vandps(d, t0, p.v(1.0))?;
        }
        LaneOp::Where => {
            // _CMP_NEQ_UQ: true for NaN, as `c != 0`
            a.vxorps(t0, t0, t0)?;
            a.vcmpps(t0, x, t0, 4)?;
            a.vblendvps(d, ymm(i[2]), ymm(i[1]), t0)?;
        }
        LaneOp::Exp => exp(a, p, x, d)?,
        LaneOp::Sigmoid => sigmoid(a, p, x, d)?,
        LaneOp::Tanh => tanh(a, p, x, d)?,
    }
    Ok(())
}

/// `vmath::fma::exp`: clamp, reduce by `n ln2`, polynomial, then times
/// 2^(n/2) and 2^(n - n/2), each made from exponent bits; or, when every
/// lane's result is normal, n added to the exponent field, which gives
/// the same bits in fewer operations (as `vmath::avx2::exp`).
fn exp(
    a: &mut CodeAssembler,
    p: &mut Pool,
    x: AsmRegisterYmm,
    d: AsmRegisterYmm,
) -> Result<(), IcedError> {
    let (t0, t1, t2, t3) = scratch();
    clamp(a, p, x, -104.0, 89.0)?; // t0
    a.vmulps(t1, t0, p.v(std::f32::consts::LOG2_E))?;
    a.vroundps(t1, t1, 0x08)?; // nf: nearest, no exceptions
    reduce_ln2(a, p, false)?; // t2 = r
    exp_reduced(a, p)?; // t0 = e^r
    a.vcvtps2dq(t1, t1)?; // n (nf is an integer; NaN gives i32::MIN)
    let mut scale_twice = a.create_label();
    let mut done = a.create_label();
    let (lo, hi) = EXP_NORMAL_N;
    a.vpcmpgtd(t2, t1, p.vec(hi as u32))?;
    a.vmovdqu(t3, p.vec(lo as u32))?;
    a.vpcmpgtd(t3, t3, t1)?;
    a.vpor(t2, t2, t3)?;
    a.vptest(t2, t2)?;
    a.jnz(scale_twice)?;
    a.vpslld(t2, t1, 23)?;
    a.vpaddd(d, t0, t2)?;
    a.jmp(done)?;
    a.set_label(&mut scale_twice)?;
    a.vpsrad(t2, t1, 1)?; // n1 = n >> 1
    a.vpsubd(t1, t1, t2)?; // n - n1
    pow2i(a, p, t2, 0)?;
    pow2i(a, p, t1, 0)?;
    a.vmulps(d, t0, t2)?;
    a.vmulps(d, d, t1)?;
    a.set_label(&mut done)
}

/// `vmath::fma::sigmoid`: `2^-64 / (p 2^(n - 64) + 2^-64)`.
fn sigmoid(
    a: &mut CodeAssembler,
    p: &mut Pool,
    x: AsmRegisterYmm,
    d: AsmRegisterYmm,
) -> Result<(), IcedError> {
    const TWO_M64: f32 = 1.0 / 18_446_744_073_709_551_616.0;
    let (t0, t1, _, t3) = scratch();
    clamp(a, p, x, -104.0, 40.0)?; // t0
    a.vmovups(t1, p.v(ROUND_MAGIC))?;
    a.vfmadd231ps(t1, t0, p.v(-std::f32::consts::LOG2_E))?;
    a.vsubps(t1, t1, p.v(ROUND_MAGIC))?; // nf
    reduce_ln2(a, p, true)?; // t2 = r for -xc
    exp_reduced(a, p)?; // t0 = e^r
    a.vcvtps2dq(t3, t1)?;
    pow2i(a, p, t3, -64)?;
    a.vfmadd213ps(t0, t3, p.v(TWO_M64))?;
    a.vmovups(d, p.v(TWO_M64))?;
    a.vdivps(d, d, t0)
}

/// `vmath::fma::tanh`: `f / (f + 1)` with `f = q 2^n + (2^n / 2 - 1/2)`,
/// given the sign of `x`.
fn tanh(
    a: &mut CodeAssembler,
    p: &mut Pool,
    x: AsmRegisterYmm,
    d: AsmRegisterYmm,
) -> Result<(), IcedError> {
    const HALF_LN2: f32 = 0.5 * std::f32::consts::LN_2;
    let (t0, t1, t2, t3) = scratch();
    a.vandps(t0, x, p.vec(0x7fff_ffff))?; // |x|
    a.vmovups(t1, p.v(TANH_CLAMP))?;
    a.vminps(t0, t1, t0)?; // min(clamp, |x|): NaN passes
    a.vmovups(t1, p.v(ROUND_MAGIC))?;
    a.vfmadd231ps(t1, t0, p.v(2.0 * std::f32::consts::LOG2_E))?;
    a.vsubps(t1, t1, p.v(ROUND_MAGIC))?; // nf
    a.vmovaps(t2, t0)?;
    a.vfnmadd231ps(t2, t1, p.v(HALF_LN2))?; // h
    a.vmovups(t3, p.v(TANH_G[4]))?;
    for c in TANH_G[..4].iter().rev() {
        a.vfmadd213ps(t3, t2, p.v(*c))?;
    }
    a.vmulps(t0, t2, t2)?;
    a.vfmadd213ps(t0, t3, t2)?; // q = h^2 P(h) + h
    a.vcvtps2dq(t3, t1)?;
    pow2i(a, p, t3, 0)?; // s = 2^n
    a.vmovups(t1, p.v(0.5))?;
    a.vfmsub213ps(t1, t3, p.v(0.5))?; // s/2 - 1/2
    a.vfmadd231ps(t1, t0, t3)?; // f = q s + (s/2 - 1/2)
    a.vaddps(t2, t1, p.v(1.0))?;
    a.vdivps(t2, t1, t2)?; // f / (f + 1)
    a.vandps(t2, t2, p.vec(0x7fff_ffff))?;
    a.vandps(d, x, p.vec(0x8000_0000))?;
    a.vorps(d, d, t2) // the quotient with the sign of x
}

/// `r = 2^(r + bias)` for the integers in `r`, as `vmath`'s `pow2i`:
/// the exponent field alone (the callers keep it within [-126, 127]).
fn pow2i(
    a: &mut CodeAssembler,
    p: &mut Pool,
    r: AsmRegisterYmm,
    bias: i32,
) -> Result<(), IcedError> {
    a.vpaddd(r, r, p.vec((127 + bias) as u32))?;
    a.vpslld(r, r, 23)
}

/// `t0 = min(hi, max(lo, x))`, NaN passing through as in the scalar
/// form's `clamp`.
fn clamp(
    a: &mut CodeAssembler,
    p: &mut Pool,
    x: AsmRegisterYmm,
    lo: f32,
    hi: f32,
) -> Result<(), IcedError> {
    let (t0, t1, _, _) = scratch();
    a.vmovups(t0, p.v(lo))?;
    a.vmaxps(t0, t0, x)?;
    a.vmovups(t1, p.v(hi))?;
    a.vminps(t0, t1, t0)
}

/// `t2 = t0 - t1 ln2` in two steps (Cody–Waite), or `-t0 - t1 ln2` with
/// `negate`; `t1` holds the rounded multiple.
fn reduce_ln2(a: &mut CodeAssembler, p: &mut Pool, negate: bool) -> Result<(), IcedError> {
    let (t0, t1, t2, _) = scratch();
    a.vmovaps(t2, t0)?;
    if negate {
        a.vfnmsub231ps(t2, t1, p.v(LN2_HI))?;
    } else {
        a.vfnmadd231ps(t2, t1, p.v(LN2_HI))?;
    }
    a.vfnmadd231ps(t2, t1, p.v(LN2_LO))
}

/// `t0 = 1 + r + r^2 P(r)` for `r` in `t2` (uses `t3`).
fn exp_reduced(a: &mut CodeAssembler, p: &mut Pool) -> Result<(), IcedError> {
    let (t0, _, t2, t3) = scratch();
    a.vmovups(t3, p.v(EXP_P[4]))?;
    for c in EXP_P[..4].iter().rev() {
        a.vfmadd213ps(t3, t2, p.v(*c))?;
    }
    a.vmulps(t0, t2, t2)?;
    a.vfmadd213ps(t0, t3, t2)?;
    a.vaddps(t0, t0, p.v(1.0))
}

/// Adds the summand of the 8 values in `x` to sums `8 vec .. 8 vec + 8`
/// (at `r10`), converted to f64 and added one by one, the sum the first
/// operand as in the AVX-512 code; a partial vector (`tail`) changes only
/// the sums of the lanes in `TAIL_MASK`.
fn accumulate(
    a: &mut CodeAssembler,
    p: &mut Pool,
    (x, summand): (usize, Summand),
    vec: i32,
    tail: bool,
) -> Result<(), IcedError> {
    let (t0, t1, t2, t3) = scratch();
    let x = if summand == Summand::Abs {
        // |x| is exact in f32 and in f64 alike
        a.vandps(t2, ymm(x), p.vec(0x7fff_ffff))?;
        SCRATCH + 2
    } else {
        x
    };
    a.vextractf128(xmm(SCRATCH + 1), ymm(x), 1)?;
    a.vcvtps2pd(t0, xmm(x))?;
    a.vcvtps2pd(t1, xmm(SCRATCH + 1))?;
    if summand == Summand::Square {
        a.vmulpd(t0, t0, t0)?;
        a.vmulpd(t1, t1, t1)?;
    }
    for (half, t) in [(0, t0), (1, t1)] {
        let at = ymmword_ptr(r10 + (64 * vec + 32 * half));
        a.vmovupd(t2, at)?;
        a.vaddpd(t2, t2, t)?;
        if tail {
            // the half's four lane masks, widened to 64 bits
            if half == 0 {
                a.vpmovsxdq(t3, xmm(TAIL_MASK))?;
            } else {
                a.vextracti128(xmm(SCRATCH + 3), ymm(TAIL_MASK), 1)?;
                a.vpmovsxdq(t3, xmm(SCRATCH + 3))?;
            }
            a.vmaskmovpd(at, t3, t2)?;
        } else {
            a.vmovupd(at, t2)?;
        }
    }
    Ok(())
}

/// One vector's steps, `disp` bytes past the element index; a partial
/// one (`tail`) under the lanes in `TAIL_MASK`. An accumulation adds to
/// the sums of vector `vec` of the chunk.
fn emit_steps(
    a: &mut CodeAssembler,
    p: &mut Pool,
    steps: &[Step],
    tail: bool,
    (disp, vec): (i32, i32),
) -> Result<(), IcedError> {
    let mask = ymm(TAIL_MASK);
    for st in steps {
        match st {
            Step::Load { slot, reg } => {
                a.mov(rax, qword_ptr(rdi + 8 * *slot as i32))?;
                let m = ymmword_ptr(rax + rcx * 4 + disp);
                if tail {
                    a.vmaskmovps(ymm(*reg), mask, m)?;
                } else {
                    a.vmovups(ymm(*reg), m)?;
                }
            }
            Step::Op { lane, ins, out } => emit_op(a, p, *lane, ins, *out)?,
            Step::Store { slot, reg, stream } => {
                a.mov(rax, qword_ptr(rdi + 8 * *slot as i32))?;
                let m = ymmword_ptr(rax + rcx * 4 + disp);
                if tail {
                    a.vmaskmovps(m, mask, ymm(*reg))?;
                } else if *stream {
                    a.vmovntps(m, ymm(*reg))?;
                } else {
                    a.vmovups(m, ymm(*reg))?;
                }
            }
            Step::Accumulate { reg, summand } => {
                accumulate(a, p, (*reg, *summand), vec, tail)?;
            }
        }
    }
    Ok(())
}

/// `TAIL_MASK` = the lanes `j < r11` (`r11` below 8, or negative: none),
/// from the count against 0..8.
fn tail_mask(a: &mut CodeAssembler, pool: &mut Pool) -> Result<(), IcedError> {
    a.vmovd(xmm(TAIL_MASK), r11d)?;
    a.vpbroadcastd(ymm(TAIL_MASK), xmm(TAIL_MASK))?;
    let iota = pool.block(&IOTA);
    a.vpcmpgtd(ymm(TAIL_MASK), ymm(TAIL_MASK), ymmword_ptr(rsi + iota))
}

/// The program's code and its constants.
pub(super) fn assemble(steps: &[Step]) -> Result<(Vec<u8>, Pool), IcedError> {
    emit::assemble(steps, 8, (assemble_plain, assemble_accumulating))
}

fn assemble_plain(steps: &[Step], pool: &mut Pool) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    // rdi: slot pointers, rsi: pool, rdx: len, rcx: element index
    chunk_loop(
        &mut a,
        pool,
        8,
        |a, pool| emit_steps(a, pool, steps, false, (0, 0)),
        |a, pool| {
            // lanes j < len - i (below 8)
            a.mov(r11, rdx)?;
            a.sub(r11, rcx)?;
            tail_mask(a, pool)?;
            emit_steps(a, pool, steps, true, (0, 0))
        },
    )?;
    emit::finish(a)
}

/// An accumulating program: each iteration runs a 32-element chunk as
/// four vectors, vector `k`'s elements adding to sums `8k .. 8k + 8`; a
/// last partial chunk runs each vector under its lanes, element `j`
/// adding to sum `j` (the other sums keep their values).
fn assemble_accumulating(steps: &[Step], pool: &mut Pool) -> Result<Vec<u8>, IcedError> {
    const _: () = assert!(ACC_LANES == 32, "four vectors of 8 per chunk");
    let mut a = CodeAssembler::new(64)?;
    // rdi: slot pointers, rsi: pool, rdx: len, rcx: the sums, then the
    // element index; r10: the sums; r11: lanes left in a partial chunk
    a.mov(r10, rcx)?;
    chunk_loop(
        &mut a,
        pool,
        32,
        |a, pool| {
            for k in 0..4 {
                emit_steps(a, pool, steps, false, (32 * k, k))?;
            }
            Ok(())
        },
        |a, pool| {
            a.mov(r11, rdx)?;
            a.sub(r11, rcx)?;
            for k in 0..4 {
                tail_mask(a, pool)?;
                emit_steps(a, pool, steps, true, (32 * k, k))?;
                a.sub(r11, 8)?;
            }
            Ok(())
        },
    )?;
    emit::finish(a)
}

/// Vector register `i` as an xmm.
fn xmm(i: usize) -> AsmRegisterXmm {
    get_xmm(Register::XMM0 + i as u32).expect("one of the 16 vector registers")
}
