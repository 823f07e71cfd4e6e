//! The AVX-512 backend: 16 lanes per vector, 28 of the 32 zmm registers
//! for values (four of those hold an accumulating program's sums), the
//! last four the lanes' scratch; partial vectors under mask registers.

use iced_x86::Register;
use iced_x86::code_asm::*;

use super::emit::{self, Pool, Regs, Step, chunk_loop};
use crate::engine::jit::program::ACC_LANES;
use crate::engine::lanes::{Lane, LaneOp};
use crate::engine::rows::Summand;
use crate::vmath::{EXP_P, LN2_HI, LN2_LO, ROUND_MAGIC, TANH_CLAMP, TANH_G};

/// Registers for values; the last four are the lanes' scratch.
const VALUE_REGS: usize = 28;
/// The first of the four registers holding an accumulating program's sums
/// (taken from the values' registers): sums `8k..8k + 8` in `SUM_REGS + k`.
const SUM_REGS: usize = VALUE_REGS - 4;

/// Vector register `i` (0..32) as a zmm.
fn zmm(i: usize) -> AsmRegisterZmm {
    get_zmm(Register::ZMM0 + i as u32).expect("one of the 32 vector registers")
}

/// Vector register `i` (0..32) as a ymm (its low half).
fn ymm(i: usize) -> AsmRegisterYmm {
    get_ymm(Register::YMM0 + i as u32).expect("one of the 32 vector registers")
}

pub(super) const REGS: Regs = Regs {
    values: VALUE_REGS,
    with_sums: Some(SUM_REGS),
};

impl Pool {
    /// `bits` broadcast to every lane, as a memory operand.
    fn at(&mut self, bits: u32) -> AsmMemoryOperand {
        dword_bcst(rsi + self.offset(bits))
    }
    fn f(&mut self, x: f32) -> AsmMemoryOperand {
        self.at(x.to_bits())
    }
}

fn emit_op(
    a: &mut CodeAssembler,
    p: &mut Pool,
    lane: Lane,
    i: &[usize],
    d: usize,
) -> Result<(), IcedError> {
    let (t0, t1, t2, t3) = (zmm(28), zmm(29), zmm(30), zmm(31));
    let d = zmm(d);
    let x = zmm(i[0]);
    let s = lane.scalar;
    match lane.op {
        LaneOp::Add => a.vaddps(d, x, zmm(i[1]))?,
        LaneOp::Sub => a.vsubps(d, x, zmm(i[1]))?,
        LaneOp::Mul => a.vmulps(d, x, zmm(i[1]))?,
        LaneOp::AddScalar => a.vaddps(d, x, p.f(s))?,
        LaneOp::SubScalar => a.vsubps(d, x, p.f(s))?,
        LaneOp::RSubScalar => {
            a.vbroadcastss(t0, p.ptr(s))?;
            a.vsubps(d, t0, x)?;
        }
        LaneOp::MulScalar => a.vmulps(d, x, p.f(s))?,
        LaneOp::Relu => {
            // _CMP_NLE_UQ keeps positives and NaNs; the zeroing move gives
            // +0 for the rest, -0 included, as `x <= 0 ? 0 : x`
            a.vcmpps(k2, x, p.f(0.0), 0x16)?;
            a.vmovaps(d.k2().z(), x)?;
        }
        LaneOp::Abs => a.vpandd(d, x, p.at(0x7fff_ffff))?,
        LaneOp::Neg => a.vpxord(d, x, p.at(0x8000_0000))?,
        LaneOp::Square => a.vmulps(d, x, x)?,
        LaneOp::LessScalar => {
            // _CMP_LT_OQ: false for NaN, as `x < s`
            a.vcmpps(k2, x, p.f(s), 0x11)?;
            a.vbroadcastss(d.k2().z(), p.ptr(1.0))?;
        }
        LaneOp::Where => {
            // _CMP_NEQ_UQ: true for NaN, as `c != 0`
            a.vpxord(t0, t0, t0)?;
            a.vcmpps(k2, x, t0, 4)?;
            a.vblendmps(d.k2(), zmm(i[2]), zmm(i[1]))?;
        }
        LaneOp::Exp => {
            // the operation sequence of `vmath::avx512::exp`
            clamp(a, p, x, -104.0, 89.0)?; // t0
            a.vmulps(t1, t0, p.f(std::f32::consts::LOG2_E))?;
            a.vrndscaleps(t1, t1, 0x08)?; // nf: nearest, no exceptions
            reduce_ln2(a, p, false)?; // t2 = r
            exp_reduced(a, p)?; // t0 = e^r
            a.vscalefps(d, t0, t1)?;
        }
        LaneOp::Sigmoid => {
            // the operation sequence of `vmath::avx512::sigmoid`
            const TWO_M64: f32 = 1.0 / 18_446_744_073_709_551_616.0;
            clamp(a, p, x, -104.0, 40.0)?; // t0
            a.vbroadcastss(t1, p.ptr(ROUND_MAGIC))?;
            a.vfmadd231ps(t1, t0, p.f(-std::f32::consts::LOG2_E))?;
            a.vsubps(t1, t1, p.f(ROUND_MAGIC))?; // nf
            reduce_ln2(a, p, true)?; // t2 = r for -xc
            exp_reduced(a, p)?; // t0 = e^r
            a.vsubps(t1, t1, p.f(64.0))?;
            a.vbroadcastss(t3, p.ptr(1.0))?;
            a.vscalefps(t3, t3, t1)?; // 2^(nf - 64)
            a.vfmadd213ps(t0, t3, p.f(TWO_M64))?;
            a.vbroadcastss(d, p.ptr(TWO_M64))?;
            a.vdivps(d, d, t0)?;
        }
        LaneOp::Tanh => {
            const HALF_LN2: f32 = 0.5 * std::f32::consts::LN_2;
            // the operation sequence of `vmath::avx512::tanh`
            a.vpandd(t0, x, p.at(0x7fff_ffff))?; // |x|
            a.vbroadcastss(t1, p.ptr(TANH_CLAMP))?;
            a.vminps(t0, t1, t0)?; // min(clamp, |x|): NaN passes
            a.vbroadcastss(t1, p.ptr(ROUND_MAGIC))?;
            a.vfmadd231ps(t1, t0, p.f(2.0 * std::f32::consts::LOG2_E))?;
            a.vsubps(t1, t1, p.f(ROUND_MAGIC))?; // nf
            a.vmovaps(t2, t0)?;
            a.vfnmadd231ps(t2, t1, p.f(HALF_LN2))?; // h
            a.vbroadcastss(t3, p.ptr(TANH_G[4]))?;
            for c in TANH_G[..4].iter().rev() {
                a.vfmadd213ps(t3, t2, p.f(*c))?;
            }
            a.vmulps(t0, t2, t2)?;
            a.vfmadd213ps(t0, t3, t2)?; // q = h^2 P(h) + h
            a.vbroadcastss(t3, p.ptr(1.0))?;
            a.vscalefps(t3, t3, t1)?; // s = 2^nf
            a.vbroadcastss(t1, p.ptr(0.5))?;
            a.vfmsub213ps(t1, t3, p.f(0.5))?; // s/2 - 1/2
            a.vfmadd231ps(t1, t0, t3)?; // f = q s + (s/2 - 1/2)
            a.vaddps(t2, t1, p.f(1.0))?;
            a.vdivps(t2, t1, t2)?; // f / (f + 1)
            a.vbroadcastss(d, p.ptr(f32::from_bits(0x8000_0000)))?;
            a.vpternlogd(d, x, t2, 0xCA)?; // sign of x, rest of the quotient
        }
    }
    Ok(())
}

/// `t0 = min(hi, max(lo, x))`, NaN passing through as in the intrinsics'
/// operand order.
fn clamp(
    a: &mut CodeAssembler,
    p: &mut Pool,
    x: AsmRegisterZmm,
    lo: f32,
    hi: f32,
) -> Result<(), IcedError> {
    let (t0, t1) = (zmm(28), zmm(29));
    a.vbroadcastss(t0, p.ptr(lo))?;
    a.vmaxps(t0, t0, x)?;
    a.vbroadcastss(t1, p.ptr(hi))?;
    a.vminps(t0, t1, t0)
}

/// `t2 = t0 - t1 ln2` in two steps (Cody–Waite), or `-t0 - t1 ln2` with
/// `negate`; `t1` holds the rounded multiple.
fn reduce_ln2(a: &mut CodeAssembler, p: &mut Pool, negate: bool) -> Result<(), IcedError> {
    let (t0, t1, t2) = (zmm(28), zmm(29), zmm(30));
    a.vmovaps(t2, t0)?;
    if negate {
        a.vfnmsub231ps(t2, t1, p.f(LN2_HI))?;
    } else {
        a.vfnmadd231ps(t2, t1, p.f(LN2_HI))?;
    }
    a.vfnmadd231ps(t2, t1, p.f(LN2_LO))
}

/// `t0 = 1 + r + r^2 P(r)` for `r` in `t2` (uses `t3`), as
/// `vmath::avx512`'s `exp_reduced`.
fn exp_reduced(a: &mut CodeAssembler, p: &mut Pool) -> Result<(), IcedError> {
    let (t0, t2, t3) = (zmm(28), zmm(30), zmm(31));
    a.vbroadcastss(t3, p.ptr(EXP_P[4]))?;
    for c in EXP_P[..4].iter().rev() {
        a.vfmadd213ps(t3, t2, p.f(*c))?;
    }
    a.vmulps(t0, t2, t2)?;
    a.vfmadd213ps(t0, t3, t2)?;
    a.vaddps(t0, t0, p.f(1.0))
}

/// The mask registers of a partial vector: `lanes` selects its elements
/// (loads and stores), `low` and `high` the same elements among its
/// first and last eight (sums in f64, eight to a register).
/// (Mask registers by number, 1..=7.)
#[derive(Clone, Copy)]
struct Masks {
    lanes: u8,
    low: u8,
    high: u8,
}

/// `r` written under mask register `k` (1..=7), merging.
fn masked(r: AsmRegisterZmm, k: u8) -> AsmRegisterZmm {
    match k {
        1 => r.k1(),
        2 => r.k2(),
        3 => r.k3(),
        4 => r.k4(),
        5 => r.k5(),
        6 => r.k6(),
        _ => r.k7(),
    }
}

/// `m` accessed under mask register `k` (1..=7).
fn masked_mem(m: AsmMemoryOperand, k: u8) -> AsmMemoryOperand {
    match k {
        1 => m.k1(),
        2 => m.k2(),
        3 => m.k3(),
        4 => m.k4(),
        5 => m.k5(),
        6 => m.k6(),
        _ => m.k7(),
    }
}

/// Adds the summand of the 16 values in `x` to the sums in the registers
/// `sums` and `sums + 1` (values 0..8 and 8..16), converted to f64 and
/// added one by one, as `RowAcc` adds them; under `masks`, only the
/// selected values' sums change.
fn accumulate(
    a: &mut CodeAssembler,
    p: &mut Pool,
    (x, summand): (usize, Summand),
    sums: usize,
    masks: Option<Masks>,
) -> Result<(), IcedError> {
    let (t0, t1, t2) = (28, 29, 30);
    // |x| is exact in f32 and in f64 alike
    let x = if summand == Summand::Abs {
        a.vpandd(zmm(t2), zmm(x), p.at(0x7fff_ffff))?;
        t2
    } else {
        x
    };
    a.vcvtps2pd(zmm(t0), ymm(x))?;
    a.vextractf64x4(ymm(t1), zmm(x), 1)?;
    a.vcvtps2pd(zmm(t1), ymm(t1))?;
    if summand == Summand::Square {
        a.vmulpd(zmm(t0), zmm(t0), zmm(t0))?;
        a.vmulpd(zmm(t1), zmm(t1), zmm(t1))?;
    }
    match masks {
        Some(m) => {
            a.vaddpd(masked(zmm(sums), m.low), zmm(sums), zmm(t0))?;
            a.vaddpd(masked(zmm(sums + 1), m.high), zmm(sums + 1), zmm(t1))
        }
        None => {
            a.vaddpd(zmm(sums), zmm(sums), zmm(t0))?;
            a.vaddpd(zmm(sums + 1), zmm(sums + 1), zmm(t1))
        }
    }
}

/// One vector's steps, `disp` bytes past the element index, on the lanes
/// `masks` selects (all without); an accumulation adds to the sums from
/// register `sums` on.
fn emit_steps(
    a: &mut CodeAssembler,
    p: &mut Pool,
    steps: &[Step],
    masks: Option<Masks>,
    (disp, sums): (i32, usize),
) -> Result<(), IcedError> {
    for st in steps {
        match st {
            Step::Accumulate { reg, summand } => {
                accumulate(a, p, (*reg, *summand), sums, masks)?;
            }
            Step::Load { slot, reg } => {
                a.mov(rax, qword_ptr(rdi + 8 * *slot as i32))?;
                let m = zmmword_ptr(rax + rcx * 4 + disp);
                if let Some(k) = masks {
                    a.vmovups(masked(zmm(*reg), k.lanes).z(), m)?;
                } else {
                    a.vmovups(zmm(*reg), m)?;
                }
            }
            Step::Op { lane, ins, out } => emit_op(a, p, *lane, ins, *out)?,
            Step::Store { slot, reg, stream } => {
                a.mov(rax, qword_ptr(rdi + 8 * *slot as i32))?;
                let m = zmmword_ptr(rax + rcx * 4 + disp);
                if let Some(k) = masks {
                    a.vmovups(masked_mem(m, k.lanes), zmm(*reg))?;
                } else if *stream {
                    a.vmovntps(m, zmm(*reg))?;
                } else {
                    a.vmovups(m, zmm(*reg))?;
                }
            }
        }
    }
    Ok(())
}

/// The program's code and its constants.
pub(super) fn assemble(steps: &[Step]) -> Result<(Vec<u8>, Pool), IcedError> {
    emit::assemble(steps, 1, (assemble_plain, assemble_accumulating))
}

fn assemble_plain(steps: &[Step], pool: &mut Pool) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    // rdi: slot pointers, rsi: pool, rdx: len, rcx: element index
    chunk_loop(
        &mut a,
        pool,
        16,
        |a, pool| emit_steps(a, pool, steps, None, (0, 0)),
        |a, pool| {
            // k1 = lanes [0, len - i), len - i < 16
            a.kmovw(k1, r8d)?;
            let k = Masks {
                lanes: 1,
                low: 1,
                high: 1,
            };
            emit_steps(a, pool, steps, Some(k), (0, 0))
        },
    )?;
    emit::finish(a)
}

/// An accumulating program: the sums live in four registers for the call,
/// and each iteration runs a 32-element chunk, its first 16 elements
/// adding to sums 0..16 and the next 16 to sums 16..32; a last partial
/// chunk runs under masks, its element `j` adding to sum `j` (the masks
/// keep the other sums as they are).
fn assemble_accumulating(steps: &[Step], pool: &mut Pool) -> Result<Vec<u8>, IcedError> {
    const _: () = assert!(ACC_LANES == 32, "two vectors of 16 per chunk");
    let mut a = CodeAssembler::new(64)?;
    // rdi: slot pointers, rsi: pool, rdx: len, rcx: the sums, then the
    // element index; r10: the sums
    a.mov(r10, rcx)?;
    for k in 0..4 {
        a.vmovupd(zmm(SUM_REGS + k), zmmword_ptr(r10 + 64 * k as i32))?;
    }
    chunk_loop(
        &mut a,
        pool,
        32,
        |a, pool| {
            emit_steps(a, pool, steps, None, (0, SUM_REGS))?;
            emit_steps(a, pool, steps, None, (64, SUM_REGS + 2))
        },
        |a, pool| {
            // the chunk's lanes [0, len - i), len - i < 32: k1 the first
            // vector's (k4 its high eight), k3 the second's (k5 its high
            // eight); the ops' own masks are k2
            a.kmovw(k1, r8d)?;
            a.shr(r8, 16)?;
            a.kmovw(k3, r8d)?;
            a.kshiftrw(k4, k1, 8)?;
            a.kshiftrw(k5, k3, 8)?;
            let first = Masks {
                lanes: 1,
                low: 1,
                high: 4,
            };
            let second = Masks {
                lanes: 3,
                low: 3,
                high: 5,
            };
            emit_steps(a, pool, steps, Some(first), (0, SUM_REGS))?;
            emit_steps(a, pool, steps, Some(second), (64, SUM_REGS + 2))
        },
    )?;
    for k in 0..4 {
        a.vmovupd(zmmword_ptr(r10 + 64 * k as i32), zmm(SUM_REGS + k))?;
    }
    emit::finish(a)
}
